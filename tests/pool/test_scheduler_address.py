"""A Dask scheduler address is checked once, before anything connects: scheme, host, port."""

from __future__ import annotations

import pytest

from imle_solvers import SolverPool
from imle_solvers.errors import ConfigError
from imle_solvers.pool._address import scheduler_address
from imle_solvers.training import TrainConfig


@pytest.mark.parametrize(
    "address",
    [
        "tcp://10.0.0.5:8786",
        "tls://scheduler.example.org:8786",
        "tcp://[::1]:8786",
        "tcp://[fe80::1%eth0]:1",
        "localhost:65535",
        "tcp://my_host-2:8786",
    ],
)
def test_addresses_dask_can_reach_from_another_process(address: str) -> None:
    assert scheduler_address(address) == address
    assert TrainConfig(problem="knapsack", dask_address=address).dask_address == address


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("", "empty"),
        ("abc", "no port"),
        ("tcp://host", "no port"),
        ("tcp://[::1]", "no port"),
        ("tcp://[::1", "the '[' of an IPv6 address is not closed"),
        ("tcp://[not-v6]:1", "'not-v6' is not an IPv6 address"),
        ("tcp://::1:8786", "an IPv6 host goes in brackets"),
        ("inproc://x", "the scheme 'inproc://' is not tcp:// or tls://"),
        ("ucx://host:8786", "the scheme 'ucx://' is not tcp:// or tls://"),
        ("tcp://:8786", "no host"),
        ("tcp://a b:8786", "'a b' is not a host name or address"),
        ("tcp://host:0", "the port '0' is not a number in 1-65535"),
        ("tcp://host:65536", "the port '65536' is not a number in 1-65535"),
        ("tcp://host:port", "the port 'port' is not a number"),
        ("tcp://host:8786/", "the port '8786/' is not a number"),
        ("tcp://host:٣", "the port '٣' is not a number"),  # a digit, but not an ASCII one
    ],
)
def test_malformed_addresses_say_what_is_expected_and_what_is_wrong(address: str, why: str) -> None:
    expected = (
        "must be a Dask scheduler address tcp://HOST:PORT or tls://HOST:PORT (e.g. tcp://10.0.0.5:8786)"
    )
    with pytest.raises(ValueError) as info:
        scheduler_address(address)
    assert str(info.value).startswith(f"{expected}, got {address!r}: {why}")
    with pytest.raises(ConfigError, match="dask_address must be a Dask scheduler address") as config:
        TrainConfig(dask_address=address)
    assert why in config.value.reason
    with pytest.raises(ValueError, match="dask_address must be a Dask scheduler address"):
        SolverPool(backend="dask", dask_address=address)  # before anything connects


@pytest.mark.parametrize("length", [59, 60, 61, 200])
def test_the_message_quotes_at_most_60_characters_of_the_address(length: int) -> None:
    address = "tcp://" + "h" * (length - 6)  # no port: refused, quoted whole up to 60 characters
    with pytest.raises(ValueError) as info:
        scheduler_address(address)
    shown = address if length <= 60 else address[:59] + "…"
    assert len(shown) == min(length, 60)
    assert str(info.value).endswith(f", got {shown!r}: no port")

"""The address of a Dask scheduler, checked once before anything connects: ``SCHEME://HOST:PORT``."""

from __future__ import annotations

import ipaddress
import re

__all__ = ["SCHEMES", "scheduler_address"]

SCHEMES = ("tcp", "tls")
"""The transports a scheduler on another machine is reached by (``tls`` takes its certificates from
Dask's configuration). Dask's ``inproc://`` reaches a scheduler in the same process only, and ``ucx://``
needs the UCX extras of Dask: neither serves a training run's separate processes."""

_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?")
_EXPECTED = "a Dask scheduler address tcp://HOST:PORT or tls://HOST:PORT (e.g. tcp://10.0.0.5:8786)"


def scheduler_address(text: str) -> str:
    """``text`` if it is a scheduler address Dask can connect to from another process, else a
    ``ValueError`` saying what is expected and what is wrong (``"must be … , got 'abc': no port"``).

    A bare ``HOST:PORT`` means ``tcp://HOST:PORT``, as for Dask; an IPv6 host is written in brackets
    (``tcp://[::1]:8786``); the port lies in 1-65535. The message quotes ``text`` whole up to 60
    characters, and a longer one as its first 59 and ``…`` (one short line, whatever was passed).
    """
    if not text.strip():
        return _refuse(text, "empty")
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    if scheme not in SCHEMES:
        return _refuse(text, f"the scheme {scheme + '://'!r} is not tcp:// or tls://")
    if rest.startswith("["):  # [IPv6]:PORT
        host, closed, tail = rest[1:].partition("]")
        if not closed:
            return _refuse(text, "the '[' of an IPv6 address is not closed")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return _refuse(text, f"{host!r} is not an IPv6 address")
        if not tail.startswith(":"):
            return _refuse(text, "no port")
        port = tail[1:]
    else:
        host, colon, port = rest.rpartition(":")
        if not colon:
            return _refuse(text, "no port")
        if ":" in host:
            return _refuse(text, "an IPv6 host goes in brackets, e.g. tcp://[::1]:8786")
        if not _HOST.fullmatch(host):
            return _refuse(text, "no host" if not host else f"{host!r} is not a host name or address")
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        return _refuse(text, f"the port {port!r} is not a number in 1-65535")
    return text


def _refuse(text: str, why: str) -> str:
    shown = text if len(text) <= 60 else text[:59] + "…"
    raise ValueError(f"must be {_EXPECTED}, got {shown!r}: {why}")

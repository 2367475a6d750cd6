"""Processes of one torchrun job that disagree or fail: every process ends with one line, never a
traceback, and a non-zero exit status.

The launches run ``ddp_failures.py`` under ``torchrun`` (each process's output in its own log file) or
one process alone with the environment torchrun would set, each bounded in time.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from imle_solvers.errors import ConfigError, DistributedError
from imle_solvers.training import TrainConfig
from imle_solvers.training.distributed import (
    DIST_TIMEOUT_RANGE,
    DistributedContext,
    peer_failure,
    process_failures,
    process_group,
)
from imle_solvers.training.plan import PROCESS_SETTINGS
from tests.support.launch import torchrun
from tests.support.paths import ROOT

WORKER = str(ROOT / "tests" / "training" / "ddp_failures.py")


@pytest.fixture(autouse=True)
def sigterm_restored() -> Any:
    """A failure under `process_failures` leaves SIGTERM ignored (the process is ending): give the
    handler back after each test."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


HINT = "Try 'imle-solvers train --help' for more information."


def launch(mode: str, out: Path, timeout: float = 100) -> tuple[dict[int, list[str]], dict[int, int]]:
    """Run ``ddp_failures.py MODE`` on two processes; returns each rank's stderr lines and the exit
    status each rank wrote (a rank killed before it could write has none). The agent checks its
    processes every 2 s, so that a process that sees another die reports it before the agent stops it."""
    logs = out / "logs"
    done = torchrun(
        [WORKER, mode, str(out)],
        timeout=timeout,
        launcher=["--log-dir", str(logs), "--redirects", "3", "--monitor-interval", "2"],
    )
    assert done.returncode != 0, done.stderr[-2000:]  # the job failed, as torchrun says
    lines = {}
    for rank in (0, 1):
        (log,) = logs.glob(f"*/attempt_0/{rank}/stderr.log")
        lines[rank] = log.read_text().splitlines()
    status = {
        r: int((out / f"status-rank{r}").read_text()) for r in (0, 1) if (out / f"status-rank{r}").exists()
    }
    return lines, status


@pytest.mark.timeout(120)
def test_processes_started_with_other_settings_are_refused_on_each(tmp_path: Path) -> None:
    lines, status = launch("mismatch", tmp_path)
    assert status == {0: 2, 1: 2}
    for rank in (0, 1):  # the same line on each, naming the setting and both values
        assert lines[rank] == [
            "imle-solvers train: error: argument --seeds/--seed: differs between the training processes: "
            "rank 0 has 0, rank 1 has 1 (start every process of the job with the same settings)",
            HINT,
        ]


@pytest.mark.timeout(120)
def test_a_process_that_dies_ends_the_others_with_one_line(tmp_path: Path) -> None:
    start = time.monotonic()
    lines, status = launch("die", tmp_path)
    assert status == {0: 1}  # process 1 was killed; process 0 ended by itself, with status 1
    (line,) = lines[0]
    assert line.startswith(
        "imle-solvers train: error: training process 0 of 2: another training process stopped (it died or "
        "was killed), so this one stops too ("
    ), line
    assert lines[1] == []  # SIGKILL: nothing to say
    assert time.monotonic() - start < 90


@pytest.mark.slow  # two interpreters, then a 3 s time-out: 15-25 s
@pytest.mark.timeout(120)
def test_a_process_that_stops_answering_ends_every_process_with_one_line(tmp_path: Path) -> None:
    lines, status = launch("hang", tmp_path)
    assert status == {0: 1, 1: 1}
    (first,) = lines[0]
    assert first.startswith(
        "imle-solvers train: error: training process 0 of 2: another training process did not answer "
        "within --dist-timeout 3 s, so this one stops too ("
    ), first
    (second,) = lines[1]  # torchrun stopped the process that hung, which says so
    assert second.startswith("imle-solvers train: error: training process 1 of 2: stopped by SIGTERM")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(60)
def test_a_process_whose_peer_never_arrives_ends_with_one_line() -> None:
    port = _free_port()
    argv = [
        sys.executable,
        "-m",
        "imle_solvers",
        "train",
        "--methods",
        "spo+",
        "--n-train",
        "16",
        "--batch-size",
        "8",
    ]
    argv += ["--n-test", "8", "--epochs", "1", "--quiet", "--dist-timeout", "1"]
    children = []
    for rank in (0, 1):  # each alone: rank 0 waits for rank 1, rank 1 for rank 0's store (another port)
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": "1",
            "WORLD_SIZE": "2",
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port if rank == 0 else _free_port()),
        }
        children.append(subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True))
    for rank, child in enumerate(children):
        try:
            _, err = child.communicate(timeout=45)
        finally:
            child.kill()
        assert child.returncode == 1, err
        (line,) = err.splitlines()  # c10d's C++ log of every retry is held back: one line
        assert (
            line.startswith(f"imle-solvers train: error: training process {rank} of 2: ")
            and "were all 2 started, with the same MASTER_ADDR and MASTER_PORT?" in line
        ), line


# --- the pieces, in one process ----------------------------------------------------------------------


def _gathered(monkeypatch: pytest.MonkeyPatch, others: list[dict[str, Any]]) -> None:
    """``all_gather_object`` as if the other processes held ``others`` (this process is rank 0)."""
    import torch.distributed as dist

    def all_gather_object(out: list[Any], mine: Any) -> None:
        from imle_solvers.training.distributed import DistributedContext  # noqa: F401 - the same hashes

        out[0] = mine
        for i, settings in enumerate(others, start=1):
            import hashlib
            import json

            digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()
            out[i] = (digest, settings)

    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)


def test_agree_names_the_first_setting_that_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = TrainConfig(n_train=16, n_test=8, batch_size=8, epochs=2, methods=("spo+", "pfyl")).plan()
    mine = plan.job_settings
    group = DistributedContext(0, 3, 0, "gloo", torch.device("cpu"))
    _gathered(monkeypatch, [dict(mine), dict(mine)])
    group.agree(mine)  # everybody alike
    for key, other in [("epochs", 3), ("methods", ["spo+"]), ("lr", 0.5), ("schedule", "paper")]:
        _gathered(monkeypatch, [dict(mine), {**mine, key: other}])
        with pytest.raises(ConfigError) as info:
            group.agree(mine)
        assert info.value.field == key
        assert f"rank 2 has {other if not isinstance(other, list) else ' '.join(other)}" in info.value.reason
    _gathered(monkeypatch, [{k: v for k, v in mine.items() if k != "deg"}, dict(mine)])
    with pytest.raises(ConfigError, match="rank 1 has none") as info:
        group.agree(mine)  # a setting one process lacks
    assert info.value.field == "deg"


def test_the_settings_a_process_may_choose_itself_are_not_compared() -> None:
    base = {"problem": "knapsack", "oracle": "host", "n_train": 16, "n_test": 8, "batch_size": 8}
    one = TrainConfig(**base).plan()  # type: ignore[arg-type]
    other = TrainConfig(
        **base,  # type: ignore[arg-type]
        threads=2,
        workers=1,
        show_progress=False,
        dist_timeout=60,
    ).plan()
    assert one.job_settings == other.job_settings
    assert not PROCESS_SETTINGS & (set(one.job_settings) - {"device"})
    assert one.job_settings["device"] == "cpu"
    on_gpu = [  # process r on cuda:r, as torchrun places them
        dataclasses.replace(one, device=torch.device("cuda", r), record={**one.record, "device": f"cuda:{r}"})
        for r in (0, 1)
    ]
    assert on_gpu[0].job_settings == on_gpu[1].job_settings  # the device's type: each has its own GPU
    assert on_gpu[0].job_settings["device"] == "cuda"
    assert one.job_settings != TrainConfig(**base, seeds=(1,)).plan().job_settings  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "starting", "kind", "said"),
    [
        (
            "Connection reset by peer",
            False,
            "died",
            "another training process stopped (it died or was killed)",
        ),
        ("Connection closed by peer [127.0.0.1]:5", False, "died", "it died or was killed"),
        ("Timed out waiting 3000ms for recv operation to complete", False, "timed out", "did not answer"),
        ("Timed out waiting 3000ms for recv operation to complete", True, "missing", "did not all arrive"),
        ("unhandled system error", False, "failed", "the process group failed (unhandled system error)"),
    ],
)
def test_a_failed_collective_becomes_one_line(error: str, starting: bool, kind: str, said: str) -> None:
    raw = RuntimeError(
        f"[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] {error}. This is typically caused"
    )
    failure = peer_failure(raw, 300.0, starting=starting)
    assert failure is not None and failure.kind == kind and said in str(failure)
    assert "\n" not in str(failure) and "pair.cc" not in str(failure) and "typically" not in str(failure)


def test_an_error_that_is_not_the_process_group_s_stays_as_it_is() -> None:
    assert peer_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied"), 300.0) is None
    assert peer_failure(ValueError("Connection reset by peer"), 300.0) is None
    store = torch.distributed.DistStoreError(
        "Timed out after 3 seconds waiting for clients. 1/2 clients joined."
    )
    missing = peer_failure(store, 5.0, starting=True)
    assert missing is not None and missing.kind == "missing"
    assert "did not all arrive within --dist-timeout 5 s" in str(missing)
    with pytest.raises(RuntimeError, match="shapes"), process_failures(5.0):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")
    with pytest.raises(DistributedError, match="it died or was killed"), process_failures(5.0):
        raise RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer")


@pytest.mark.parametrize("seconds", [0.0, 1e-9, 0.5, 604801.0, 1e10, 1e300, float("inf"), float("nan")])
def test_the_time_out_is_bounded(seconds: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match=r"dist_timeout must be in \[1, 604800\] seconds"):
        TrainConfig(dist_timeout=seconds)
    with pytest.raises(ValueError, match="timeout must be in"):
        process_group("cpu", seconds)  # before any rendezvous
    low, high = DIST_TIMEOUT_RANGE
    assert (
        TrainConfig(dist_timeout=low).dist_timeout == 1.0
        and TrainConfig(dist_timeout=high).dist_timeout == high
    )


def test_sigterm_ends_a_training_process_with_its_line_then_is_ignored() -> None:
    if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        pytest.skip("SIGTERM has a handler of its own here: process_failures leaves it alone")
    try:
        with pytest.raises(DistributedError, match="stopped by SIGTERM") as info, process_failures(5.0):
            os.kill(os.getpid(), signal.SIGTERM)  # torchrun stopping every process when one failed
            time.sleep(5)
        assert info.value.kind == "stopped"
        # the process now ends with its line: a second SIGTERM must not cut the line short
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with process_failures(5.0):  # a run that ends well gives the handler back
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

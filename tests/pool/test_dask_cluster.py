"""SolverPool on a real Dask cluster: ``dask scheduler`` and two ``dask worker`` programs on 127.0.0.1.

Training through the pool gives the serial result; a worker killed in the middle of a batch costs at most
one retried step; a TLS-only cluster is reached through Dask's own configuration; no process is left
behind (every program runs in its own process group, killed whole at the end).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from imle_solvers import IMLE, Gumbel, WorkerCrashedError
from imle_solvers.pool import SolverPool
from imle_solvers.training import TrainConfig, run
from tests.support.launch import torchrun
from tests.support.oracles import k_subsets
from tests.support.paths import ROOT
from tests.support.pool_oracles import Announcing

pytestmark = pytest.mark.slow  # three Python programs start (seconds each), then a few training steps
distributed = pytest.importorskip("distributed")

DASK = shutil.which("dask") or str(Path(sys.executable).with_name("dask"))
STATES = k_subsets(6, 2)


class Cluster:
    """A scheduler and ``workers`` worker programs, each in its own process group, logs in ``folder``."""

    def __init__(self, folder: Path, workers: int = 2, tls: dict[str, str] | None = None) -> None:
        self.folder, self.tls = folder, tls
        self.programs: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        try:
            self.address = self._scheduler()
            self.workers = [self._start("worker", i) for i in range(workers)]
        except BaseException:
            self.close()
            raise

    def _security(self) -> list[str]:
        if self.tls is None:
            return []
        return ["--tls-ca-file", self.tls["ca"], "--tls-cert", self.tls["cert"], "--tls-key", self.tls["key"]]

    def _start(self, role: str, index: int = 0) -> subprocess.Popen[bytes]:
        if role == "scheduler":
            protocol = ["--protocol", "tls"] if self.tls else []
            args = ["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", *protocol]
            args += ["--scheduler-file", str(self.folder / "scheduler.json")]
        else:
            args = ["worker", self.address, "--nthreads", "1", "--no-dashboard", "--memory-limit", "0"]
            args += ["--name", f"w{index}", "--death-timeout", "60"]
        with open(self.folder / f"{role}{index}.log", "wb") as log:  # the program keeps its own copy
            program = subprocess.Popen(
                [DASK, *args, *self._security()],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # its own process group: the nanny and its worker die together
            )
        self.programs.append(program)
        return program

    def _scheduler(self) -> str:
        self._start("scheduler")
        info = self.folder / "scheduler.json"
        deadline = time.monotonic() + 60
        while not info.exists() or not info.read_text().strip():
            assert self.programs[0].poll() is None, self.log("scheduler0")
            assert time.monotonic() < deadline, "the scheduler did not start in 60 s"
            time.sleep(0.1)
        return str(json.loads(info.read_text())["address"])

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")[-3000:]

    def kill(self, program: subprocess.Popen[bytes]) -> None:
        """SIGKILL a program's whole process group (a Dask nanny and the worker process it runs)."""
        try:
            os.killpg(program.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        program.wait(timeout=30)

    def close(self) -> None:
        for program in reversed(self.programs):
            self.kill(program)

    def left_behind(self, seconds: float = 15.0) -> list[int]:
        """Process groups of the programs that still have a process after ``seconds``."""
        deadline = time.monotonic() + seconds
        while True:
            alive = []
            for program in self.programs:
                try:
                    os.killpg(program.pid, 0)
                    alive.append(program.pid)
                except ProcessLookupError:
                    pass
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.2)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path)
    try:
        with distributed.Client(running.address, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
        yield running
    finally:
        running.close()
        assert running.left_behind() == []


def train(pool: SolverPool | None, folder: Path, steps: int = 4, on_step: object = None) -> dict[str, object]:
    """A few SGD steps of a linear model through an I-MLE layer; the noise of step ``t`` is seeded by ``t``
    so that a step that raised can be run again with the same noise."""
    oracle = Announcing(STATES, str(folder), delay=0.02)  # 24 rows per call: ~0.5 s of solving
    torch.manual_seed(0)
    model = nn.Linear(4, 6).double()
    x = torch.randn(8, 4, dtype=torch.float64)
    target = torch.from_numpy(STATES[torch.randint(len(STATES), (8,)).numpy()])  # [8, 6]
    noise = torch.Generator()
    layer = IMLE(oracle, Gumbel(), samples=3, pool=pool, generator=noise)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    retried: list[int] = []
    for step in range(steps):
        if callable(on_step):
            on_step(step)
        for attempt in range(2):
            noise.manual_seed(step)
            try:
                z = layer(model(x))  # z = MAP(θ + ε)   [8, 3, 6]
                loss = ((z - target.unsqueeze(1)) ** 2).sum()
                opt.zero_grad()
                loss.backward()
                break
            except WorkerCrashedError:
                if attempt:
                    raise
                retried.append(step)
        opt.step()
    return {"weight": model.weight.detach().clone(), "bias": model.bias.detach().clone(), "retried": retried}


@pytest.mark.timeout(240)
def test_training_on_a_cluster_survives_a_worker_killed_mid_batch(cluster: Cluster, tmp_path: Path) -> None:
    folder = tmp_path / "solving"
    folder.mkdir()
    serial = train(None, folder)
    killed: list[int] = []

    def kill_one_worker_mid_batch(step: int) -> None:
        if step != 2:
            return
        for stale in folder.iterdir():
            stale.unlink()

        def killer() -> None:  # the first worker seen solving in step 2 dies with its nanny
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for seen in folder.iterdir():
                    group = os.getpgid(int(seen.name)) if Path(f"/proc/{seen.name}").exists() else None
                    victim = next((p for p in cluster.workers if p.pid == group), None)
                    if victim is not None:
                        killed.append(victim.pid)
                        cluster.kill(victim)
                        return
                time.sleep(0.01)

        threading.Thread(target=killer, daemon=True).start()

    with SolverPool(backend="dask", dask_address=cluster.address, fallback=False, chunksize=4) as pool:
        on_cluster = train(pool, folder, on_step=kill_one_worker_mid_batch)
        assert pool.stats["oracles_shipped"] >= 1
    assert len(killed) == 1  # a worker died while a batch was being solved
    assert [p.poll() is not None for p in cluster.workers].count(True) == 1
    assert on_cluster["retried"] in ([], [2])  # the step completed, or raised and completed when run again
    assert torch.equal(on_cluster["weight"], serial["weight"])  # type: ignore[arg-type]
    assert torch.equal(on_cluster["bias"], serial["bias"])  # type: ignore[arg-type]


def _certificate(folder: Path) -> dict[str, str]:
    """A self-signed certificate for 127.0.0.1 (openssl), used as CA, server and client certificate."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    subprocess.run(
        [
            "openssl",
            *request,
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return {"ca": str(cert), "cert": str(cert), "key": str(key)}


@pytest.mark.timeout(240)
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_a_tls_cluster_is_reached_through_dasks_configuration(tmp_path: Path) -> None:
    import dask

    tls = _certificate(tmp_path)
    running = Cluster(tmp_path, workers=1, tls=tls)
    try:
        assert running.address.startswith("tls://")
        refused = (OSError, TimeoutError, TypeError)  # without the certificates
        with dask.config.set({"distributed.comm.timeouts.connect": "5s"}), pytest.raises(refused):
            distributed.Client(running.address, timeout=5).close()
        security = {
            "distributed.comm.tls.ca-file": tls["ca"],
            "distributed.comm.tls.client.cert": tls["cert"],
            "distributed.comm.tls.client.key": tls["key"],
        }
        oracle = Announcing(STATES, str(tmp_path))
        weights = np.random.default_rng(0).normal(size=(12, 6))
        with (
            dask.config.set(security),
            SolverPool(backend="dask", dask_address=running.address, fallback=False, chunksize=3) as pool,
        ):
            np.testing.assert_array_equal(pool.solve_batch(oracle, weights), oracle.solve_batch(weights))
            assert pool.last_plan is not None and pool.last_plan.chunks == 4
    finally:
        running.close()
    assert running.left_behind() == []


KNAPSACK = ["--problem", "knapsack", "--oracle", "host", "--n-train", "16", "--n-test", "8", "--epochs", "1"]
KNAPSACK += ["--batch-size", "8", "--samples", "2", "--methods", "imle-mumu", "--seed", "1", "--quiet"]
"""A training run whose every solve is a CP-SAT call: the batches go to the cluster."""


@pytest.mark.timeout(300)
def test_train_command_on_a_cluster_equals_serial(cluster: Cluster, tmp_path: Path) -> None:
    serial = run(TrainConfig.from_argv(KNAPSACK))[0]
    on_cluster = run(TrainConfig.from_argv([*KNAPSACK, "--dask-address", cluster.address]))[0]
    assert on_cluster.curve == serial.curve and on_cluster.train_loss == serial.train_loss
    # two training processes share the cluster (each sends its share of every batch)
    shared = ["--dask-address", cluster.address, "--out", str(tmp_path / "ddp")]
    done = torchrun(["-m", "imle_solvers", "train", *KNAPSACK, *shared], timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    ddp = json.loads((tmp_path / "ddp" / "results.json").read_text())["runs"][0]
    np.testing.assert_allclose(ddp["curve"], serial.curve, rtol=2e-3)
    np.testing.assert_allclose(ddp["train_loss"], serial.train_loss, rtol=2e-3)

"""What a command checks on this machine before any work: its device and its output folder.

[`CommandConfig.preflight`][imle_solvers.app.config.CommandConfig.preflight] calls `check_device` and
`check_output_dir`; a configuration's ``device`` field is constrained by `device_name` and read by
`resolve_device`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["DEVICES", "check_device", "check_output_dir", "device_name", "resolve_device"]

DEVICES = ("cpu", "cuda", "auto")
"""The device kinds a ``device`` setting names (``cuda:N`` picks one CUDA device)."""


def device_name(value: Any) -> str:
    """The constraint of a ``device`` setting: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (not yet whether
    this machine has it: `check_device`)."""
    text = str(value)
    kind, colon, index = text.partition(":")
    if kind not in DEVICES or (colon and (kind != "cuda" or not index.isdigit())):  # "cuda:" too
        raise ValueError(f"must be cpu, cuda, cuda:N or auto, got {value!r}")
    return text


def resolve_device(device: Any, local_rank: int | None = None) -> Any:
    """The ``torch.device`` of a ``device`` setting: the one place where a name becomes a device.

    ``auto`` → ``cuda`` when available, else ``cpu``; ``cpu``, ``cuda`` and ``cuda:N`` as given (a
    ``torch.device`` passes unchanged). With ``local_rank`` (one of several training processes on this
    machine, ``LOCAL_RANK`` as ``torchrun`` sets it) each process takes its own GPU: ``cuda`` (and
    ``auto`` where CUDA is available) → ``cuda:LOCAL_RANK``.

    Raises
    ------
    ConfigError
        With ``local_rank``: ``cuda:N`` (each process takes ``cuda:LOCAL_RANK``), or this process has no
        GPU of its own (field ``device``).
    """
    import torch

    if isinstance(device, torch.device):
        return device
    name = str(device)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if local_rank is None or name == "cpu":
        return torch.device(name)
    if name != "cuda":
        raise ConfigError(
            f"must be cpu, cuda or auto with several training processes (each takes cuda:LOCAL_RANK), "
            f"got {name!r}",
            "device",
        )
    if local_rank >= torch.cuda.device_count():
        raise ConfigError(
            f"cuda: process LOCAL_RANK={local_rank} has no GPU of its own "
            f"(this machine has {torch.cuda.device_count()})",
            "device",
        )
    return torch.device("cuda", local_rank)


def check_device(device: str) -> None:
    """Raise [`ConfigError`][imle_solvers.errors.ConfigError] (field ``device``) if this machine lacks it."""
    import torch

    kind, _, index = device.partition(":")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{device}: CUDA is not available on this machine (use cpu or auto)", "device")
    if index and int(index) >= torch.cuda.device_count():
        raise ConfigError(f"{device}: this machine has {torch.cuda.device_count()} CUDA device(s)", "device")


def check_output_dir(path: str | os.PathLike[str]) -> Path:
    """Make sure results can be written to the folder ``path``: create it and write a probe file.

    Raises [`ConfigError`][imle_solvers.errors.ConfigError] (field ``out``) when ``path`` is a file, lies
    below a file, or cannot be created or written to. Called before any work, so that no result is
    computed to be lost.
    """
    folder = Path(path)
    for parent in (folder, *folder.parents):
        if parent.exists() and not parent.is_dir():
            where = "is a file" if parent == folder else f"lies below the file {str(parent)!r}"
            raise ConfigError(f"{str(folder)!r} {where}: it must name a folder", "out")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"cannot write to {str(folder)!r}: {exc.strerror or exc}", "out") from None
    return folder

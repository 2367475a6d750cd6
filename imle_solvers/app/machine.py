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


def resolve_device(device: str) -> Any:
    """``auto`` → ``cuda`` when available, else ``cpu``; anything else as given (a ``torch.device``)."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


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

"""The repository root, for tests that read docs, examples or README, or start child interpreters."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # tests/support/paths.py -> the repository root

"""Run megatron-core's packing code on CPU (import this first, in a subprocess only).

The three environment changes the golden README lists: ``Tensor.cuda`` returns the
tensor, ``torch.cuda.current_device()`` returns the CPU device, and
``typing.override`` exists on Python 3.11.  ``$TOKENLOOM_MEGATRON_PATH`` (or the
repository's ``.megatron-core``) goes on ``sys.path``.
"""

from __future__ import annotations

import os
import sys
import typing
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def megatron_path() -> str:
    """Where megatron-core 0.16.1 is unpacked ('' when it is not found)."""
    path = os.environ.get("TOKENLOOM_MEGATRON_PATH") or str(ROOT / ".megatron-core")
    return path if (Path(path) / "megatron" / "core").is_dir() else ""


def install() -> None:
    """Apply the CPU shims and put megatron-core on sys.path."""
    warnings.simplefilter("ignore")
    if not hasattr(typing, "override"):
        import typing_extensions

        typing.override = typing_extensions.override  # type: ignore[attr-defined]
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[assignment,return-value]
    path = megatron_path()
    if path and path not in sys.path:
        sys.path.insert(0, path)

"""Optional numba: load the compiled-kernel modules only when numba is importable.

The kernel modules import numba at their top, so importing them fails cleanly with
``ModuleNotFoundError(name="numba")`` when it is missing.  Callers then use the
reference implementation (same results, slower).  A numba that is installed but
unusable (e.g. no writable cache location) gives a warning and the same fallback.
Set ``TOKENLOOM_DISABLE_NUMBA=1`` to force the fallback.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType
from typing import Dict, Optional

_LOADED: Dict[str, Optional[ModuleType]] = {}
_NUMBA_PARTS = ("numba", "llvmlite")


def numba_disabled() -> bool:
    """True when the user asked for the pure-python kernels."""
    return os.environ.get("TOKENLOOM_DISABLE_NUMBA", "").strip() not in ("", "0")


def kernels(module: str) -> Optional[ModuleType]:
    """The compiled-kernel module ``tokenloom.index.<module>``, or None without numba."""
    if numba_disabled():
        return None
    if module not in _LOADED:
        try:
            _LOADED[module] = importlib.import_module(f"tokenloom.index.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != "numba" and (exc.name or "").split(".")[0] not in _NUMBA_PARTS:
                raise
            if exc.name != "numba":  # numba itself is there but broken
                _warn(exc)
            _LOADED[module] = None
        except (ImportError, RuntimeError, OSError) as exc:  # numba present but unusable
            _warn(exc)
            _LOADED[module] = None
    return _LOADED[module]


def _warn(exc: BaseException) -> None:
    warnings.warn(
        f"tokenloom: numba kernels unavailable ({exc}); using the slower "
        "pure-python index kernels",
        RuntimeWarning,
        stacklevel=4,
    )

"""Optional numba: load the compiled-kernel modules only when numba is importable.

The kernel modules import numba at their top, so importing them fails cleanly with
``ModuleNotFoundError(name="numba")`` when it is missing.  Callers then use the
reference implementation.  Set ``TOKENLOOM_DISABLE_NUMBA=1`` to force the fallback.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Dict, Optional

_LOADED: Dict[str, Optional[ModuleType]] = {}


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
            if exc.name != "numba":
                raise
            _LOADED[module] = None
    return _LOADED[module]

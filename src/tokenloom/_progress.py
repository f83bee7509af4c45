"""Progress bars that degrade to nothing when tqdm is absent or output is not a TTY."""

from __future__ import annotations

import sys
from typing import Any, Iterable, Optional


class _NullBar:
    def __init__(self, iterable: Optional[Iterable] = None, **_: Any) -> None:
        self._iterable = iterable

    def __iter__(self):
        return iter(self._iterable or ())

    def update(self, n: int = 1) -> None:  # noqa: D401 - mimic tqdm
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress(iterable: Optional[Iterable] = None, *, enabled: Optional[bool] = None, **kwargs: Any):
    """Return a tqdm bar (to stderr) or a silent stand-in with the same methods.

    ``enabled=None`` shows the bar only when stderr is a terminal.
    """
    if enabled is None:
        enabled = sys.stderr.isatty()
    if enabled:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            enabled = False
        else:
            kwargs.setdefault("file", sys.stderr)
            kwargs.setdefault("dynamic_ncols", True)
            return tqdm(iterable, **kwargs)
    return _NullBar(iterable, **kwargs)

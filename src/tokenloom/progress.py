"""Progress bars for long work: tqdm on a terminal, a silent stand-in otherwise.

:func:`progress` returns a ``tqdm`` bar writing to stderr, or, when tqdm is absent,
``enabled`` is False, or (``enabled=None``) stderr is not a terminal, a stand-in with
the methods tokenloom calls (``update``, ``set_postfix_str``, ``close``, iteration and
``with``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, Optional

__all__ = ["progress"]


class _NullBar:
    """A bar that shows nothing (tqdm's methods that tokenloom uses)."""

    def __init__(self, iterable: Optional[Iterable[Any]] = None, **_: Any) -> None:
        self._iterable = iterable

    def __iter__(self) -> Iterator[Any]:
        return iter(self._iterable or ())

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _NullBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(
    iterable: Optional[Iterable[Any]] = None, *, enabled: Optional[bool] = None, **kwargs: Any
) -> Any:
    """Return a tqdm bar (to stderr) or a silent stand-in with the same methods.

    ``enabled=None`` shows the bar only when stderr is a terminal; ``kwargs`` go to tqdm.
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

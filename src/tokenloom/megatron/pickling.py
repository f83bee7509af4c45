"""Datasets pickled under the compat layer unpickle under it, in any process.

A DataLoader worker started with ``spawn`` (or any process that unpickles a dataset)
has not called :func:`tokenloom.megatron.install`: unpickling a Megatron-LM subclass
such as ``GPTFIMDataset`` would import its module, and through it megatron-core's own
``gpt_dataset``, before anything of tokenloom's ran. :class:`StaysInstalled` makes the
pickle of a compat dataset start with a call to ``install()``, so that the classes
named after it resolve to tokenloom's in that process too.
"""

from __future__ import annotations

from typing import Any

from tokenloom.attributes import read_attribute

__all__ = ["StaysInstalled"]


class _Install:
    """Unpickles as a call to ``tokenloom.megatron.install()``."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        from tokenloom.megatron import install

        return install, ()


def _rebuild(_installed: None, cls: Any, state: Any) -> Any:
    """The object of class ``cls`` with ``state`` (after the install step ran)."""
    obj = cls.__new__(cls)
    setstate = read_attribute(obj, "__setstate__", None)
    if setstate is not None:
        setstate(state)
    else:
        obj.__dict__.update(state)
    return obj


class StaysInstalled:
    """Mixin: pickles as ``_rebuild(install(), type(self), state)``."""

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, tuple[Any, type, Any]]:
        getstate = read_attribute(self, "__getstate__", None)
        state = getstate() if getstate is not None else dict(self.__dict__)
        return _rebuild, (_Install(), type(self), state)

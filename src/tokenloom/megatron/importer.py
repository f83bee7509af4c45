"""The import hook behind :func:`tokenloom.megatron.install`.

``Redirect`` is one ``sys.meta_path`` finder that answers for the modules of
``megatron.core.datasets`` that tokenloom implements, and for nothing else:

* ``megatron.core.datasets.<name>`` (``name`` in :data:`MODULES`) resolves to
  ``tokenloom.megatron.datasets.<name>``: the *same module object*, under both names,
  so ``isinstance`` and ``is`` agree whichever name a caller imported;
* ``megatron``, ``megatron.core`` and ``megatron.core.datasets`` come from an installed
  megatron-core (or a Megatron-LM checkout on ``sys.path``) when there is one; where
  there is none they are made here as empty packages, so the redirected modules import
  without megatron-core. Every other module of megatron-core (models, transformer,
  parallel_state, ``datasets.bert_dataset``, ...) is left to the normal import system.

One ``Redirect`` owns everything it changed in ``sys.modules`` and on parent packages,
and :meth:`Redirect.remove` puts it back.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence
from typing import Any, Optional

from tokenloom.attributes import read_attribute

__all__ = ["MODULES", "PACKAGES", "TARGET", "Redirect"]

MODULES = (
    "indexed_dataset",
    "blended_megatron_dataset_builder",
    "blended_megatron_dataset_config",
    "gpt_dataset",
    "blended_dataset",
    "megatron_dataset",
    "utils",
    "utils_s3",
    "helpers",
    "helpers_cpp",
    "object_storage_utils",
    "megatron_tokenizer",
    "multimodal_dataset",
    "data_schedule",
)
"""The modules of ``megatron.core.datasets`` that resolve to tokenloom."""

PACKAGES = ("megatron", "megatron.core", "megatron.core.datasets")
"""The parent packages, made empty here only where no megatron is installed."""

SOURCE = "megatron.core.datasets"
TARGET = "tokenloom.megatron.datasets"

_MARK = "__tokenloom_placeholder__"
_MISSING = object()


class _AliasLoader(importlib.abc.Loader):
    """Loads a redirected name as the already imported tokenloom module."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        """The tokenloom module itself (the import system keeps its own attributes)."""
        return importlib.import_module(self.target)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the tokenloom module ran when it was imported."""


class _PlaceholderLoader(importlib.abc.Loader):
    """Makes an empty package for a parent that no installed megatron provides."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        """An empty package module, marked as tokenloom's placeholder."""
        module = types.ModuleType(spec.name, "placeholder made by tokenloom.megatron.install()")
        module.__path__ = []
        setattr(module, _MARK, True)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run."""


def _real_spec(name: str) -> Optional[importlib.machinery.ModuleSpec]:
    """The spec the import system would find for ``name`` without this hook."""
    parent_name = name.rpartition(".")[0]
    path = None
    if parent_name:
        parent = sys.modules.get(parent_name)
        path = None if parent is None else read_attribute(parent, "__path__", None)
        if path is None or read_attribute(parent, _MARK, False):
            return None
    return importlib.machinery.PathFinder.find_spec(name, path)


class Redirect(importlib.abc.MetaPathFinder):
    """The finder, and the record of every change made to the module table."""

    def __init__(self) -> None:
        self.replaced: dict[str, Any] = {}  # sys.modules entries found at install time
        self.attributes: dict[tuple[str, str], Any] = {}  # parent attributes replaced

    # -- the finder ------------------------------------------------------------------
    def find_spec(
        self,
        fullname: str,
        path: Optional[Sequence[str]] = None,
        target: Optional[types.ModuleType] = None,
    ) -> Optional[importlib.machinery.ModuleSpec]:
        """A spec for a redirected module or a missing parent package; else None."""
        if fullname.startswith(SOURCE + "."):
            short = fullname[len(SOURCE) + 1 :]
            if short in MODULES:
                return importlib.util.spec_from_loader(fullname, _AliasLoader(f"{TARGET}.{short}"))
            return None
        if fullname in PACKAGES and _real_spec(fullname) is None:
            return importlib.util.spec_from_loader(fullname, _PlaceholderLoader(), is_package=True)
        return None

    # -- install / remove ------------------------------------------------------------
    def insert(self) -> None:
        """Put the finder first on ``sys.meta_path`` and alias modules already imported."""
        sys.meta_path.insert(0, self)
        for short in MODULES:
            name = f"{SOURCE}.{short}"
            if name in sys.modules:
                self.replaced[name] = sys.modules[name]
                module = importlib.import_module(f"{TARGET}.{short}")
                sys.modules[name] = module
                self._set_parent_attribute(name, module)

    def _set_parent_attribute(self, name: str, module: types.ModuleType) -> None:
        parent_name, _, child = name.rpartition(".")
        parent = sys.modules.get(parent_name)
        if parent is None:
            return
        key = (parent_name, child)
        if key not in self.attributes:
            self.attributes[key] = parent.__dict__.get(child, _MISSING)
        setattr(parent, child, module)

    def remove(self) -> None:
        """Undo everything: the finder, the aliases, the placeholders."""
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for short in MODULES:
            name = f"{SOURCE}.{short}"
            ours = sys.modules.get(name)
            if ours is not None and ours.__name__ == f"{TARGET}.{short}":
                del sys.modules[name]
                parent = sys.modules.get(SOURCE)
                if parent is not None and parent.__dict__.get(short) is ours:
                    delattr(parent, short)
            if name in self.replaced:
                sys.modules[name] = self.replaced[name]
        for (parent_name, child), value in self.attributes.items():
            parent = sys.modules.get(parent_name)
            if parent is not None and value is not _MISSING:
                setattr(parent, child, value)
        for name in reversed(PACKAGES):
            if read_attribute(sys.modules.get(name), _MARK, False):
                del sys.modules[name]
        self.replaced.clear()
        self.attributes.clear()

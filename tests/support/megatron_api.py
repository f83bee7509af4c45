"""The public surface of megatron-core's ``megatron.core.datasets`` modules, as data.

``describe_module(module)`` lists every public name of a module (what it defines and the
non-typing names it re-exports, plus the private names Megatron-LM's own code imports),
with the signature of every callable and the public methods (and subclass hooks) of
every class. The compat layer's test runs it on megatron-core 0.16.1 in a subprocess
and on ``tokenloom.megatron.datasets`` here, and compares.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import sys
import typing
from typing import Any

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
    "object_storage_utils",
    "megatron_tokenizer",
    "multimodal_dataset",
    "data_schedule",
)
"""The megatron-core 0.16.1 modules that tokenloom implements."""

PRIVATE_NAMES = {
    "indexed_dataset": [
        "_IndexReader",
        "_IndexWriter",
        "_BinReader",
        "_MMapBinReader",
        "_FileBinReader",
        "_S3BinReader",
        "_MultiStorageClientBinReader",
    ],
    "gpt_dataset": ["_get_ltor_masks_and_position_ids"],
    "megatron_dataset": ["_PAD_TOKEN_ID"],
    "blended_megatron_dataset_builder": ["_get_size_per_split_per_dataset"],
}
"""Private names that Megatron-LM's tools, tests and subclasses import or call."""

HOOKS = {
    "_query_document_sample_shuffle_indices",
    "_build_document_sample_shuffle_indices",
    "_get_num_tokens_per_epoch",
    "_get_num_epochs",
    "_key_config_attributes",
    "_build_indices",
    "_build_blended_dataset_splits",
    "_build_megatron_datasets_parallel",
    "_build_megatron_dataset_splits",
}
"""Private methods that subclasses override or call (compared like public ones)."""

_STDLIB = frozenset(sys.stdlib_module_names)


def _parameters(obj: Any) -> Any:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    out = []
    for p in signature.parameters.values():
        default = None
        if p.default is not inspect.Parameter.empty:
            default = (
                p.default
                if isinstance(p.default, (bool, int, float, str, type(None)))
                else "<object>"
            )
        out.append([p.name, p.kind.name, p.default is not inspect.Parameter.empty, default])
    return out


def _class(cls: type) -> dict:
    methods = {}
    for name, value in inspect.getmembers(cls):
        if name.startswith("__") and name not in ("__init__", "__getitem__", "__len__"):
            continue
        if name.startswith("_") and not name.startswith("__") and name not in HOOKS:
            continue
        raw = inspect.getattr_static(cls, name)
        if isinstance(raw, property):
            methods[name] = "property"
        elif isinstance(raw, (staticmethod, classmethod)) or callable(value):
            methods[name] = _parameters(value)
    described: dict[str, Any] = {"kind": "class", "methods": methods}
    if dataclasses.is_dataclass(cls):
        described["fields"] = [
            [
                f.name,
                f.init,
                f.default is not dataclasses.MISSING
                or f.default_factory is not dataclasses.MISSING,
            ]
            for f in dataclasses.fields(cls)
        ]
    if issubclass(cls, enum.Enum):
        described["members"] = {m.name: m.value for m in cls}
    return described


def describe(obj: Any) -> dict:
    """What a name is: a class (methods, fields), a callable (parameters) or a value."""
    if inspect.isclass(obj):
        return _class(obj)
    if callable(obj):
        return {"kind": "callable", "parameters": _parameters(obj)}
    if isinstance(obj, (bool, int, float, str, type(None))):
        return {"kind": "value", "value": obj}
    return {"kind": "value", "type": type(obj).__name__}


def public_names(module: Any, short: str) -> list[str]:
    names = []
    for name in dir(module):
        if name.startswith("_"):
            continue
        value = getattr(module, name)
        if inspect.ismodule(value):
            continue
        origin = getattr(value, "__module__", None) or ""
        if (inspect.isclass(value) or callable(value)) and origin.split(".")[0] in _STDLIB:
            continue  # re-exported standard library names (OrderedDict, ceil, lru_cache, ...)
        if typing.get_origin(value) is not None or str(value).startswith("typing."):
            continue
        names.append(name)
    return sorted(set(names) | set(PRIVATE_NAMES.get(short, [])))


def describe_module(module: Any, short: str, names: Any = None) -> dict:
    """``{name: describe(value)}`` of ``names`` (default ``public_names(module)``; names a
    module resolves lazily count), ``None`` for a missing name."""
    names = public_names(module, short) if names is None else names
    return {
        name: (describe(getattr(module, name)) if hasattr(module, name) else None) for name in names
    }


def _compatible_parameters(theirs: Any, ours: Any) -> str:
    """ "" when a call valid for ``theirs`` is valid for ``ours`` with the same meaning."""
    if theirs is None:
        return ""  # megatron-core's is not introspectable (a compiled pybind11 function)
    if ours is None:
        return "ours has no readable signature"
    for i, (name, kind, has_default, _) in enumerate(theirs):
        if i >= len(ours):
            return f"parameter {name!r} missing"
        o_name, o_kind, o_default, _ = ours[i]
        if (o_name, o_kind) != (name, kind):
            return f"parameter {i}: megatron has {name} ({kind}), ours {o_name} ({o_kind})"
        if has_default and not o_default:
            return f"parameter {name!r} has a default in megatron-core, none in ours"
    for name, kind, has_default, _ in ours[len(theirs) :]:
        if not has_default and kind not in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            return f"extra parameter {name!r} without a default"
    return ""


def differences(theirs: dict, ours: dict, where: str) -> list[str]:
    """Every way ``ours`` (a ``describe_module`` result) falls short of ``theirs``."""
    problems = []
    for name, their in theirs.items():
        mine = ours.get(name)
        if mine is None:
            problems.append(f"{where}.{name}: missing")
            continue
        if their["kind"] != mine["kind"]:
            problems.append(
                f"{where}.{name}: a {mine['kind']}, megatron-core's is a {their['kind']}"
            )
            continue
        if their["kind"] == "callable":
            gap = _compatible_parameters(their["parameters"], mine["parameters"])
            if gap:
                problems.append(f"{where}.{name}: {gap}")
        elif their["kind"] == "class":
            problems.extend(_class_differences(their, mine, f"{where}.{name}"))
        elif "value" in their and their["value"] != mine.get("value"):
            problems.append(
                f"{where}.{name} = {mine.get('value')!r}, megatron-core's {their['value']!r}"
            )
    return problems


def _class_differences(their: dict, mine: dict, where: str) -> list[str]:
    problems = []
    for method, signature in their["methods"].items():
        ours = mine["methods"].get(method)
        if ours is None:
            problems.append(f"{where}.{method}: missing")
        elif signature == "property" or ours == "property":
            if signature != ours:
                problems.append(f"{where}.{method}: property in one, method in the other")
        else:
            gap = _compatible_parameters(signature, ours)
            if gap:
                problems.append(f"{where}.{method}: {gap}")
    if "fields" in their:  # every field of megatron-core's, in its order (extras anywhere)
        wanted = [f[0] for f in their["fields"]]
        names = [f[0] for f in mine.get("fields", []) if f[0] in wanted]
        if names != wanted:
            problems.append(f"{where}: dataclass fields {names}, megatron-core's {wanted}")
    if their.get("members") is not None and their["members"] != mine.get("members"):
        problems.append(
            f"{where}: members {mine.get('members')}, megatron-core's {their['members']}"
        )
    return problems

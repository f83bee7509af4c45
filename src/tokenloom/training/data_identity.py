"""The identities of the ``.bin``/``.idx`` pairs a dataset reads, kept in a loader state.

:func:`pair_identities` walks a dataset through public attributes only: a
:class:`~tokenloom.training.RandomSeedDataset` to its ``dataset``, a blend (anything with a
``datasets`` list, ``BlendedDataset`` and torch's ``ConcatDataset`` included) to each of its
datasets, any other dataset to its ``dataset`` (a ``GPTDataset``'s low-level dataset,
torch's ``Subset``'s dataset), and stops at a pair: an object with a ``path_prefix`` and a
``file_identity()`` (``IndexedDataset``, ``LazyIndexedDataset``). A pair's identity is the
one the index cache keys on (:mod:`tokenloom.format.identity`): size, ``mtime_ns`` and the
digest of every byte of the ``.idx``; size and ``mtime_ns`` of the ``.bin`` (object
storage: sizes, ``.idx`` digest and the ``.bin``'s ETag), of the files as opened. Mock
datasets and datasets of other kinds read no pair and contribute nothing.

:func:`data_changes` compares the identities a state was saved with against a loader's;
:func:`moved_pairs` pairs a saved prefix the loader no longer reads with the prefix it
reads now under the same identity (a pair moved with ``mv`` or ``cp -p``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from tokenloom.attributes import read_attribute
from tokenloom.training.samplers import RandomSeedDataset

__all__ = ["data_changes", "moved_pairs", "pair_identities", "summarize"]

Identity = dict[str, dict[str, Any]]
_SHOWN = 3  # changed pairs named in a message; the rest are counted


def _plain(identity: Any) -> Optional[Identity]:
    if not isinstance(identity, Mapping):
        return None
    return {
        str(part): {str(k): v for k, v in fields.items()}
        for part, fields in identity.items()
        if isinstance(fields, Mapping)
    }


def _as_pair(node: Any) -> Optional[tuple[str, Optional[Identity]]]:
    prefix = read_attribute(node, "path_prefix", None)
    identify = read_attribute(node, "file_identity", None)
    if not isinstance(prefix, str) or not callable(identify):
        return None
    return prefix, _plain(identify())


def _children(node: Any) -> list[Any]:
    if isinstance(node, RandomSeedDataset):
        return [node.dataset]
    datasets = read_attribute(node, "datasets", None)
    if isinstance(datasets, (list, tuple)):
        return list(datasets)
    inner = read_attribute(node, "dataset", None)
    return [] if inner is None or callable(inner) else [inner]


def pair_identities(dataset: Any) -> dict[str, Optional[Identity]]:
    """``{path_prefix: identity}`` of every pair ``dataset`` reads, in reading order
    (None where a pair cannot tell its identity, e.g. a closed one)."""
    found: dict[str, Optional[Identity]] = {}
    stack, seen = [dataset], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        pair = _as_pair(node)
        if pair is not None:
            found.setdefault(*pair)
            continue
        stack.extend(reversed(_children(node)))
    return found


def _describe_change(old: Identity, new: Identity) -> str:
    parts = []
    for part in sorted(set(old) | set(new)):
        before, after = old.get(part, {}), new.get(part, {})
        keys = sorted(set(before) | set(after))
        changed = [key for key in keys if before.get(key) != after.get(key)]
        if changed:
            fields = ", ".join(
                f"{key} {before.get(key, 'absent')!r} -> {after.get(key, 'absent')!r}"
                for key in changed
            )
            same = [key for key in keys if key not in changed]
            parts.append(f".{part}: {fields}" + (f" ({', '.join(same)} unchanged)" if same else ""))
    return "; ".join(parts)


def data_changes(
    saved: Mapping[str, Optional[Identity]], current: Mapping[str, Optional[Identity]]
) -> list[str]:
    """One line per pair that differs between ``saved`` and ``current`` (empty: none)."""
    lines = []
    for prefix in current:
        if prefix not in saved:
            lines.append(f"{prefix}: read by this loader, not by the saved one")
        elif saved[prefix] is not None and current[prefix] is not None:
            change = _describe_change(saved[prefix] or {}, current[prefix] or {})
            if change:
                lines.append(f"{prefix}: {change}")
    lines.extend(
        f"{p}: read by the saved loader, not by this one" for p in saved if p not in current
    )
    return lines


def moved_pairs(
    saved: Mapping[str, Optional[Identity]], current: Mapping[str, Optional[Identity]]
) -> dict[str, str]:
    """``{saved prefix: current prefix}`` for each pair that moved: a prefix of ``saved``
    that ``current`` does not name, whose identity is that of exactly one prefix of
    ``current`` that ``saved`` does not name (and the other way round). Identities compare
    whole (sizes, ``mtime_ns``, ``.idx`` digest), so a copy with a new ``mtime_ns`` is no
    move; an identity shared by several candidates is ambiguous and moves nothing."""
    gone = {p: i for p, i in saved.items() if p not in current and i}
    new = {p: i for p, i in current.items() if p not in saved and i}
    moves = {}
    for old, identity in gone.items():
        targets = [p for p, i in new.items() if i == identity]
        sources = [p for p, i in gone.items() if i == identity]
        if len(targets) == 1 and len(sources) == 1:
            moves[old] = targets[0]
    return moves


def summarize(lines: list[str]) -> str:
    """The first few change lines, and how many more there are."""
    shown = "; ".join(lines[:_SHOWN])
    more = len(lines) - _SHOWN
    return shown + (f"; and {more} more pair(s)" if more > 0 else "")

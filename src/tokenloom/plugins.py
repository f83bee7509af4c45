"""Plugins found by discovery: installed distributions' entry points, never import side effects.

A package adds a tokenizer kind or a packing scheduler by declaring an entry point in
its own metadata; installing it is all it takes, and nothing registers anything at
import time (tiktoken's ``tiktoken_ext`` idea, with the standard mechanism)::

    # the plugin's pyproject.toml
    [project.entry-points."tokenloom.tokenizers"]
    wordpiece = "my_package.tokenizer:WordPieceTokenizer"

    [project.entry-points."tokenloom.packing_schedulers"]
    greedy_fill = "my_package.packing:GreedyFillScheduler"

Then ``--tokenizer wordpiece:vocab.txt`` and
``sequence_packing_scheduler="greedy_fill"`` find them. :data:`GROUPS` lists what each
group's entry point must be. Discovery reads the installed metadata on every call
(there is no registry to go stale, and nothing to clear). A built-in name always wins:
a plugin of the same name is listed as shadowed and never loaded. Two distributions
offering one name are an error naming both, raised only when that name is asked for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Optional

from tokenloom.errors import ConfigError

GROUPS: dict[str, str] = {
    "tokenloom.tokenizers": (
        "a tokenizer kind for `--tokenizer KIND:LOCATION`: a callable (usually a "
        "tokenloom.tokenizers.BaseTokenizer subclass) taking the location and the keyword "
        "options eod and num_threads, returning a BaseTokenizer"
    ),
    "tokenloom.packing_schedulers": (
        "a `sequence_packing_scheduler` name: a tokenloom.packing.BasePackingScheduler "
        "subclass, built as cls(max_seqlen_per_dp_cp_rank, cp_size, dp_size, group)"
    ),
}
"""Every plugin group tokenloom reads, and what its entry points must be."""


@dataclass(frozen=True)
class Plugin:
    """One entry point of a plugin group, as installed."""

    group: str
    """The entry-point group (a key of :data:`GROUPS`)."""
    name: str
    """The name users write (a tokenizer kind, a scheduler name)."""
    value: str
    """Where it lives: ``module:attribute``."""
    distribution: str
    """The installed distribution that declares it (``name version``)."""


def _distribution(entry: metadata.EntryPoint) -> str:
    dist = entry.dist
    if dist is None:
        return "an unknown distribution"
    return f"{dist.metadata['Name']} {dist.version}"


def discover(group: str) -> list[Plugin]:
    """Every installed entry point of ``group``, sorted by name then distribution."""
    if group not in GROUPS:
        raise ConfigError(
            f"{group!r} is not a tokenloom plugin group; the groups: {sorted(GROUPS)}"
        )
    found = {
        Plugin(group, entry.name, entry.value, _distribution(entry))
        for entry in metadata.entry_points(group=group)
    }
    return sorted(found, key=lambda plugin: (plugin.name, plugin.distribution))


def names(group: str, builtins: Iterable[str]) -> list[str]:
    """The plugin names of ``group`` that a built-in does not shadow, sorted."""
    shadowed = set(builtins)
    return sorted({plugin.name for plugin in discover(group)} - shadowed)


def find(group: str, name: str, builtins: Iterable[str]) -> Optional[Plugin]:
    """The one plugin of ``group`` called ``name``; None if there is none or a built-in
    has that name; ConfigError naming every distribution when several offer it."""
    if name in set(builtins):
        return None
    matches = [plugin for plugin in discover(group) if plugin.name == name]
    if len(matches) > 1:
        offered = "; ".join(f"{p.distribution} ({p.value})" for p in matches)
        raise ConfigError(
            f"{len(matches)} installed distributions offer {group} plugin {name!r}: {offered}; "
            "uninstall all but one"
        )
    return matches[0] if matches else None


def load(plugin: Plugin) -> Any:
    """The object ``plugin``'s entry point names, imported now; ConfigError naming the
    plugin, its distribution and the failure if it cannot be imported."""
    entry = metadata.EntryPoint(name=plugin.name, value=plugin.value, group=plugin.group)
    try:
        return entry.load()
    except Exception as error:  # any failure of a third party's import is that plugin's
        raise ConfigError(
            f"{plugin.group} plugin {plugin.name!r} ({plugin.value}, from "
            f"{plugin.distribution}) failed to load: {type(error).__name__}: {error}; "
            "fix or uninstall that distribution"
        ) from error


__all__ = ["GROUPS", "Plugin", "discover", "find", "load", "names"]

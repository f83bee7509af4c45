"""A mixture change file's loader state, checked against the old config's train blend.

The Megatron path (:mod:`tokenloom.training.megatron_resume`) rebuilds the old run's
train blend from the change file's ``old`` settings. When the file names a saved loader
state (``"state"``), that state must be of that blend: :func:`saved_dataset` first puts
each moved pair under the path the old settings name it by now
(:func:`~tokenloom.training.data_identity.moved_pairs`: same identity, another path);
:func:`check_state` then checks the pairs' identities, the blend's length and its
description (with the moved pairs' old paths put back, since a description names its
paths), and :func:`check_counts` the per-source counts at ``consumed_samples``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any, Optional

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError
from tokenloom.training.data_identity import (
    data_changes,
    moved_pairs,
    pair_identities,
    summarize,
)

__all__ = ["check_counts", "check_state", "saved_dataset"]

logger = logging.getLogger(__name__)


def saved_dataset(
    saved: Optional[Mapping[str, Any]], old: Any, source: str
) -> Optional[dict[str, Any]]:
    """``saved`` (a state's ``dataset`` record, with its ``source_counts``) with each moved
    pair under the prefix ``old`` names it by now, and the moves under ``moves``; one INFO
    line per move. ``source`` names the change file in messages."""
    if saved is None or "files" not in saved:
        return None if saved is None else dict(saved)
    moves = moved_pairs(saved["files"], pair_identities(old))
    for before, after in moves.items():
        logger.info("mixture change %s: %s is the saved run's %s, moved", source, after, before)
    counts = saved.get("source_counts") or {}
    return dict(
        saved,
        files={moves.get(p, p): i for p, i in saved["files"].items()},
        source_counts={moves.get(p, p): c for p, c in counts.items()},
        moves=moves,
    )


def _old_digest(saved: Mapping[str, Any], old: Any) -> Optional[str]:
    """The old blend's description MD5 as the saved run had it: each moved pair's path
    (a whole JSON string of the description) put back where the state saw it."""
    moves = saved.get("moves") or {}
    text = read_attribute(old, "unique_description", None)
    if not moves or not isinstance(text, str):
        digest = read_attribute(old, "unique_description_hash", None)
        return digest if isinstance(digest, str) else None
    for before, after in moves.items():
        text = text.replace(json.dumps(after), json.dumps(before))
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def check_state(
    source: str, saved: Optional[Mapping[str, Any]], old: Any, allow_data_change: bool
) -> None:
    """ConfigError unless ``saved`` (from :func:`saved_dataset`) is ``old``'s: the same
    files (unless ``allow_data_change``), length and description."""
    if saved is None:
        return
    changes = data_changes(saved["files"], pair_identities(old)) if "files" in saved else []
    if changes and not allow_data_change:
        raise ConfigError(
            f"mixture change {source}: the saved run read other data files: "
            f"{summarize(changes)}. A continuing source's order is that of the files it was "
            'saved over; if the change is deliberate set "allow_data_change": true'
        )
    digest = _old_digest(saved, old)
    if saved["length"] != len(old) or (
        saved.get("description_hash") and digest and saved["description_hash"] != digest
    ):
        raise ConfigError(
            f"mixture change {source}: the loader state's dataset (length "
            f"{saved['length']}, description {saved.get('description_hash')}) is not the "
            f"old config's train blend (length {len(old)}, description {digest}): "
            "the 'old' settings are not the saved run's"
        )


def check_counts(
    source: str, saved: Optional[Mapping[str, Any]], counts: Mapping[str, int]
) -> None:
    """ConfigError unless a /4 state's per-source counts are ``counts``, the rebuilt old
    blend's at the saved ``consumed_samples``."""
    for prefix, count in ((saved or {}).get("source_counts") or {}).items():
        if count is not None and counts.get(prefix, 0) != count:
            raise ConfigError(
                f"mixture change {source}: the loader state counts {count} consumed "
                f"samples of {prefix!r}, the old config's blend gives {counts.get(prefix, 0)} "
                "at its consumed_samples: the 'old' settings are not the saved run's"
            )

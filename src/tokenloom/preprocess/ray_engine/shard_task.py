"""What one Ray task does: tokenise one shard with the local engine, publish it, mark it done.

The tokens come from :func:`tokenloom.preprocess.preprocess`, the local engine itself,
called on the shard's input with the run's options, so a shard holds exactly the
documents a local run writes for those lines: whole files are handed to it as paths,
a byte range as a :class:`~tokenloom.preprocess.sources.FileRange` (whose errors name
the file and its real line numbers).

The local engine writes under a temporary prefix in ``WORKDIR/tmp/``; the finished
files are then renamed to ``WORKDIR/shard-…_{key}_document.*`` and the completion
marker is written last.  A task that dies at any point leaves no marker, so its
shard is run again and nothing partial is ever merged.  Every attempt leaves a file
in ``WORKDIR/attempts/`` so that the driver can count retries.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tokenloom.atomic import fsync_dir
from tokenloom.attributes import read_attribute
from tokenloom.errors import PreprocessError
from tokenloom.preprocess.ray_engine.markers import remove_marker, write_marker
from tokenloom.preprocess.ray_engine.plan import Shard

_PUBLISHED = (".bin", ".idx", ".json")  # the pair, and a sidecar where the engine writes one


@dataclass(frozen=True)
class ShardJob:
    """What every task of one run shares."""

    workdir: str
    """Folder of the shards' outputs and markers (must be visible to every node)."""
    settings: str
    """Fingerprint of the tokenizer and options (see :mod:`.markers`)."""
    keys: tuple
    """The JSON keys (one output per key)."""
    options: Mapping[str, Any]
    """Keyword arguments of the local engine (json_keys, append_eod, policy, ...)."""


def summary_counts(summary: Any) -> dict:
    """The counts of a local :class:`PreprocessSummary`, as JSON-ready data."""
    return {
        "outputs": {
            key: {"documents": int(out.documents), "tokens": int(out.tokens)}
            for key, out in summary.outputs.items()
        },
        "line_count": int(read_attribute(summary, "line_count", 0)),
        "blank_lines": int(read_attribute(summary, "blank_lines", 0)),
        "nbytes": int(read_attribute(summary, "nbytes", 0)),
        "disk_bytes": int(read_attribute(summary, "disk_bytes", 0)),
        "skipped": [
            [reason, key, int(count)]
            for (reason, key), count in sorted(read_attribute(summary, "skipped", {}).items())
        ],
        "dtype": str(summary.dtype),
        "seconds": float(read_attribute(summary, "seconds", 0.0)),
    }


def _tokenize(shard: Shard, prefix: str, tokenizer: Any, options: Mapping[str, Any]) -> Any:
    """The local engine on the shard's input: its whole files, or its ``FileRange``."""
    from tokenloom.preprocess import preprocess
    from tokenloom.preprocess.sources import FileRange

    if shard.is_range:
        piece = shard.pieces[0]
        inputs: Any = FileRange(piece.path, piece.start, piece.end)
    else:
        inputs = [piece.path for piece in shard.pieces]
    return preprocess(inputs, prefix, tokenizer, show_progress=False, **options)


def output_suffixes(summary: Any, tmp_prefix: str) -> dict[str, str]:
    """Key -> what the local engine appended to the prefix, e.g. ``_text_document``."""
    suffixes = {}
    for key, out in summary.outputs.items():
        path = os.fspath(out.path_prefix)
        if not path.startswith(tmp_prefix):
            raise PreprocessError(f"the local engine wrote {path}, not under {tmp_prefix}")
        suffixes[key] = path[len(tmp_prefix) :]
    return suffixes


def _publish(tmp_prefix: str, suffixes: Mapping[str, str], workdir: str, shard: Shard) -> None:
    """Rename the pairs (and sidecars) the local engine wrote under ``tmp_prefix``."""
    for suffix in suffixes.values():
        for ext in _PUBLISHED:
            source = tmp_prefix + suffix + ext
            if ext == ".json" and not os.path.exists(source):
                continue
            os.replace(source, os.path.join(workdir, shard.name + suffix + ext))
    fsync_dir(os.path.join(workdir, shard.name))


def run_shard(shard: Shard, job: ShardJob, tokenizer: Any) -> dict:
    """Tokenise ``shard``, publish its outputs and write its marker; return the marker."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    attempt = uuid.uuid4().hex[:12]
    for sub in ("tmp", "attempts"):
        os.makedirs(os.path.join(job.workdir, sub), exist_ok=True)
    with open(os.path.join(job.workdir, "attempts", f"{shard.name}.{attempt}"), "w") as handle:
        handle.write(f"{os.uname().nodename} {os.getpid()}\n")
    tmp_prefix = os.path.join(job.workdir, "tmp", f"{shard.name}.{attempt}")
    try:
        summary = _tokenize(shard, tmp_prefix, tokenizer, job.options)
        suffixes = output_suffixes(summary, tmp_prefix)
        remove_marker(job.workdir, shard)
        _publish(tmp_prefix, suffixes, job.workdir, shard)
    finally:
        _remove_leftovers(tmp_prefix)
    outputs = {
        key: os.path.join(job.workdir, shard.name + suffix) for key, suffix in suffixes.items()
    }
    return write_marker(job.workdir, shard, job.settings, outputs, summary_counts(summary))


def _remove_leftovers(tmp_prefix: str) -> None:
    folder, stem = os.path.split(tmp_prefix)
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if name.startswith(stem + "_"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))


__all__ = ["ShardJob", "run_shard", "summary_counts", "output_suffixes"]

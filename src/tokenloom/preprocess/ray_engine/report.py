"""Progress and the end-of-run report of ``tokenloom preprocess --engine ray``."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from tokenloom.preprocess.records import skipped_labels
from tokenloom.preprocess.summary import OutputStats, rate_text
from tokenloom.progress import progress

_SHARD_ROWS = 16  # shards listed one by one in the report; the rest are summarised


@dataclass
class ShardReport:
    """One shard of the run."""

    name: str
    """``shard-00003-of-00008``."""
    source: str
    """What it read, e.g. ``a.jsonl[0:1048576]``."""
    nbytes: int
    """Input bytes on disk."""
    documents: int
    """Documents written, all keys."""
    tokens: int
    """Tokens written, all keys."""
    seconds: float
    """Time the local engine took on it (on its worker; from the marker when reused)."""
    reused: bool
    """True when a finished shard of an earlier run was taken as it was."""
    attempts: int = 1
    """Attempts this run made (0 when reused)."""


@dataclass
class RaySummary:
    """Counts and timing of a Ray run; :meth:`lines` renders the report the CLI prints."""

    files: int
    dtype: str
    outputs: dict[str, OutputStats]
    shards: list[ShardReport] = field(default_factory=list)
    line_count: int = 0
    blank_lines: int = 0
    nbytes: int = 0
    disk_bytes: int = 0
    skipped: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    merge_seconds: float = 0.0
    merge_bytes: int = 0
    cluster: str = ""
    prefix_lists: dict[str, str] = field(default_factory=dict)

    @property
    def documents(self) -> int:
        """Documents written, all outputs together."""
        return sum(out.documents for out in self.outputs.values())

    @property
    def tokens(self) -> int:
        """Tokens written, all outputs together."""
        return sum(out.tokens for out in self.outputs.values())

    @property
    def reused(self) -> int:
        """Shards reused from an earlier run."""
        return sum(shard.reused for shard in self.shards)

    @property
    def retries(self) -> int:
        """Attempts beyond the first, over all shards run."""
        return sum(max(shard.attempts - 1, 0) for shard in self.shards if not shard.reused)

    @property
    def tokens_per_second(self) -> float:
        """Tokens per second of the whole run (start of Ray and merge included)."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def add_shard(
        self, marker: dict, source: str, nbytes: int, reused: bool, attempts: int
    ) -> None:
        """Add a shard's counts (from its completion marker)."""
        counts = marker["counts"]
        for key, out in counts["outputs"].items():
            self.outputs[key].documents += int(out["documents"])
            self.outputs[key].tokens += int(out["tokens"])
        for name in ("line_count", "blank_lines", "nbytes", "disk_bytes"):
            setattr(self, name, getattr(self, name) + int(counts.get(name, 0)))
        for reason, key, count in counts.get("skipped", []):
            self.skipped[(reason, key)] += int(count)
        self.dtype = str(counts.get("dtype", self.dtype))
        self.shards.append(
            ShardReport(
                marker["shard"],
                source,
                nbytes,
                sum(int(out["documents"]) for out in counts["outputs"].values()),
                sum(int(out["tokens"]) for out in counts["outputs"].values()),
                float(counts.get("seconds", 0.0)),
                reused,
                0 if reused else attempts,
            )
        )

    def skipped_text(self) -> str:
        """E.g. ``skipped: 2 malformed JSON lines, 3 blank lines``, or ``none``."""
        parts = [f"{count:,} {label}" for label, count in skipped_labels(self.skipped)]
        if self.blank_lines:
            parts.append(f"{self.blank_lines:,} blank line{'s' * (self.blank_lines != 1)}")
        return "skipped: " + (", ".join(parts) if parts else "none")

    def _shard_rows(self) -> list[str]:
        shards = sorted(self.shards, key=lambda shard: shard.name)
        rows = []
        for shard in shards[:_SHARD_ROWS]:
            how = (
                "reused"
                if shard.reused
                else (
                    f"{shard.seconds:.2f} s"
                    + (f", {shard.attempts} attempts" * (shard.attempts > 1))
                )
            )
            rows.append(
                f"  {shard.name}  {shard.source:<28} {shard.documents:>10,} docs "
                f"{shard.tokens:>12,} tokens  {how}"
            )
        if len(shards) > _SHARD_ROWS:
            times = [shard.seconds for shard in shards if not shard.reused] or [0.0]
            rows.append(
                f"  ... {len(shards) - _SHARD_ROWS} more shards; per-shard time min "
                f"{min(times):.2f} s, median {statistics.median(times):.2f} s, "
                f"max {max(times):.2f} s"
            )
        return rows

    def lines(self) -> list[str]:
        """The report: per shard, per output, the skip counts, then the totals."""
        rows = self._shard_rows()
        width = max(len(out.path_prefix) for out in self.outputs.values())
        rows += [
            f"  {out.path_prefix:<{width}}  {self.dtype:<6} {out.documents:>12,} documents "
            f"{out.tokens:>14,} tokens"
            for out in self.outputs.values()
        ]
        rows += [f"  prefix list: {path}" for path in self.prefix_lists.values()]
        rows.append(f"  {self.skipped_text()}")
        merged = (
            f", merge {rate_text(self.merge_bytes, self.merge_seconds)}"
            if self.merge_seconds > 0
            else ""
        )
        rows.append(
            f"done: {self.documents:,} documents, {self.tokens:,} tokens from {self.line_count:,} "
            f"lines in {self.files} file{'s' * (self.files != 1)}, {self.seconds:.2f} s "
            f"({self.tokens_per_second:,.0f} tokens/s); {len(self.shards)} shards, "
            f"{self.reused} of {len(self.shards)} shards reused, {self.retries} "
            f"retr{'ies' if self.retries != 1 else 'y'}{merged}; {self.cluster}"
        )
        return rows


def inflight_tokens(workdir: str, itemsize: int) -> int:
    """Tokens the running tasks have written so far: their temporary ``.bin`` files' sizes."""
    total = 0
    folder = os.path.join(workdir, "tmp")
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if ".bin" in entry.name:
                with contextlib.suppress(OSError):
                    total += entry.stat().st_size
    return total // max(int(itemsize), 1)


class LiveProgress:
    """The live bar: input bytes of finished shards, with shards done, documents per second
    (finished shards) and tokens per second (running shards included) in the postfix."""

    def __init__(
        self,
        total_bytes: int,
        reused_bytes: int,
        shards: int,
        reused: int,
        enabled: Optional[bool],
        inflight: Optional[Callable[[], int]] = None,
    ) -> None:
        self.bar = progress(
            total=total_bytes,
            initial=reused_bytes,
            unit="B",
            unit_scale=True,
            desc="preprocess (ray)",
            enabled=enabled,
        )
        self.started = time.perf_counter()
        self.shards, self.done, self.docs, self.tokens = shards, reused, 0, 0
        self.inflight, self.running, self.scanned = inflight, 0, 0.0

    def shard_done(self, nbytes: int, documents: int, tokens: int) -> None:
        """Count one finished shard."""
        self.done += 1
        self.docs += documents
        self.tokens += tokens
        self.refresh(redraw=False, rescan=True)  # the shard's tokens moved out of tmp/
        self.bar.update(nbytes)  # redraws the bar with the new postfix

    def refresh(self, redraw: bool = True, rescan: bool = False) -> None:
        """Update the postfix (and redraw it: the rates move while no shard finishes)."""
        now = time.perf_counter()
        if self.inflight is not None and (rescan or now - self.scanned >= 1.0):
            self.running, self.scanned = self.inflight(), now
        elapsed = max(now - self.started, 1e-9)
        tokens = self.tokens + self.running
        self.bar.set_postfix_str(
            f"{self.done}/{self.shards} shards, {self.docs / elapsed:,.0f} "
            f"docs/s, {tokens / elapsed:,.0f} tok/s",
            refresh=redraw,
        )

    def close(self) -> None:
        """Remove the bar."""
        self.bar.close()

    def __enter__(self) -> LiveProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["ShardReport", "RaySummary", "LiveProgress", "inflight_tokens"]

"""What a preprocess run did: counts per output, skipped records by reason, throughput."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy

from tokenloom.preprocess.records import skipped_labels


@dataclass
class OutputStats:
    """One output pair (one JSON key)."""

    key: str
    path_prefix: str
    documents: int = 0
    tokens: int = 0
    sequences: int = 0
    empty_documents: int = 0  # documents kept with no sequence (Megatron's rule)


@dataclass
class PreprocessSummary:
    """Counts and timing of a run; :meth:`lines` renders the report the CLI prints."""

    files: int
    dtype: str
    workers: int
    outputs: dict[str, OutputStats]
    line_count: int = 0
    blank_lines: int = 0
    nbytes: int = 0
    disk_bytes: int = 0
    seconds: float = 0.0
    worker_cpu_seconds: float = 0.0  # CPU of worker processes on chunks (0 with one worker)
    skipped: Counter = field(default_factory=Counter)  # (reason, key) -> count
    source: str = ""
    """What was read, for the report: ``""`` for files (``N lines in M files``), else e.g.
    ``a dataset in memory`` (``N records (a dataset in memory)``)."""

    @property
    def documents(self) -> int:
        """Documents written, all outputs together."""
        return sum(out.documents for out in self.outputs.values())

    @property
    def tokens(self) -> int:
        """Tokens written (end-of-document tokens included), all outputs together."""
        return sum(out.tokens for out in self.outputs.values())

    @property
    def skipped_total(self) -> int:
        """Records (or single keys of records) skipped by a ``skip`` policy."""
        return sum(self.skipped.values())

    @property
    def megabytes_per_second(self) -> float:
        """Uncompressed input MB (10^6 bytes) per second."""
        return self.nbytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_second(self) -> float:
        """Tokens written per second."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def add(self, chunk) -> None:
        """Count an encoded chunk that has been written."""
        self.line_count += chunk.line_count
        self.blank_lines += chunk.blank_lines
        self.nbytes += chunk.nbytes
        self.disk_bytes += chunk.disk_bytes
        self.worker_cpu_seconds += chunk.worker_cpu_seconds
        self.skipped.update(chunk.skipped)

    def skipped_text(self) -> str:
        """E.g. ``skipped: 2 malformed JSON lines, 1 record without key 'text'``, or ``none``."""
        parts = [f"{count:,} {label}" for label, count in skipped_labels(self.skipped)]
        if self.blank_lines:
            parts.append(f"{self.blank_lines:,} blank line{'s' * (self.blank_lines != 1)}")
        return "skipped: " + (", ".join(parts) if parts else "none")

    def lines(self) -> list[str]:
        """The report: one row per output, the skip counts, then the totals line."""
        width = max(len(out.path_prefix) for out in self.outputs.values())
        rows = [
            f"  {out.path_prefix:<{width}}  {self.dtype:<6} {out.documents:>12,} documents "
            f"{out.tokens:>14,} tokens"
            + (
                f" ({out.empty_documents:,} empty, kept as Megatron does)"
                if out.empty_documents
                else ""
            )
            for out in self.outputs.values()
        ]
        rows.append(f"  {self.skipped_text()}")
        rows.append(
            f"done: {self.documents:,} documents, {self.tokens:,} tokens from "
            f"{self.read_text()}, {self.seconds:.2f} s "
            f"({rate_text(self.nbytes, self.seconds)}, {self.tokens_per_second:,.0f} tokens/s, "
            f"{self.workers} worker{'s' * (self.workers != 1)})"
        )
        return rows

    def read_text(self) -> str:
        """``206 lines in 1 file``, or ``206 records (a dataset in memory)``."""
        if self.source:
            plural = "s" * (self.line_count != 1)
            return f"{self.line_count:,} record{plural} ({self.source})"
        return (
            f"{self.line_count:,} line{'s' * (self.line_count != 1)} in {self.files} "
            f"file{'s' * (self.files != 1)}"
        )

    def as_dict(self) -> dict:
        """JSON-ready form (used by the benchmark)."""
        return {
            "files": self.files,
            "documents": self.documents,
            "tokens": self.tokens,
            "lines": self.line_count,
            "blank_lines": self.blank_lines,
            "bytes": self.nbytes,
            "seconds": self.seconds,
            "worker_cpu_seconds": self.worker_cpu_seconds,
            "mb_per_s": self.megabytes_per_second,
            "tokens_per_s": self.tokens_per_second,
            "workers": self.workers,
            "dtype": self.dtype,
            "skipped": {label: count for label, count in skipped_labels(self.skipped)},
            "outputs": {
                key: {
                    "path_prefix": out.path_prefix,
                    "documents": out.documents,
                    "sequences": out.sequences,
                    "empty_documents": out.empty_documents,
                    "tokens": out.tokens,
                }
                for key, out in self.outputs.items()
            },
        }


_RATE_UNITS = ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"))


def rate_text(nbytes: float, seconds: float) -> str:
    """Input bytes per second in the unit that shows them: ``812 B/s``, ``3.4 kB/s``,
    ``12.5 MB/s``, ``1.20 GB/s`` (powers of 10, as ``megabytes_per_second``)."""
    rate = nbytes / seconds if seconds > 0 else 0.0
    for scale, unit in _RATE_UNITS:
        if rate >= scale:
            value = rate / scale
            return f"{value:.2f} {unit}" if unit == "GB/s" else f"{value:.1f} {unit}"
    return f"{rate:.0f} B/s"


def dtype_name(dtype) -> str:
    """``uint16`` for ``numpy.uint16`` etc."""
    return numpy.dtype(dtype).name


__all__ = ["OutputStats", "PreprocessSummary", "dtype_name", "rate_text"]

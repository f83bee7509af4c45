"""The outputs of a preprocess run: one ``.bin``/``.idx`` builder per key (and partition).

:class:`Outputs` appends encoded chunks in input order.  Documents may hold several
sequences (list-valued text, sentence splitting) or none (an empty document kept by
Megatron's rule: ``document_indices`` repeats its previous value).

With ``partitions > 1`` (Megatron's ``--partitions``), record ``i`` (0-based, counting
every line or row of every input in order) goes to partition ``i % partitions``; each
partition is written to a temporary pair and the parts are concatenated in partition
order at the end, which is the document order Megatron's round-robin split gives.
``keep_sequential_samples`` (a contiguous split) gives the unpartitioned order, so it
is written directly.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any, Optional

import numpy

from tokenloom.format import IndexedDatasetBuilder, get_bin_path, get_idx_path
from tokenloom.preprocess.encode import EncodedChunk, KeyOutput
from tokenloom.preprocess.summary import PreprocessSummary


def write_documents(builder: IndexedDatasetBuilder, out: KeyOutput) -> None:
    """Append ``out``'s documents: runs of one-sequence documents in one vectorised call."""
    counts, lengths, tokens = out.sequence_counts, out.sequence_lengths, out.tokens
    if counts.shape[0] == 0:
        return
    if bool((counts == 1).all()):
        builder.add_flat_documents(tokens, lengths)
        return
    seq_starts = numpy.concatenate(([0], numpy.cumsum(counts)))
    tok_starts = numpy.concatenate(([0], numpy.cumsum(lengths)))
    odd = numpy.flatnonzero(counts != 1).tolist() + [counts.shape[0]]
    doc = 0
    for stop in odd:
        if stop > doc:  # documents doc..stop-1 have one sequence each
            a, b = seq_starts[doc], seq_starts[stop]
            builder.add_flat_documents(tokens[tok_starts[a] : tok_starts[b]], lengths[a:b])
        if stop < counts.shape[0]:
            a, b = seq_starts[stop], seq_starts[stop + 1]
            builder.add_document(tokens[tok_starts[a] : tok_starts[b]], lengths[a:b])
        doc = stop + 1


def _select(out: KeyOutput, mask: numpy.ndarray) -> KeyOutput:
    """The documents of ``out`` where ``mask`` is True."""
    seq_mask = numpy.repeat(mask, out.sequence_counts)
    tok_mask = numpy.repeat(seq_mask, out.sequence_lengths)
    return KeyOutput(
        out.tokens[tok_mask],
        out.sequence_lengths[seq_mask],
        out.sequence_counts[mask],
        out.lines[mask],
    )


class Outputs:
    """Builders for every key (and partition), the counts, and the log lines."""

    def __init__(
        self,
        prefixes: dict[str, str],
        dtype: Any,
        summary: PreprocessSummary,
        bar: Any,
        partitions: int = 1,
        log_interval: Optional[int] = None,
    ) -> None:
        self.prefixes, self.summary, self.bar, self.dtype = prefixes, summary, bar, dtype
        self.partitions = max(int(partitions), 1)
        self.log_interval = log_interval
        self._parts: dict[str, list[str]] = {}
        self.builders: dict[str, list[IndexedDatasetBuilder]] = {}
        for key, prefix in prefixes.items():
            names = (
                [prefix]
                if self.partitions == 1
                else [_part_prefix(prefix, part) for part in range(self.partitions)]
            )
            self._parts[key] = names
            self.builders[key] = [
                IndexedDatasetBuilder(get_bin_path(name), dtype=dtype) for name in names
            ]
        self.started = time.perf_counter()
        self._file, self._file_base, self._file_lines = "", 0, 0
        self._logged = 0

    def _record_base(self, chunk: EncodedChunk) -> int:
        """0-based number of the chunk's first record among all records read so far."""
        if chunk.path != self._file:
            self._file_base += self._file_lines
            self._file, self._file_lines = chunk.path, 0
        self._file_lines = max(self._file_lines, chunk.first_line - 1 + chunk.line_count)
        return self._file_base + chunk.first_line - 1

    def write(self, chunk: EncodedChunk) -> None:
        """Append one encoded chunk (chunks arrive in input order)."""
        base = self._record_base(chunk)
        for key, out in chunk.outputs.items():
            builders = self.builders[key]
            if self.partitions == 1:
                write_documents(builders[0], out)
            else:
                part_of = (base + (out.lines - chunk.first_line)) % self.partitions
                for part, builder in enumerate(builders):
                    write_documents(builder, _select(out, part_of == part))
            stats = self.summary.outputs[key]
            stats.documents += out.documents
            stats.sequences += int(out.sequence_lengths.shape[0])
            stats.tokens += int(out.tokens.shape[0])
            stats.empty_documents += int((out.sequence_counts == 0).sum())
        self.summary.add(chunk)
        self._progress(chunk)

    def _progress(self, chunk: EncodedChunk) -> None:
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        self.bar.set_postfix_str(
            f"{self.summary.documents:,} docs, {self.summary.tokens / elapsed:,.0f} tok/s",
            refresh=False,
        )
        self.bar.update(chunk.disk_bytes or chunk.nbytes)
        records = self.summary.line_count
        if self.log_interval and records // self.log_interval > self._logged:
            self._logged = records // self.log_interval
            sys.stderr.write(
                f"Processed {records:,} records ({records / elapsed:,.0f} "
                f"records/s, {self.summary.nbytes / elapsed / (1 << 20):.2f} "
                "MiB/s).\n"
            )
            sys.stderr.flush()

    def finalize(self, extra_files: Optional[dict[str, dict[str, bytes]]] = None) -> None:
        """Publish every output (partitions concatenated in order first), each with its
        ``extra_files[key]`` (suffix -> bytes, e.g. the provenance sidecar) in one publish."""
        for key, builders in self.builders.items():
            extra = (extra_files or {}).get(key)
            if self.partitions == 1:
                builders[0].finalize(get_idx_path(self.prefixes[key]), extra_files=extra)
                continue
            for builder, name in zip(builders, self._parts[key]):
                builder.finalize(get_idx_path(name))
            merged = IndexedDatasetBuilder(get_bin_path(self.prefixes[key]), dtype=self.dtype)
            try:
                for name in self._parts[key]:
                    merged.add_index(name)
                merged.finalize(get_idx_path(self.prefixes[key]), extra_files=extra)
            except BaseException:
                merged.abort()
                raise
            finally:
                self._remove_parts(key)

    def _remove_parts(self, key: str) -> None:
        for name in self._parts[key]:
            for path in (get_bin_path(name), get_idx_path(name)):
                with contextlib.suppress(OSError):
                    os.unlink(path)

    def abort(self) -> None:
        """Discard everything (the final paths are left untouched)."""
        for key, builders in self.builders.items():
            for builder in builders:
                builder.abort()
            if self.partitions > 1:
                self._remove_parts(key)


def _part_prefix(prefix: str, part: int) -> str:
    folder, name = os.path.split(prefix)
    return os.path.join(folder, f".{name}.partition-{part}-{os.getpid()}")


__all__ = ["Outputs", "write_documents"]

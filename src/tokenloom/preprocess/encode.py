"""Tokenize parsed chunks: one batch-encode call per key, results as flat token arrays.

This is the work a preprocess worker does (in-process with ``--workers 1``, in a worker
process otherwise).  Tokens are converted to the output dtype here, after checking
that every id lies inside the tokenizer's vocabulary, so that writing is a memcpy.

Megatron's document rules are applied here, vectorised: every sentence of a document
is encoded on its own and becomes one sequence; sentences of zero tokens are dropped;
the EOD (``append_eod``) goes at the end of the document's last sequence; a document
left with no sequence is *empty* and follows ``Policy.on_empty`` (``keep``: a document
with no sequence and no EOD, Megatron's rule).

The work has two halves: :func:`start_encoding` is the tokenizer's own batch call,
which runs in native code with the GIL released; :func:`finish_encoding` turns its
output (Python id lists) into arrays, which needs the GIL.  With one worker the
pipeline runs the second half in the writer thread, so the tokenizing thread does
nothing but the tokenizer's batch call, as the tokenizer would on its own.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.errors import PreprocessError, TokenizerError
from tokenloom.preprocess.records import FAIL, KEEP, ParsedChunk, Policy, Splitter
from tokenloom.preprocess.sources import parse_any
from tokenloom.process_caches import register_state


@dataclass(frozen=True)
class EncodeSpec:
    """What a worker needs to turn input chunks into output arrays."""

    keys: tuple[str, ...]
    """The JSON keys (one output each)."""
    policy: Policy
    """Bad-record policies."""
    dtype: Any
    """Output token dtype."""
    eod: Optional[int] = None
    """End-of-document id appended to every non-empty document (None: none)."""
    splitter: Splitter = None
    """Sentence splitter applied to every text (None: a text is one sentence)."""


@dataclass
class KeyOutput:
    """One key's share of a chunk: flat tokens, sequence lengths, sequences per document."""

    tokens: numpy.ndarray
    sequence_lengths: numpy.ndarray
    sequence_counts: numpy.ndarray
    lines: numpy.ndarray  # line (or row) number of every document

    @property
    def documents(self) -> int:
        """Number of documents in the batch."""
        return int(self.sequence_counts.shape[0])


@dataclass
class EncodedChunk:
    """Tokens of one chunk, per key, and the counts of what was read."""

    path: str
    outputs: dict[str, KeyOutput]
    skipped: Counter = field(default_factory=Counter)
    first_line: int = 1
    line_count: int = 0
    blank_lines: int = 0
    nbytes: int = 0
    disk_bytes: int = 0
    worker_cpu_seconds: float = 0.0  # CPU time a worker process spent on this chunk


def _check_ids(flat: numpy.ndarray, tokenizer: Any, where: str) -> None:
    if flat.size == 0:
        return
    low, high = int(flat.min()), int(flat.max())
    if low < 0 or high >= int(tokenizer.vocab_size):
        bad = low if low < 0 else high
        raise TokenizerError(
            f"{where}: the tokenizer produced id {bad}, outside its vocabulary "
            f"0..{int(tokenizer.vocab_size) - 1} ({tokenizer!r}); its "
            "vocab_size is wrong"
        )


def _encode_texts(tokenizer: Any, texts: list) -> Callable[[], tuple]:
    """Run the tokenizer on ``texts`` now; the result converts to (flat, lengths) when called."""
    deferred = read_attribute(tokenizer, "encode_batch_deferred", None)
    if deferred is not None:
        return deferred(texts)
    encode_flat = read_attribute(tokenizer, "encode_batch_flat", None)
    if encode_flat is not None:
        result = encode_flat(texts)
        return lambda: result
    arrays = [numpy.asarray(ids).reshape(-1) for ids in tokenizer.encode_batch(texts)]
    lengths = numpy.fromiter(map(len, arrays), dtype=numpy.int64, count=len(arrays))
    flat = numpy.concatenate(arrays) if arrays else numpy.zeros(0, dtype=numpy.int64)
    return lambda: (flat, lengths)


def _documents(
    flat: numpy.ndarray, text_lengths: numpy.ndarray, counts: numpy.ndarray, eod: Optional[int]
) -> tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
    """Megatron's rules: (tokens, sequence lengths, sequences per document)."""
    text_lengths = numpy.asarray(text_lengths, dtype=numpy.int64)
    nonzero = text_lengths > 0
    owner = numpy.repeat(numpy.arange(counts.shape[0]), counts)
    lengths = text_lengths[nonzero]
    per_doc = numpy.bincount(owner[nonzero], minlength=counts.shape[0]).astype(numpy.int64)
    if eod is None or lengths.shape[0] == 0:
        return flat, lengths, per_doc
    last = numpy.cumsum(per_doc)[per_doc > 0] - 1  # each non-empty document's last sequence
    flat = numpy.insert(flat, numpy.cumsum(lengths)[last], eod)
    lengths = lengths.copy()
    lengths[last] += 1
    return flat, lengths, per_doc


def _apply_empty_policy(out: KeyOutput, key: str, parsed: ParsedChunk, policy: Policy) -> KeyOutput:
    empty = out.sequence_counts == 0
    if policy.on_empty == KEEP or not empty.any():
        return out
    if policy.on_empty == FAIL:
        line = int(out.lines[int(numpy.flatnonzero(empty)[0])])
        raise PreprocessError(
            f"{parsed.path}:{line}: the document under key {key!r} is empty "
            "(it encodes to zero tokens); remove it, or pass --on-empty keep "
            "(Megatron's rule) or skip"
        )
    parsed.skipped[("empty", key)] += int(empty.sum())
    return KeyOutput(
        out.tokens, out.sequence_lengths, out.sequence_counts[~empty], out.lines[~empty]
    )


@dataclass
class PendingChunk:
    """A parsed chunk whose texts the tokenizer has encoded; ``finish`` converts its output."""

    parsed: ParsedChunk
    finishers: dict[str, Callable[[], tuple]]


def start_encoding(parsed: ParsedChunk, tokenizer: Any) -> PendingChunk:
    """The tokenizer's batch call for every key of ``parsed`` (the expensive, GIL-free part)."""
    return PendingChunk(
        parsed, {key: _encode_texts(tokenizer, texts) for key, texts in parsed.texts.items()}
    )


def finish_encoding(pending: PendingChunk, tokenizer: Any, spec: EncodeSpec) -> EncodedChunk:
    """Convert the tokenizer's output to per-key arrays in ``spec.dtype`` (Megatron's rules)."""
    parsed = pending.parsed
    out = EncodedChunk(
        parsed.path,
        {},
        first_line=parsed.first_line,
        line_count=parsed.line_count,
        blank_lines=parsed.blank_lines,
        nbytes=parsed.nbytes,
        disk_bytes=parsed.disk_bytes,
    )
    for key, finish in pending.finishers.items():
        flat, text_lengths = finish()
        _check_ids(flat, tokenizer, f"{parsed.path} (key {key!r})")
        counts = numpy.asarray(parsed.counts[key], dtype=numpy.int64)
        tokens, lengths, per_doc = _documents(numpy.asarray(flat), text_lengths, counts, spec.eod)
        result = KeyOutput(
            tokens.astype(spec.dtype, copy=False),
            lengths,
            per_doc,
            numpy.asarray(parsed.lines[key], dtype=numpy.int64),
        )
        out.outputs[key] = _apply_empty_policy(result, key, parsed, spec.policy)
    out.skipped = parsed.skipped
    return out


def encode_parsed(parsed: ParsedChunk, tokenizer: Any, spec: EncodeSpec) -> EncodedChunk:
    """Batch-encode every key's texts of ``parsed`` (Megatron's document rules)."""
    return finish_encoding(start_encoding(parsed, tokenizer), tokenizer, spec)


# -- worker-process side --------------------------------------------------------------
class WorkerJob:
    """The job of a preprocess worker process: the tokenizer and the spec that the
    pool's initializer (:func:`init_worker`) handed it. Registered process state."""

    def __init__(self) -> None:
        self._job: Optional[tuple[Any, EncodeSpec]] = None

    def set(self, tokenizer: Any, spec: EncodeSpec) -> None:
        """Remember the job of this worker process."""
        self._job = (tokenizer, spec)

    def get(self) -> tuple[Any, EncodeSpec]:
        """``(tokenizer, spec)``; RuntimeError outside a worker (none was set)."""
        if self._job is None:
            raise RuntimeError("process_chunk called outside a preprocess worker")
        return self._job

    def clear(self) -> None:
        """Forget the job (a worker's next chunk then fails with the RuntimeError)."""
        self._job = None


WORKER_JOB = WorkerJob()
register_state(
    WORKER_JOB,
    "preprocess.encode: the pool worker's job",
    "the (tokenizer, EncodeSpec) that init_worker set in a preprocess worker process",
    WORKER_JOB.clear,
)


def init_worker(tokenizer: Any, spec: EncodeSpec) -> None:
    """Process-pool initializer: remember the job; the tokenizer runs single-threaded."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core per worker process
    WORKER_JOB.set(tokenizer, spec)


def process_chunk(chunk: Any) -> EncodedChunk:
    """Parse and encode one raw chunk (JSONL bytes or records) in a worker process."""
    (tokenizer, spec), started = WORKER_JOB.get(), time.process_time()
    parsed = parse_any(chunk, spec)
    encoded = encode_parsed(parsed, tokenizer, spec)
    encoded.worker_cpu_seconds = time.process_time() - started
    return encoded


__all__ = [
    "EncodeSpec",
    "KeyOutput",
    "EncodedChunk",
    "PendingChunk",
    "start_encoding",
    "finish_encoding",
    "encode_parsed",
    "init_worker",
    "process_chunk",
    "WorkerJob",
    "WORKER_JOB",
]

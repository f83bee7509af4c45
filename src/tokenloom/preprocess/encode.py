"""Tokenize parsed chunks: one batch-encode call per key, results as flat token arrays.

This is the work a preprocess worker does (in-process with ``--workers 1``, in a worker
process otherwise).  Tokens are converted to the output dtype here, after checking
that every id lies inside the tokenizer's vocabulary, so that writing is a memcpy.

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
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Sequence

import numpy

from tokenloom.errors import PreprocessError, TokenizerError
from tokenloom.preprocess.inputs import RawChunk
from tokenloom.preprocess.records import FAIL, KEEP, ParsedChunk, Policy, parse_chunk


@dataclass
class EncodedChunk:
    """Tokens of one chunk: per key a flat array in the output dtype and the documents' lengths."""

    tokens: Dict[str, numpy.ndarray]
    lengths: Dict[str, numpy.ndarray]
    skipped: Counter = field(default_factory=Counter)
    line_count: int = 0
    blank_lines: int = 0
    nbytes: int = 0
    disk_bytes: int = 0
    worker_cpu_seconds: float = 0.0  # CPU time a worker process spent on this chunk


def _check_ids(flat: numpy.ndarray, tokenizer, where: str) -> None:
    if flat.size == 0:
        return
    low, high = int(flat.min()), int(flat.max())
    if low < 0 or high >= int(tokenizer.vocab_size):
        bad = low if low < 0 else high
        raise TokenizerError(f"{where}: the tokenizer produced id {bad}, outside its vocabulary "
                             f"0..{int(tokenizer.vocab_size) - 1} ({tokenizer!r}); its "
                             "vocab_size is wrong")


def _encode_texts(tokenizer, texts) -> Callable[[], tuple]:
    """Run the tokenizer on ``texts`` now; the result converts to (flat, lengths) when called."""
    deferred = getattr(tokenizer, "encode_batch_deferred", None)
    if deferred is not None:
        return deferred(texts)
    encode_flat = getattr(tokenizer, "encode_batch_flat", None)
    if encode_flat is not None:
        result = encode_flat(texts)
        return lambda: result
    arrays = [numpy.asarray(ids).reshape(-1) for ids in tokenizer.encode_batch(texts)]
    lengths = numpy.fromiter(map(len, arrays), dtype=numpy.int64, count=len(arrays))
    flat = numpy.concatenate(arrays) if arrays else numpy.zeros(0, dtype=numpy.int64)
    return lambda: (flat, lengths)


def _apply_empty_policy(lengths: numpy.ndarray, lines, key: str, parsed: ParsedChunk,
                        policy: Policy) -> numpy.ndarray:
    empty = lengths == 0
    if policy.on_empty == KEEP or not empty.any():
        return lengths
    if policy.on_empty == FAIL:
        line = lines[int(numpy.flatnonzero(empty)[0])]
        raise PreprocessError(f"{parsed.path}:{line}: the document under key {key!r} is empty "
                              "(it encodes to zero tokens); remove it, or pass --on-empty skip "
                              "(or keep)")
    parsed.skipped[("empty", key)] += int(empty.sum())
    return lengths[~empty]


@dataclass
class PendingChunk:
    """A parsed chunk whose texts the tokenizer has encoded; ``finish`` converts its output."""

    parsed: ParsedChunk
    finishers: Dict[str, Callable[[], tuple]]


def start_encoding(parsed: ParsedChunk, tokenizer) -> PendingChunk:
    """The tokenizer's batch call for every key of ``parsed`` (the expensive, GIL-free part)."""
    return PendingChunk(parsed, {key: _encode_texts(tokenizer, texts)
                                 for key, texts in parsed.texts.items()})


def finish_encoding(pending: PendingChunk, tokenizer, dtype, policy: Policy) -> EncodedChunk:
    """Convert the tokenizer's output to flat arrays in ``dtype``; empty documents follow ``policy``."""
    parsed = pending.parsed
    out = EncodedChunk({}, {}, line_count=parsed.line_count, blank_lines=parsed.blank_lines,
                       nbytes=parsed.nbytes, disk_bytes=parsed.disk_bytes)
    for key, finish in pending.finishers.items():
        flat, lengths = finish()
        _check_ids(flat, tokenizer, f"{parsed.path} (key {key!r})")
        out.lengths[key] = _apply_empty_policy(lengths, parsed.lines[key], key, parsed, policy)
        out.tokens[key] = flat.astype(dtype, copy=False)
    out.skipped = parsed.skipped
    return out


def encode_parsed(parsed: ParsedChunk, tokenizer, dtype, policy: Policy) -> EncodedChunk:
    """Batch-encode every key's texts of ``parsed``; empty documents follow ``policy``."""
    return finish_encoding(start_encoding(parsed, tokenizer), tokenizer, dtype, policy)


# -- worker-process side --------------------------------------------------------------
_WORKER: Optional[dict] = None


def init_worker(tokenizer, keys: Sequence[str], dtype, policy: Policy) -> None:
    """Process-pool initializer: remember the job; the tokenizer runs single-threaded."""
    global _WORKER
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core per worker process
    _WORKER = {"tokenizer": tokenizer, "keys": tuple(keys), "dtype": dtype, "policy": policy}


def process_chunk(chunk: RawChunk) -> EncodedChunk:
    """Parse and encode one raw chunk in a worker process."""
    if _WORKER is None:
        raise RuntimeError("process_chunk called outside a preprocess worker")
    job, started = _WORKER, time.process_time()
    parsed = parse_chunk(chunk, job["keys"], job["policy"])
    encoded = encode_parsed(parsed, job["tokenizer"], job["dtype"], job["policy"])
    encoded.worker_cpu_seconds = time.process_time() - started
    return encoded


__all__ = ["EncodedChunk", "PendingChunk", "start_encoding", "finish_encoding", "encode_parsed",
           "init_worker", "process_chunk"]

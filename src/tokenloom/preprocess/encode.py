"""Tokenize parsed chunks: one batch-encode call per key, results as flat token arrays.

This is the work a preprocess worker does (in-process with ``--workers 1``, in a worker
process otherwise).  Tokens are converted to the output dtype here, after checking
that every id lies inside the tokenizer's vocabulary, so that writing is a memcpy.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence

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


def _encode_texts(tokenizer, texts) -> tuple:
    encode_flat = getattr(tokenizer, "encode_batch_flat", None)
    if encode_flat is not None:
        return encode_flat(texts)
    arrays = [numpy.asarray(ids).reshape(-1) for ids in tokenizer.encode_batch(texts)]
    lengths = numpy.fromiter(map(len, arrays), dtype=numpy.int64, count=len(arrays))
    flat = numpy.concatenate(arrays) if arrays else numpy.zeros(0, dtype=numpy.int64)
    return flat, lengths


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


def encode_parsed(parsed: ParsedChunk, tokenizer, dtype, policy: Policy) -> EncodedChunk:
    """Batch-encode every key's texts of ``parsed``; empty documents follow ``policy``."""
    out = EncodedChunk({}, {}, line_count=parsed.line_count, blank_lines=parsed.blank_lines,
                       nbytes=parsed.nbytes, disk_bytes=parsed.disk_bytes)
    for key, texts in parsed.texts.items():
        flat, lengths = _encode_texts(tokenizer, texts)
        _check_ids(flat, tokenizer, f"{parsed.path} (key {key!r})")
        out.lengths[key] = _apply_empty_policy(lengths, parsed.lines[key], key, parsed, policy)
        out.tokens[key] = flat.astype(dtype, copy=False)
    out.skipped = parsed.skipped
    return out


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


__all__ = ["EncodedChunk", "encode_parsed", "init_worker", "process_chunk"]

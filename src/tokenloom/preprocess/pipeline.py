"""The preprocess pipeline: read -> parse -> batch-encode -> write, stages overlapped.

``workers=1``: a reader thread reads and parses chunks of whole lines, the calling
thread runs the tokenizer's batch call on them (Hugging Face, tiktoken and
SentencePiece release the GIL while they encode), and a writer thread converts the
tokenizer's output to arrays and appends them to the outputs.  So the tokenizing
thread does only what the tokenizer does on its own, and the Python-side work
(parsing, id-list conversion, writing) overlaps with it on another core.

``workers=N``: a reader thread cuts raw chunks, N worker processes (spawned, each
running its tokenizer on one thread) parse and encode them, and the writer thread
appends the results in input order, so the output is identical for any N.

Outputs are written with ``IndexedDatasetBuilder.add_documents`` under temporary
names and published only when every input was processed; on any error nothing is
published and the old outputs, if any, stay as they were.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Dict, Optional, Sequence, Union

from tokenloom._progress import progress
from tokenloom.errors import PreprocessError, TokenizerError
from tokenloom.format import IndexedDatasetBuilder, get_bin_path, get_idx_path, optimal_dtype
from tokenloom.preprocess._threads import BackgroundIterator, BackgroundSink
from tokenloom.preprocess.encode import (EncodedChunk, PendingChunk, finish_encoding, init_worker,
                                         process_chunk, start_encoding)
from tokenloom.preprocess.inputs import (DEFAULT_CHUNK_BYTES, expand_inputs, iter_chunks,
                                         total_disk_bytes)
from tokenloom.preprocess.records import Policy, parse_chunk
from tokenloom.preprocess.summary import OutputStats, PreprocessSummary, dtype_name
from tokenloom.tokenizers import load_tokenizer
from tokenloom.tokenizers.base import split_flat

_QUEUE_DEPTH = 4
_CHUNKS_PER_WORKER = 8  # on inputs of a few MB
_MIN_CHUNK_BYTES = 64 << 10


def output_prefix_for(output_prefix: str, key: str, level: str = "document") -> str:
    """Megatron's naming: ``{output_prefix}_{key}_{level}``."""
    return f"{os.fspath(output_prefix)}_{key}_{level}"


class _Writer:
    """Appends encoded chunks to one builder per key and keeps the counts."""

    def __init__(self, prefixes: Dict[str, str], dtype, eod: Optional[int],
                 summary: PreprocessSummary, bar) -> None:
        self.builders = {key: IndexedDatasetBuilder(get_bin_path(prefix), dtype=dtype)
                         for key, prefix in prefixes.items()}
        self.prefixes, self.eod, self.summary, self.bar = prefixes, eod, summary, bar
        self.started = time.perf_counter()

    def write(self, chunk: EncodedChunk) -> None:
        for key, builder in self.builders.items():
            lengths = chunk.lengths.get(key)
            if lengths is None or lengths.shape[0] == 0:
                continue
            builder.add_documents(split_flat(chunk.tokens[key], lengths), eod_token=self.eod,
                                  chunk_size=1 << 62)
            stats = self.summary.outputs[key]
            stats.documents += int(lengths.shape[0])
            stats.tokens += int(lengths.sum()) + (lengths.shape[0] if self.eod is not None else 0)
        self.summary.add(chunk)
        rate = self.summary.tokens / max(time.perf_counter() - self.started, 1e-9)
        self.bar.set_postfix_str(f"{self.summary.documents:,} docs, {rate:,.0f} tok/s",
                                 refresh=False)
        self.bar.update(chunk.disk_bytes)  # redraws the bar with the new postfix

    def finalize(self) -> None:
        for key, builder in self.builders.items():
            builder.finalize(get_idx_path(self.prefixes[key]))

    def abort(self) -> None:
        for builder in self.builders.values():
            builder.abort()


def _run_in_process(paths, keys, tokenizer, policy, chunk_bytes, sink) -> None:
    """Reader thread parses, this thread encodes, the sink's thread converts and writes."""
    parsed_chunks = (parse_chunk(chunk, keys, policy) for chunk in iter_chunks(paths, chunk_bytes))
    reader = BackgroundIterator(parsed_chunks, maxsize=_QUEUE_DEPTH)
    try:
        for parsed in reader:
            sink.put(start_encoding(parsed, tokenizer))
    except Exception:
        sink.close()  # an error the writer met in an earlier chunk is reported first
        raise
    finally:
        reader.close()


def _consumer(writer: "_Writer", workers: int, tokenizer, dtype, policy):
    """What the writer thread does with each item: encoded chunks, or (one worker) pending ones."""
    if workers > 1:
        return writer.write

    def finish_and_write(pending: PendingChunk) -> None:
        writer.write(finish_encoding(pending, tokenizer, dtype, policy))
    return finish_and_write


def worker_context():
    """``forkserver`` where available (safe with threads, and cheap after the first run:
    workers fork from a server that has the preprocess modules imported), else ``spawn``."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["tokenloom.preprocess.encode"])
        return context
    return multiprocessing.get_context("spawn")


def balanced_chunk_bytes(total_bytes: int, chunk_bytes: int, workers: int) -> int:
    """Chunk size: at most ``chunk_bytes``, but small enough that each worker gets about
    ``_CHUNKS_PER_WORKER`` chunks of a small input; never below ``_MIN_CHUNK_BYTES``.

    With one chunk per worker nothing overlaps: with one worker, the tokenizer would wait
    for the whole input to be parsed and the writer for the tokenizer; with several, one
    worker may still be busy long after the others ran out of work.
    """
    share = int(total_bytes) // (_CHUNKS_PER_WORKER * max(int(workers), 1))
    return max(min(int(chunk_bytes), share), min(int(chunk_bytes), _MIN_CHUNK_BYTES))


def _run_workers(paths, keys, tokenizer, dtype, policy, chunk_bytes, sink, workers) -> None:
    reader = BackgroundIterator(iter_chunks(paths, chunk_bytes), maxsize=2 * workers)
    pool = ProcessPoolExecutor(workers, mp_context=worker_context(), initializer=init_worker,
                               initargs=(tokenizer, tuple(keys), dtype, policy))
    pending: collections.deque = collections.deque()
    try:
        for chunk in reader:
            pending.append(pool.submit(process_chunk, chunk))
            if len(pending) > 2 * workers:
                sink.put(pending.popleft().result())
        while pending:
            sink.put(pending.popleft().result())
    except BrokenProcessPool as error:
        raise PreprocessError(f"a preprocess worker process died ({error}); it may have run out "
                              "of memory: try fewer --workers") from error
    finally:
        reader.close()
        pool.shutdown(wait=True, cancel_futures=True)


def _check_keys(json_keys: Sequence[str]) -> tuple:
    keys = tuple(json_keys)
    if not keys:
        raise PreprocessError("no --json-keys given; name the key that holds the text, e.g. text")
    duplicated = sorted({key for key in keys if keys.count(key) > 1})
    if duplicated or any(not isinstance(key, str) or not key for key in keys):
        raise PreprocessError(f"--json-keys {list(keys)}: keys must be distinct non-empty strings")
    return keys


def _resolve_tokenizer(tokenizer, append_eod: bool):
    if isinstance(tokenizer, str):
        tokenizer = load_tokenizer(tokenizer)
    if append_eod and getattr(tokenizer, "eod", None) is None:
        raise TokenizerError(f"--append-eod needs an end-of-document token, but {tokenizer!r} has "
                             "none; name one with --eod-token")
    return tokenizer


def preprocess(inputs: Union[str, Sequence[str]], output_prefix: str, tokenizer, *,
               json_keys: Sequence[str] = ("text",), append_eod: bool = False,
               workers: int = 1, policy: Optional[Policy] = None,
               chunk_bytes: int = DEFAULT_CHUNK_BYTES,
               show_progress: Optional[bool] = None) -> PreprocessSummary:
    """Tokenize JSONL ``inputs`` into one ``.bin``/``.idx`` pair per JSON key.

    Args:
        inputs: files or glob patterns (plain, gzip, zstd, bzip2 or xz JSONL).
        output_prefix: outputs are ``{output_prefix}_{key}_document.{bin,idx}``.
        tokenizer: a tokenizer object or a spec string (see :func:`load_tokenizer`).
        json_keys: the keys whose string values are the documents.
        append_eod: append the tokenizer's end-of-document id to every document.
        workers: 1 = in-process threads; N > 1 = N tokenizing processes (started like
            ``multiprocessing``'s forkserver/spawn, so call this under
            ``if __name__ == "__main__":`` in a script).
        policy: what to do with bad lines (see :class:`Policy`); defaults apply if None.
        chunk_bytes: input bytes per batch handed to the tokenizer (less on small inputs, so
            that reading, encoding and writing overlap and workers share the work evenly).
        show_progress: progress bar on stderr (None: only when stderr is a terminal).
    """
    keys, policy = _check_keys(json_keys), policy or Policy()
    workers = int(workers)
    if workers < 1:
        raise PreprocessError(f"--workers {workers}: use 1 or more")
    paths = expand_inputs(inputs)
    chunk_bytes = balanced_chunk_bytes(total_disk_bytes(paths), chunk_bytes, workers)
    tokenizer = _resolve_tokenizer(tokenizer, append_eod)
    started = time.perf_counter()  # throughput counts the pipeline, not the tokenizer's loading
    dtype = optimal_dtype(int(tokenizer.vocab_size))
    prefixes = {key: output_prefix_for(output_prefix, key) for key in keys}
    summary = PreprocessSummary(len(paths), dtype_name(dtype), workers,
                                {key: OutputStats(key, prefix) for key, prefix in prefixes.items()})
    with progress(total=total_disk_bytes(paths), unit="B", unit_scale=True, desc="preprocess",
                  enabled=show_progress) as bar:
        writer = _Writer(prefixes, dtype, tokenizer.eod if append_eod else None, summary, bar)
        sink = BackgroundSink(_consumer(writer, workers, tokenizer, dtype, policy),
                              maxsize=_QUEUE_DEPTH)
        try:
            if workers == 1:
                _run_in_process(paths, keys, tokenizer, policy, chunk_bytes, sink)
            else:
                _run_workers(paths, keys, tokenizer, dtype, policy, chunk_bytes, sink, workers)
            sink.close()
            writer.finalize()
        except BaseException:
            sink.cancel()
            writer.abort()
            raise
    summary.seconds = time.perf_counter() - started
    return summary


__all__ = ["preprocess", "output_prefix_for"]

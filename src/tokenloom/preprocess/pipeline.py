"""The preprocess pipeline: read -> parse -> batch-encode -> write, stages overlapped.

The one public entry point, also the one the Ray engine runs per shard::

    preprocess(inputs, output_prefix, tokenizer, *, json_keys=("text",), append_eod=False,
               workers=1, policy=None, chunk_bytes=DEFAULT_CHUNK_BYTES, show_progress=None,
               partitions=1, keep_sequential_samples=False, sentence_splitter=None,
               log_interval=None) -> PreprocessSummary

Its arguments:

    inputs: file paths or globs (JSONL, plain or gzip/zstd/bzip2/xz, or Parquet; also
        ``s3://``/``msc://`` objects), a :class:`~tokenloom.preprocess.sources.FileRange`
        (the lines of a plain JSONL file that start in a byte range), a Hugging Face
        ``Dataset``/``IterableDataset``, an
        :class:`~tokenloom.preprocess.sources.HFDiskDataset`, or any iterable of records
        (dicts) or texts (str, one key).  A list of str is a list of paths; pass texts as
        an iterator (``iter(texts)``) or as records.
    output_prefix: outputs are ``{output_prefix}_{key}_document.{bin,idx}`` (``_sentence``
        with a sentence splitter), published atomically when every input was read.
    tokenizer: a tokenizer object (see :mod:`tokenloom.tokenizers`, e.g. from
        :func:`~tokenloom.tokenizers.load_tokenizer` or
        :func:`~tokenloom.tokenizers.megatron.build_megatron_tokenizer`) or a spec string.
    json_keys: the keys whose values (a string, or a list of sentences) are documents.
    append_eod: append the tokenizer's end-of-document id to every non-empty document.
    workers: 1 = in-process threads; N > 1 = N tokenizing processes (started like
        ``multiprocessing``'s forkserver/spawn, so call it under
        ``if __name__ == "__main__":`` in a script).  The output is the same for any N.
    policy: what to do with bad records (see :class:`Policy`); defaults apply if None.
    chunk_bytes: input bytes per batch handed to the tokenizer (less on small inputs, so
        that reading, encoding and writing overlap and workers share the work evenly).
    show_progress: progress bar on stderr (None: only when stderr is a terminal).
    partitions: Megatron's ``--partitions``: records dealt round-robin into this many
        parts, concatenated in part order (unless ``keep_sequential_samples``).
    keep_sequential_samples: partitions keep the input order (the unpartitioned output).
    sentence_splitter: a function text -> sentences; each sentence becomes a sequence
        and the outputs are named ``..._sentence`` as Megatron's ``--split-sentences``.
    log_interval: print a progress line to stderr every this many records.

It returns the counts (a :class:`PreprocessSummary`).

``workers=1``: a reader thread reads and parses chunks of whole lines, the calling
thread runs the tokenizer's batch call on them (Hugging Face, tiktoken and
SentencePiece release the GIL while they encode), and a writer thread converts the
tokenizer's output to arrays and appends them to the outputs.  So the tokenizing
thread does only what the tokenizer does on its own, and the Python-side work
(parsing, id-list conversion, writing) overlaps with it on another core.

``workers=N``: a reader thread cuts raw chunks, N worker processes (spawned, each
running its tokenizer on one thread) parse and encode them, and the writer thread
appends the results in input order, so the output is identical for any N.

Outputs are written under temporary names and published only when every input was
processed; on any error nothing is published and the old outputs, if any, stay as
they were.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Optional

from tokenloom.attributes import read_attribute
from tokenloom.errors import PreprocessError, TokenizerError
from tokenloom.format import optimal_dtype
from tokenloom.preprocess._outputs import Outputs
from tokenloom.preprocess._pool import WorkerPool
from tokenloom.preprocess._threads import BackgroundIterator, BackgroundSink
from tokenloom.preprocess.encode import (
    EncodeSpec,
    PendingChunk,
    finish_encoding,
    init_worker,
    process_chunk,
    start_encoding,
)
from tokenloom.preprocess.inputs import DEFAULT_CHUNK_BYTES
from tokenloom.preprocess.records import Policy, Splitter
from tokenloom.preprocess.sources import Source, open_source, parse_any
from tokenloom.preprocess.summary import OutputStats, PreprocessSummary, dtype_name
from tokenloom.progress import progress
from tokenloom.provenance import preprocess_sidecars
from tokenloom.tokenizers import load_tokenizer

_QUEUE_DEPTH = 4
_CHUNKS_PER_WORKER = 8  # on inputs of a few MB
_MIN_CHUNK_BYTES = 64 << 10


def output_prefix_for(output_prefix: str, key: str, level: str = "document") -> str:
    """Megatron's naming: ``{output_prefix}_{key}_{level}``."""
    return f"{os.fspath(output_prefix)}_{key}_{level}"


def _run_in_process(
    chunks: Iterator[Any], tokenizer: Any, spec: EncodeSpec, sink: BackgroundSink
) -> None:
    """Reader thread parses, this thread encodes, the sink's thread converts and writes."""
    parsed_chunks = (parse_any(chunk, spec) for chunk in chunks)
    reader = BackgroundIterator(parsed_chunks, maxsize=_QUEUE_DEPTH)
    try:
        for parsed in reader:
            sink.put(start_encoding(parsed, tokenizer))
    except Exception:
        sink.close()  # an error the writer met in an earlier chunk is reported first
        raise
    finally:
        reader.close()


def _consumer(
    outputs: Outputs, workers: int, tokenizer: Any, spec: EncodeSpec
) -> Callable[[Any], None]:
    """What the writer thread does with each item: encoded chunks, or (one worker) pending ones."""
    if workers > 1:
        return outputs.write

    def finish_and_write(pending: PendingChunk) -> None:
        outputs.write(finish_encoding(pending, tokenizer, spec))

    return finish_and_write


def worker_context():
    """``forkserver`` where available (safe with threads, and cheap after the first run:
    workers fork from a server that has the preprocess modules imported), else ``spawn``."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(
            ["tokenloom.preprocess.encode", "tokenloom.preprocess._pool"]
        )
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


def _describe_chunk(chunk) -> str:
    return f"input shard {chunk.path} from line {chunk.first_line}"


def _run_workers(
    chunks: Iterator[Any], tokenizer: Any, spec: EncodeSpec, sink: BackgroundSink, workers: int
) -> None:
    """Chunks to a :class:`WorkerPool` (which never hangs on a dead worker or Ctrl-C)."""
    reader = BackgroundIterator(chunks, maxsize=2 * workers)
    try:
        with WorkerPool(
            workers,
            worker_context(),
            init_worker,
            (tokenizer, spec),
            process_chunk,
            describe=_describe_chunk,
        ) as pool:
            for encoded in pool.map(reader):
                sink.put(encoded)
    finally:
        reader.close()


def _check_keys(json_keys: Sequence[str]) -> tuple:
    keys = tuple(json_keys)
    if not keys:
        raise PreprocessError("no --json-keys given; name the key that holds the text, e.g. text")
    duplicated = sorted({key for key in keys if keys.count(key) > 1})
    if duplicated or any(not isinstance(key, str) or not key for key in keys):
        raise PreprocessError(f"--json-keys {list(keys)}: keys must be distinct non-empty strings")
    return keys


def _resolve_tokenizer(tokenizer: Any, append_eod: bool) -> Any:
    if isinstance(tokenizer, str):
        tokenizer = load_tokenizer(tokenizer)
    if append_eod and read_attribute(tokenizer, "eod", None) is None:
        raise TokenizerError(
            f"--append-eod needs an end-of-document token, but {tokenizer!r} has "
            "none; name one with --eod-token"
        )
    return tokenizer


def _positive(value: Any, what: str) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or int(value) != value
        or value < 1
    ):
        raise PreprocessError(f"{what} {value!r}: use a whole number of 1 or more")
    return int(value)


def _checked_counts(
    workers: Any, partitions: Any, chunk_bytes: Any, log_interval: Any
) -> tuple[int, int, int, Optional[int]]:
    """The numeric options as whole numbers of 1 or more (PreprocessError naming one that is not)."""
    return (
        _positive(workers, "--workers"),
        _positive(partitions, "--partitions"),
        _positive(chunk_bytes, "chunk_bytes"),
        None if log_interval is None else _positive(log_interval, "--log-interval"),
    )


def _new_summary(
    source: Source, dtype: Any, workers: int, prefixes: dict[str, str]
) -> PreprocessSummary:
    summary = PreprocessSummary(
        source.files,
        dtype_name(dtype),
        workers,
        {key: OutputStats(key, prefix) for key, prefix in prefixes.items()},
    )
    summary.source = source.description
    return summary


def _progress_bar(total_bytes: Optional[int], show_progress: Optional[bool]) -> Any:
    return progress(
        total=total_bytes, unit="B", unit_scale=True, desc="preprocess", enabled=show_progress
    )


def _write_outputs(
    chunks: Callable[[], Iterator[Any]],
    outputs: Outputs,
    tokenizer: Any,
    spec: EncodeSpec,
    workers: int,
    sidecars: Callable[[], dict[str, dict[str, bytes]]],
) -> None:
    """Run the stages over every chunk, then publish the outputs with their sidecars; on
    any error (Ctrl-C included) nothing is published and the old outputs stay."""
    sink = BackgroundSink(_consumer(outputs, workers, tokenizer, spec), maxsize=_QUEUE_DEPTH)
    try:
        if workers == 1:
            _run_in_process(chunks(), tokenizer, spec, sink)
        else:
            _run_workers(chunks(), tokenizer, spec, sink, workers)
        sink.close()
        outputs.finalize(sidecars())
    except BaseException:
        sink.cancel()
        outputs.abort()
        raise


def preprocess(
    inputs: Any,
    output_prefix: str,
    tokenizer: Any,
    *,
    json_keys: Sequence[str] = ("text",),
    append_eod: bool = False,
    workers: int = 1,
    policy: Optional[Policy] = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    show_progress: Optional[bool] = None,
    partitions: int = 1,
    keep_sequential_samples: bool = False,
    sentence_splitter: Splitter = None,
    log_interval: Optional[int] = None,
) -> PreprocessSummary:
    """Tokenize ``inputs`` into one ``.bin``/``.idx`` pair per JSON key (Megatron's bytes);
    the arguments are described in this module's docstring."""
    keys, policy = _check_keys(json_keys), policy or Policy()
    workers, partitions, chunk_bytes, log_interval = _checked_counts(
        workers, partitions, chunk_bytes, log_interval
    )
    source = open_source(inputs, keys)
    if source.total_bytes:
        chunk_bytes = balanced_chunk_bytes(source.total_bytes, chunk_bytes, workers)
    tokenizer = _resolve_tokenizer(tokenizer, append_eod)
    started = time.perf_counter()  # throughput counts the pipeline, not the tokenizer's loading
    dtype = optimal_dtype(int(tokenizer.vocab_size))
    spec = EncodeSpec(keys, policy, dtype, tokenizer.eod if append_eod else None, sentence_splitter)
    level = "document" if sentence_splitter is None else "sentence"
    prefixes = {key: output_prefix_for(output_prefix, key, level) for key in keys}
    summary = _new_summary(source, dtype, workers, prefixes)
    sidecars = functools.partial(
        preprocess_sidecars,
        inputs,
        tokenizer,
        summary,
        append_eod=append_eod,
        level=level,
        partitions=partitions,
        keep_sequential_samples=keep_sequential_samples,
        sentence_splitter=sentence_splitter,
    )
    parts = 1 if keep_sequential_samples else partitions
    with _progress_bar(source.total_bytes, show_progress) as bar:
        outputs = Outputs(prefixes, dtype, summary, bar, parts, log_interval)
        chunks = functools.partial(source.chunks, chunk_bytes)
        _write_outputs(chunks, outputs, tokenizer, spec, workers, sidecars)
    summary.seconds = time.perf_counter() - started
    return summary


__all__ = ["preprocess", "output_prefix_for"]

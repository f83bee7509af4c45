"""What ``preprocess`` can read: JSONL files, Parquet files, Hugging Face datasets, Python records.

Every kind is cut into chunks that a worker parses with the same policies
(:mod:`tokenloom.preprocess.records`), so the counts and the bytes written are the
same whatever the container holds the texts:

* JSONL (plain or compressed) and Parquet files, recognised by content (``PAR1``);
  Parquet needs ``pyarrow`` (an optional extra) and reads one column per key.
* a byte range of a plain JSONL file (:class:`FileRange`: the lines that start in it);
* a ``datasets.Dataset`` or ``IterableDataset`` (``datasets``, an optional extra), or a
  dataset saved with ``save_to_disk`` (:class:`HFDiskDataset`, ``--hf-dataset``);
* any iterable of records (dicts) or of texts (str, for a single key).

Rows are numbered from 1, like lines, and errors name ``NAME row N``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from tokenloom.attributes import read_attribute
from tokenloom.errors import PreprocessError
from tokenloom.preprocess.inputs import (
    RawChunk,
    expand_inputs,
    input_size,
    iter_file_chunks,
    iter_file_range_chunks,
    open_binary,
)
from tokenloom.preprocess.records import (
    ParsedChunk,
    add_record,
    fail_or_count,
    new_parsed,
    parse_chunk,
)
from tokenloom.preprocess.remote_inputs import is_remote_input

ROWS_PER_CHUNK = 1024
_PARQUET_MAGIC = b"PAR1"


@dataclass(frozen=True)
class RecordChunk:
    """Records (dicts, or texts) of one source, numbered from ``first_row``."""

    name: str
    """The file or dataset the records come from (for messages)."""
    first_row: int
    """1-based number of the first record."""
    records: list
    """The records: mappings, or str texts (a single key)."""
    disk_bytes: int = 0
    """Bytes of the file on disk this chunk stands for (progress)."""
    check_text: bool = False
    """Check that texts are valid Unicode (Python strings may hold lone surrogates)."""

    @property
    def path(self) -> str:
        """The source's name (as :class:`RawChunk` names its file)."""
        return self.name

    @property
    def first_line(self) -> int:
        """The first row's number (as :class:`RawChunk` numbers its first line)."""
        return self.first_row


@dataclass(frozen=True)
class FileRange:
    """The lines of a plain JSONL file that start in bytes ``[start, stop)`` (for sharding)."""

    path: str
    """The file."""
    start: int
    """First byte (a line starting before it belongs to the previous range)."""
    stop: int
    """End byte (exclusive); the line that starts before it is read to its end."""


@dataclass(frozen=True)
class HFDiskDataset:
    """A Hugging Face dataset saved with ``save_to_disk`` (``--hf-dataset PATH``)."""

    path: str
    """The folder ``save_to_disk`` wrote."""
    split: Optional[str] = None
    """The split of a ``DatasetDict`` (needed when it has several)."""


def _text_bytes(records: list) -> int:
    total = 0
    for record in records:
        if isinstance(record, str):
            total += len(record)
        elif isinstance(record, Mapping):
            total += sum(len(v) for v in record.values() if isinstance(v, str))
    return total


def parse_records(
    chunk: RecordChunk, keys: Sequence[str], policy: Any, splitter: Any = None
) -> ParsedChunk:
    """Parse the records of ``chunk`` with the same policies as JSONL lines."""
    parsed = new_parsed(chunk.name, keys, chunk.first_row)
    parsed.line_count, parsed.disk_bytes = len(chunk.records), chunk.disk_bytes
    parsed.nbytes = _text_bytes(chunk.records)
    for number, record in enumerate(chunk.records, start=chunk.first_row):
        where = f"{chunk.name} row {number}"
        if isinstance(record, str) and len(keys) == 1:
            record = {keys[0]: record}
        if not isinstance(record, Mapping):
            fail_or_count(
                policy.on_bad_json,
                parsed,
                "bad_json",
                "",
                f"{where}: expected a record (a dict of --json-keys) or, for one "
                f"key, a str; got {type(record).__name__}",
            )
            continue
        add_record(record, number, where, keys, policy, parsed, splitter, chunk.check_text)
    return parsed


def parse_any(chunk: Union[RawChunk, RecordChunk], spec: Any) -> ParsedChunk:
    """Parse a JSONL chunk or a record chunk per ``spec`` (keys, policy, splitter)."""
    if isinstance(chunk, RecordChunk):
        return parse_records(chunk, spec.keys, spec.policy, spec.splitter)
    return parse_chunk(chunk, spec.keys, spec.policy, spec.splitter)


def is_parquet(path: str) -> bool:
    """Whether ``path`` starts with Parquet's magic bytes."""
    with open_binary(path, buffered=False) as handle:
        return handle.read(4) == _PARQUET_MAGIC


def _import_pyarrow_parquet(path: str) -> Any:
    try:
        import pyarrow.parquet
    except ImportError as error:
        raise PreprocessError(
            f"{path} is a Parquet file, which needs the 'pyarrow' package: "
            "pip install 'tokenloom[parquet]'"
        ) from error
    return pyarrow.parquet


def iter_parquet_chunks(
    path: str, keys: Sequence[str], rows: int = ROWS_PER_CHUNK
) -> Iterator[RecordChunk]:
    """Record chunks of a Parquet file: the ``keys`` columns, ``rows`` rows at a time."""
    parquet = _import_pyarrow_parquet(path)
    if not is_remote_input(path):
        yield from _parquet_chunks(parquet, path, path, keys, rows)
        return
    with open_binary(path, buffered=False) as source:  # read by the ranges pyarrow asks
        yield from _parquet_chunks(parquet, source, path, keys, rows)


def _parquet_chunks(
    parquet: Any, source: Any, path: str, keys: Sequence[str], rows: int
) -> Iterator[RecordChunk]:
    try:
        handle = parquet.ParquetFile(source)
    except Exception as error:  # pyarrow.ArrowInvalid and friends
        raise PreprocessError(f"{path}: cannot read the Parquet file: {error}") from error
    present = [key for key in keys if key in handle.schema_arrow.names]
    total_rows = max(int(handle.metadata.num_rows), 1)
    size, first = input_size(path) or 0, 1
    batches = (
        handle.iter_batches(batch_size=rows, columns=present)
        if present
        else ([None] * -(-handle.metadata.num_rows // rows))
    )
    for batch in batches:
        if batch is None:
            count = min(rows, handle.metadata.num_rows - first + 1)
            records: list[dict] = [{} for _ in range(count)]
        else:
            columns = [batch.column(key).to_pylist() for key in present]
            records = [dict(zip(present, values)) for values in zip(*columns)]
        yield RecordChunk(path, first, records, size * len(records) // total_rows)
        first += len(records)


def _batched(rows: Iterable[Any], name: str, size: int, check_text: bool) -> Iterator[RecordChunk]:
    batch: list = []
    first = 1
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield RecordChunk(name, first, batch, check_text=check_text)
            first, batch = first + len(batch), []
    if batch:
        yield RecordChunk(name, first, batch, check_text=check_text)


def _is_hf_dataset(value: Any) -> bool:
    module = type(value).__module__ or ""
    return module.startswith("datasets.")


def _hf_rows(dataset: Any, keys: Sequence[str], size: int) -> Iterator[dict]:
    kind = type(dataset).__name__
    if kind in ("DatasetDict", "IterableDatasetDict"):
        raise PreprocessError(
            f"a {kind} holds splits {list(dataset)}: pass one, e.g. "
            f"dataset[{next(iter(dataset), 'train')!r}] (--hf-split)"
        )
    names = read_attribute(dataset, "column_names", None)
    present = [key for key in keys if names is None or key in names]
    if kind == "Dataset":
        view = dataset.select_columns(present) if present else dataset.select_columns([])
        if not present:
            yield from ({} for _ in range(len(dataset)))
            return
        for batch in view.iter(batch_size=size):
            yield from (dict(zip(present, values)) for values in zip(*(batch[k] for k in present)))
        return
    yield from dataset  # IterableDataset: one dict per row


def load_hf_disk_dataset(source: HFDiskDataset) -> Any:
    """``datasets.load_from_disk``, one split chosen; errors say what to pass."""
    try:
        import datasets
    except ImportError as error:
        raise PreprocessError(
            "--hf-dataset needs the 'datasets' package: pip install 'tokenloom[hf]'"
        ) from error
    if not os.path.isdir(source.path):
        raise PreprocessError(
            f"--hf-dataset {source.path}: no such folder (pass the folder "
            "written by Dataset.save_to_disk)"
        )
    try:
        dataset = datasets.load_from_disk(source.path)
    except (FileNotFoundError, ValueError) as error:
        raise PreprocessError(
            f"--hf-dataset {source.path}: not a dataset saved with save_to_disk: {error}"
        ) from error
    if type(dataset).__name__ == "DatasetDict":
        splits = list(dataset)
        split = source.split or (splits[0] if len(splits) == 1 else None)
        if split not in dataset:
            raise PreprocessError(
                f"--hf-dataset {source.path} has splits {splits}: choose one with --hf-split"
            )
        dataset = dataset[split]
    elif source.split is not None:
        raise PreprocessError(f"--hf-split {source.split}: {source.path} holds one split only")
    return dataset


@dataclass
class Source:
    """Chunks to parse, and what the progress bar and summary need to know."""

    chunks: Callable[[int], Iterator[Union[RawChunk, RecordChunk]]]
    """``chunks(chunk_bytes)``: the chunks, JSONL cut into about ``chunk_bytes`` each."""
    files: int
    """Input files (1 for a dataset or an iterable)."""
    total_bytes: Optional[int]
    """Bytes on disk (None when unknown)."""
    description: str = ""
    """What the records come from when they are not lines of files (the summary's
    ``N records (...)``): ``a dataset in memory``, ``a Python iterable``, ..."""


def _file_chunks(
    paths: list[str], keys: Sequence[str], chunk_bytes: int
) -> Iterator[Union[RawChunk, RecordChunk]]:
    for path in paths:
        if is_parquet(path):
            yield from iter_parquet_chunks(path, keys)
        else:
            yield from iter_file_chunks(path, chunk_bytes)


def _rows(rows: Iterable[Any], name: str, check_text: bool, description: str) -> Source:
    return Source(lambda _: _batched(rows, name, ROWS_PER_CHUNK, check_text), 1, None, description)


def _total_bytes(paths: Sequence[str]) -> Optional[int]:
    sizes = [input_size(path) for path in paths]
    return None if any(size is None for size in sizes) else sum(sizes)  # type: ignore[arg-type]


def open_source(inputs: Any, keys: Sequence[str]) -> Source:
    """The :class:`Source` for any accepted ``inputs`` (see the module docstring)."""
    if isinstance(inputs, (str, os.PathLike)) or (
        isinstance(inputs, (list, tuple))
        and inputs
        and all(isinstance(item, (str, os.PathLike)) for item in inputs)
    ):
        paths = expand_inputs(inputs)  # type: ignore[arg-type]
        return Source(
            lambda size: _file_chunks(paths, keys, size),
            len(paths),
            _total_bytes(paths),
        )
    if isinstance(inputs, FileRange):
        return Source(
            lambda size: iter_file_range_chunks(inputs.path, inputs.start, inputs.stop, size),
            1,
            max(int(inputs.stop) - int(inputs.start), 0),
        )
    if isinstance(inputs, HFDiskDataset):
        dataset = load_hf_disk_dataset(inputs)
        rows = _hf_rows(dataset, keys, ROWS_PER_CHUNK)
        return _rows(rows, inputs.path, False, f"the dataset saved in {inputs.path}")
    if _is_hf_dataset(inputs):
        name = (
            read_attribute(read_attribute(inputs, "info", None), "dataset_name", None) or "dataset"
        )
        return _rows(
            _hf_rows(inputs, keys, ROWS_PER_CHUNK), str(name), False, "a dataset in memory"
        )
    if isinstance(inputs, Iterable) and not isinstance(inputs, (str, bytes, Mapping)):
        return _rows(inputs, "records", True, "a Python iterable")
    raise PreprocessError(
        f"cannot read inputs of type {type(inputs).__name__}: pass files or "
        "globs, a FileRange, a Hugging Face dataset, or an iterable of "
        "records or texts"
    )


__all__ = [
    "RecordChunk",
    "FileRange",
    "HFDiskDataset",
    "Source",
    "open_source",
    "parse_records",
    "parse_any",
    "iter_parquet_chunks",
    "is_parquet",
    "load_hf_disk_dataset",
    "ROWS_PER_CHUNK",
]

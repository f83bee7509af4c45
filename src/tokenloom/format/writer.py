"""``IndexedDatasetBuilder``: write a Megatron ``.bin``/``.idx`` pair.

Tokens are streamed to a temporary sibling of the ``.bin``; the index (4 bytes per
sequence, 8 per document) is held in bounded memory and spilled to an unlinked
temporary file in the output's folder past 2**16 entries
(:class:`~tokenloom.format._spool.SpooledArray`), and the ``.idx`` is written from it in
blocks, so a builder's memory does not grow with its data.  :meth:`IndexedDatasetBuilder.finalize` writes the ``.idx``
(and any sidecar files) to temporary names too and publishes them together through
:mod:`tokenloom.format.publish`: a crash or a concurrent writer at any instant leaves
the old pair or the new one, never a mix.  The bytes written are identical to
megatron-core's.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Mapping
from typing import Any, Optional, Union

import numpy
import numpy.typing as npt

from tokenloom.atomic import temporary_sibling
from tokenloom.attributes import read_attribute
from tokenloom.errors import FormatError, TokenloomError
from tokenloom.format._buffers import as_numpy, to_tokens
from tokenloom.format._spool import SpooledArray
from tokenloom.format.dtypes import normalize_dtype
from tokenloom.format.merge_source import MergeSource, copy_bin
from tokenloom.format.publish import discard, output_error, publish_pair, write_temporaries
from tokenloom.format.spec import get_bin_path, write_index_blocks

_INT32_MAX = numpy.iinfo(numpy.int32).max


def check_output_path(path: str, what: str) -> None:
    """FormatError up front when ``path`` cannot become a file: it is a directory, or a
    parent of it is a file (rather than at finalize, after all the work)."""
    if os.path.isdir(path):
        raise FormatError(
            f"{path}: the output {what} file is an existing directory; choose "
            "another --output-prefix or remove the directory"
        )
    parent = os.path.dirname(os.path.abspath(path))
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent) if os.path.dirname(parent) != parent else ""
    if parent and not os.path.isdir(parent):
        raise FormatError(
            f"{path}: cannot create the output {what} file: {parent} is a file, not a directory"
        )


class IndexedDatasetBuilder:
    """Builds a ``.bin``/``.idx`` pair.

    Args:
        bin_path: final path of the ``.bin`` (written under a temporary name until finalize).
        dtype: token dtype (``numpy.uint16`` for vocabularies below 65500, else ``numpy.int32``).
        multimodal: store an int8 mode per sequence.

    Use ``add_item`` + ``end_document``, ``add_document``, ``add_documents`` (many
    single-sequence documents at once) or ``add_index`` (append an existing pair),
    then ``finalize(idx_path)``.

    Tokens (and lengths, modes) may be anything ``numpy.array(tokens, dtype=dtype)``
    takes, as in megatron-core: arrays, torch tensors, (nested) lists of ints, numpy
    scalars or number strings (``"42"``).  Stricter than megatron-core, a value that
    would be stored changed is a FormatError naming it and its position: out of the
    dtype's range (numpy wraps ``int64(70000)`` to 4464 in uint16), not whole (numpy
    truncates ``1.5``), or not a number (``None``).
    """

    def __init__(
        self, bin_path: str, dtype: npt.DTypeLike = numpy.int32, multimodal: bool = False
    ) -> None:
        self.bin_path = os.fspath(bin_path)
        self.dtype = normalize_dtype(dtype)
        self.multimodal = bool(multimodal)
        self._pid = os.getpid()
        check_output_path(self.bin_path, "data")
        folder, what = os.path.dirname(os.path.abspath(self.bin_path)), self.bin_path
        self._lengths = SpooledArray(numpy.int32, folder, what)
        self._documents = SpooledArray(numpy.int64, folder, what, [0])
        self._modes: Optional[SpooledArray] = (
            SpooledArray(numpy.int8, folder, what) if self.multimodal else None
        )
        if self.bin_path.endswith(".bin"):
            check_output_path(self.bin_path[:-4] + ".idx", "index")
        try:
            self._tmp_bin: Optional[str] = temporary_sibling(self.bin_path)
        except OSError as error:
            raise FormatError(
                f"{self.bin_path}: cannot create the output data file "
                f"({error}); check that its directory can be created and "
                "written"
            ) from None
        self.data_file = open(self._tmp_bin, "wb")

    # -- index views ------------------------------------------------------------------
    @property
    def sequence_lengths(self) -> list[int]:
        """Lengths of the sequences added so far (a new list, as megatron-core's attribute)."""
        return [int(n) for n in self._lengths.view().tolist()]

    @property
    def document_indices(self) -> list[int]:
        """Document index so far, leading 0 included (a new list, as megatron-core's)."""
        return [int(n) for n in self._documents.view().tolist()]

    @property
    def sequence_modes(self) -> Optional[list[int]]:
        """Modes of the sequences added so far (a new list), None when not multimodal."""
        return None if self._modes is None else [int(m) for m in self._modes.view().tolist()]

    # -- adding data ------------------------------------------------------------------
    def _file(self) -> io.BufferedWriter:
        if self._tmp_bin is None:
            raise FormatError(f"{self.bin_path}: builder is already finalized or aborted")
        return self.data_file

    def _write(self, data: Union[bytes, memoryview]) -> None:
        try:
            self._file().write(data)
        except OSError as error:
            raise output_error(self.bin_path, error) from None

    def _tokens(self, values: object, what: str) -> npt.NDArray[Any]:
        return to_tokens(values, self.dtype, f"{self.bin_path}: {what}")

    def _check_mode(self, mode: object) -> int:
        where = f"{self.bin_path}: add_item"
        return int(to_tokens([mode], numpy.int8, where, item="mode")[0])

    def _modes_for(self, modes: object, count: int, what: str) -> Optional[npt.NDArray[numpy.int8]]:
        if not self.multimodal:
            if modes is not None:
                raise FormatError(
                    f"{self.bin_path}: {what}: modes given to a builder that is not "
                    "multimodal; pass multimodal=True"
                )
            return None
        if modes is None:
            return numpy.zeros(count, dtype=numpy.int8)
        checked = to_tokens(modes, numpy.int8, f"{self.bin_path}: {what}: modes", item="mode")
        if checked.shape[0] != count:
            raise FormatError(
                f"{self.bin_path}: {what}: {checked.shape[0]} modes for {count} sequences"
            )
        return checked

    def _check_lengths(self, lengths: npt.NDArray[numpy.int64], what: str) -> None:
        if lengths.size and (lengths.min() < 0 or lengths.max() > _INT32_MAX):
            raise FormatError(
                f"{self.bin_path}: {what}: sequence lengths must lie in "
                f"0..{_INT32_MAX}, got {lengths.min()}..{lengths.max()}"
            )

    def add_item(self, tensor: object, mode: int = 0) -> None:
        """Append one sequence to the current document: ``tensor`` holds its tokens (any
        form of the class docstring; megatron-core's ``add_item`` needs a torch tensor,
        this one takes any of them; the argument names are megatron-core's)."""
        array = self._tokens(tensor, "add_item")
        if array.shape[0] > _INT32_MAX:
            raise FormatError(
                f"{self.bin_path}: add_item: a sequence of {array.shape[0]} tokens "
                f"exceeds the int32 length field; split it"
            )
        checked = self._check_mode(mode) if self.multimodal else 0
        self._write(array.data.cast("B"))
        self._lengths.append(array.shape[0])
        if self._modes is not None:
            self._modes.append(checked)

    def end_document(self) -> None:
        """Close the current document (the sequences added since the last call)."""
        self._file()
        self._documents.append(len(self._lengths))

    def _tokens_and_lengths(
        self, tokens: object, lengths: object, where: str
    ) -> tuple[npt.NDArray[Any], npt.NDArray[numpy.int64]]:
        """Checked ``(tokens, int64 lengths)`` whose lengths add up to the token count."""
        array = self._tokens(tokens, where)
        counts = to_tokens(lengths, numpy.int64, f"{self.bin_path}: {where}: lengths", "length")
        self._check_lengths(counts, where)
        if int(counts.sum()) != array.shape[0]:
            raise FormatError(
                f"{self.bin_path}: {where}: lengths sum to {int(counts.sum())} "
                f"but there are {array.shape[0]} tokens"
            )
        return array, counts

    def add_document(self, tensor: object, lengths: object, modes: object = None) -> None:
        """Append one whole document: its tokens ``tensor`` split into sequences of ``lengths``
        (tokens, lengths and modes as in the class docstring; the lengths must add up
        to the number of tokens)."""
        array, counts = self._tokens_and_lengths(tensor, lengths, "add_document")
        mode_array = self._modes_for(modes, counts.shape[0], "add_document")
        self._write(array.data.cast("B"))
        self._lengths.extend(counts)
        if self._modes is not None and mode_array is not None:  # both or neither
            self._modes.extend(mode_array)
        self._documents.append(len(self._lengths))

    def add_documents(
        self,
        documents: Any,
        modes: object = None,
        eod_token: Optional[int] = None,
        chunk_size: int = 1_000_000,
    ) -> None:
        """Append many documents, each one sequence, writing in chunks of ~``chunk_size`` tokens.

        ``documents`` is an iterable of 1-D token arrays/lists/tensors or a 2-D jagged
        awkward Array; ``modes`` gives one mode per document (multimodal only);
        ``eod_token``, when given, is appended to every document.
        """
        from tokenloom.format._jagged import iter_flat_chunks

        eod = None
        if eod_token is not None:
            eod = self._tokens([eod_token], "add_documents: eod_token")
        all_modes = None if modes is None else as_numpy(modes)
        done = 0
        for chunk, counts in iter_flat_chunks(documents, max(int(chunk_size), 1)):
            flat = self._tokens(chunk, "add_documents")
            chunk_modes = None if all_modes is None else all_modes[done : done + counts.shape[0]]
            self._write_flat(flat, counts, eod, chunk_modes)
            done += counts.shape[0]
        if all_modes is not None and done != all_modes.shape[0]:
            raise FormatError(
                f"{self.bin_path}: add_documents: {all_modes.shape[0]} modes for {done} documents"
            )

    def add_flat_documents(
        self,
        tokens: object,
        lengths: object,
        modes: object = None,
        eod_token: Optional[int] = None,
    ) -> None:
        """Append ``len(lengths)`` single-sequence documents cut from the flat ``tokens``.

        The vectorised form of :meth:`add_documents` for tokenizers that return one
        flat array plus per-document lengths: no per-document Python work at all.
        """
        flat, counts = self._tokens_and_lengths(tokens, lengths, "add_flat_documents")
        eod = None
        if eod_token is not None:
            eod = self._tokens([eod_token], "add_flat_documents: eod_token")
        self._write_flat(flat, counts, eod, None if modes is None else as_numpy(modes))

    def _write_flat(
        self,
        flat: npt.NDArray[Any],
        counts: npt.NDArray[numpy.int64],
        eod: Optional[npt.NDArray[Any]],
        modes: Optional[npt.NDArray[Any]],
    ) -> None:
        mode_array = self._modes_for(modes, counts.shape[0], "add_documents")
        if eod is not None:
            ends = numpy.cumsum(counts + 1) - 1
            out = numpy.empty(flat.shape[0] + counts.shape[0], dtype=self.dtype)
            keep = numpy.ones(out.shape[0], dtype=bool)
            keep[ends] = False
            out[keep] = flat
            out[ends] = eod[0]
            flat, counts = out, counts + 1
        self._check_lengths(counts, "add_documents")
        self._write(numpy.ascontiguousarray(flat).data.cast("B"))
        first = len(self._lengths)
        self._lengths.extend(counts)
        if self._modes is not None and mode_array is not None:  # both or neither
            self._modes.extend(mode_array)
        self._documents.extend(numpy.arange(first + 1, first + counts.shape[0] + 1))

    def add_index(self, path_prefix: str, progress: Optional[Callable[[int], None]] = None) -> None:
        """Append every document of the pair at ``path_prefix`` (same dtype and modality).

        ``progress(nbytes)`` is called as the ``.bin`` is copied.
        """
        self._file()
        with MergeSource(path_prefix) as source:  # read in blocks: bounded memory
            nbytes = source.check(self.dtype, self.multimodal)
            offset = len(self._lengths)
            for lengths in source.lengths():
                self._lengths.extend(lengths)
            for number, documents in enumerate(source.documents()):
                self._documents.extend(offset + (documents[1:] if number == 0 else documents))
            if self._modes is not None:  # an empty pair has none (its size cannot show them)
                for modes in source.modes():
                    self._modes.extend(modes)
        copy_bin(get_bin_path(path_prefix), nbytes, self._write, progress)

    # -- finishing ----------------------------------------------------------------------
    def finalize(
        self,
        idx_path: str,
        extra_files: Optional[Mapping[str, bytes]] = None,
        lock_timeout: Optional[float] = None,
    ) -> None:
        """Write the ``.idx`` and publish the pair (and ``extra_files``) as one change.

        ``extra_files`` maps a suffix to bytes, e.g. ``{".json": provenance}``, written to
        ``{prefix}{suffix}`` where ``prefix`` is ``idx_path`` without ``.idx``.  Readers
        and a crash at any instant see the old files or all the new ones (see
        :mod:`tokenloom.format.publish`); ``lock_timeout`` bounds the wait for another
        writer's publish in the same directory.
        """
        idx_path = os.fspath(idx_path)
        data_file = self._file()
        count = len(self._lengths)
        if int(self._documents.last()) != count:
            raise FormatError(
                f"{self.bin_path}: {count - int(self._documents.last())} sequence(s) were added "
                "after the last end_document(); call end_document() before finalize()"
            )
        prefix = idx_path[:-4] if idx_path.endswith(".idx") else idx_path
        check_output_path(idx_path, "index")
        moves: list[tuple[str, str]] = []
        try:
            try:
                data_file.flush()
                os.fsync(data_file.fileno())
                data_file.close()
            except OSError as error:
                raise output_error(self.bin_path, error) from None
            moves.append((self._write_idx(idx_path), idx_path))
            moves.extend(write_temporaries(prefix, extra_files or {}))
            publish_pair(prefix, [(str(self._tmp_bin), self.bin_path)] + moves, lock_timeout)
            self._tmp_bin = None
        except BaseException:
            discard(moves)
            self.abort()
            raise

    def _write_idx(self, idx_path: str) -> str:
        tmp_idx = temporary_sibling(idx_path)
        try:
            with open(tmp_idx, "wb") as handle:
                write_index_blocks(
                    handle,
                    self.dtype,
                    (len(self._lengths), len(self._documents)),
                    self._lengths.blocks,
                    self._documents.blocks(),
                    None if self._modes is None else self._modes.blocks(),
                )
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException as error:
            with contextlib.suppress(OSError):
                os.unlink(tmp_idx)
            if isinstance(error, OSError) and not isinstance(error, TokenloomError):
                raise output_error(idx_path, error) from None
            raise
        return tmp_idx

    def abort(self) -> None:
        """Discard everything written so far; the final paths are left untouched."""
        tmp, self._tmp_bin = self._tmp_bin, None
        with contextlib.suppress(Exception):
            self.data_file.close()
        for spool in (self._lengths, self._documents, self._modes):
            if spool is not None:
                spool.close()
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def __enter__(self) -> IndexedDatasetBuilder:
        return self

    def __exit__(self, *exc: object) -> None:
        """Leaving the block without ``finalize`` (or on an error) discards the data."""
        self.abort()

    def __del__(self) -> None:
        if read_attribute(self, "_pid", None) == os.getpid() and read_attribute(
            self, "_tmp_bin", None
        ):
            self.abort()


__all__ = ["IndexedDatasetBuilder", "check_output_path"]

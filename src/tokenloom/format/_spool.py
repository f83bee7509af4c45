"""``SpooledArray``: an append-only 1-D numpy array held in bounded memory.

The index of a ``.bin``/``.idx`` pair being written grows with the data: 4 bytes per
sequence (lengths), 8 per document (document indices), 1 per sequence (modes), and the
8-byte pointers computed when the ``.idx`` is written.  A builder that kept them in
memory would hold ~20 bytes per document until the end: 2 GB for 10⁸ documents.  This
array keeps the newest ``buffer_items`` values in memory and spills older ones to an
unlinked temporary file next to the output (so nothing is left behind by a crash, and
the spill uses the output's disk, not ``/tmp``); :meth:`blocks` reads them back in
bounded blocks.  Below ``buffer_items`` values it never touches the disk.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import IO, Any, Optional

import numpy
import numpy.typing as npt

from tokenloom.format.publish import output_error

DEFAULT_BUFFER_ITEMS = 1 << 16
"""Values held in memory before spilling (256 KiB of int32 lengths, 512 KiB of int64 indices)."""


class SpooledArray:
    """Append-only values of ``dtype``: the newest in memory, older ones in a temporary file.

    Args:
        dtype: the values' numpy dtype.
        folder: where the temporary file goes (the output's folder).
        what: the output path named in errors (a full disk, say).
        initial: values to start with.
        buffer_items: values held in memory before spilling.
    """

    def __init__(
        self,
        dtype: Any,
        folder: str,
        what: str,
        initial: npt.ArrayLike = (),
        buffer_items: int = DEFAULT_BUFFER_ITEMS,
    ) -> None:
        self.dtype = numpy.dtype(dtype)
        self._folder, self._what = folder or ".", what
        self._buffer = numpy.empty(max(int(buffer_items), 1), dtype=self.dtype)
        self._fill = 0
        self._spilled = 0  # values in the file
        self._file: Optional[IO[bytes]] = None
        self._last: Any = None
        self.extend(numpy.asarray(initial, dtype=self.dtype).ravel())

    def __len__(self) -> int:
        return self._spilled + self._fill

    @property
    def spilled(self) -> int:
        """How many values are in the temporary file (0: all in memory)."""
        return self._spilled

    def append(self, value: Any) -> None:
        """Append one value."""
        if self._fill == self._buffer.shape[0]:
            self._spill()
        self._buffer[self._fill] = value
        self._fill += 1
        self._last = self._buffer[self._fill - 1]

    def extend(self, values: npt.ArrayLike) -> None:
        """Append every value of a 1-D array-like (converted to the dtype)."""
        values = numpy.asarray(values).ravel()
        done, total = 0, values.shape[0]
        while done < total:
            if self._fill == self._buffer.shape[0]:
                self._spill()
            take = min(self._buffer.shape[0] - self._fill, total - done)
            self._buffer[self._fill : self._fill + take] = values[done : done + take]
            self._fill += take
            done += take
        if total:
            self._last = self._buffer[self._fill - 1]

    def last(self) -> Any:
        """The last value (IndexError when empty)."""
        if not len(self):
            raise IndexError("empty")
        return self._last

    def _spill(self) -> None:
        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(dir=self._folder, prefix=".tokenloom-index-")
            self._file.write(self._buffer[: self._fill].data.cast("B"))
        except OSError as error:
            raise output_error(self._what, error) from None
        self._spilled += self._fill
        self._fill = 0

    def blocks(self, block_items: Optional[int] = None) -> Iterator[npt.NDArray[Any]]:
        """Every value in order, in blocks of at most ``block_items`` (the buffer's size by
        default); a block is valid until the next one is read or a value is added."""
        size = max(int(block_items or self._buffer.shape[0]), 1)
        if self._file is not None:
            try:
                self._file.flush()
                descriptor, item = self._file.fileno(), self.dtype.itemsize
                for start in range(0, self._spilled, size):
                    count = min(size, self._spilled - start)
                    data = os.pread(descriptor, count * item, start * item)
                    if len(data) != count * item:
                        raise OSError(f"the temporary index file {self._file.name} shrank")
                    yield numpy.frombuffer(data, dtype=self.dtype)
            except OSError as error:
                raise output_error(self._what, error) from None
        for start in range(0, self._fill, size):
            yield self._buffer[start : min(start + size, self._fill)]

    def view(self) -> npt.NDArray[Any]:
        """All the values as one new array (O(length) memory: for small arrays and tests)."""
        parts = [numpy.array(block) for block in self.blocks()]
        return numpy.concatenate(parts) if parts else numpy.zeros(0, dtype=self.dtype)

    def close(self) -> None:
        """Drop the temporary file (its space is freed; the array is then unusable)."""
        handle, self._file = self._file, None
        if handle is not None:
            with contextlib.suppress(OSError):
                handle.close()


__all__ = ["SpooledArray", "DEFAULT_BUFFER_ITEMS"]

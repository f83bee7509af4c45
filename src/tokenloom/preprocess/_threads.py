"""Two small thread stages with bounded queues and error propagation.

:class:`BackgroundIterator` runs a producer (reading, parsing) in a thread while the
caller consumes; :class:`BackgroundSink` runs a consumer (writing) in a thread while
the caller produces.  An exception in the thread re-raises in the caller; ``close``
stops the thread early, so neither side ever hangs on a full or empty queue.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional

_DONE = object()
_POLL_S = 0.1
_JOIN_S = 5.0


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class BackgroundIterator:
    """Iterate ``iterable`` in a daemon thread, keeping at most ``maxsize`` items ahead."""

    def __init__(self, iterable: Iterable[Any], maxsize: int = 4, name: str = "reader") -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(int(maxsize), 1))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(iterable,), name=name, daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, iterable: Iterable[Any]) -> None:
        try:
            for item in iterable:
                if not self._put(item):
                    return
        except BaseException as error:  # handed to the consumer
            self._put(_Failure(error))
            return
        self._put(_DONE)

    def __iter__(self) -> Iterator[Any]:
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item

    def close(self, timeout: float = _JOIN_S) -> None:
        """Stop the producer (its current item finishes) and wait for the thread, at most
        ``timeout`` seconds: a producer stuck in a read (a stalled network file system)
        is left behind as a daemon thread rather than hanging the caller."""
        self._stop.set()
        self._thread.join(timeout)


class BackgroundSink:
    """Feed items to ``consume`` in a thread; ``put`` blocks while ``maxsize`` items wait."""

    def __init__(
        self, consume: Callable[[Any], None], maxsize: int = 4, name: str = "writer"
    ) -> None:
        self._consume = consume
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(int(maxsize), 1))
        self._error: Optional[BaseException] = None
        self._cancelled = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            if self._error is not None or self._cancelled:
                continue  # drain after a failure so that producers never block
            try:
                self._consume(item)
            except BaseException as error:
                self._error = error

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def put(self, item: Any) -> None:
        """Queue ``item``; raises the consumer's error if it has failed."""
        self._raise_if_failed()
        while True:
            try:
                self._queue.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                self._raise_if_failed()

    def close(self) -> None:
        """Wait until every queued item is consumed; raise the consumer's error if any."""
        self._queue.put(_DONE)
        self._thread.join()
        self._raise_if_failed()

    def cancel(self) -> None:
        """Drop the items still queued and stop the thread (errors are not raised)."""
        self._cancelled = True
        self._queue.put(_DONE)
        self._thread.join()


__all__ = ["BackgroundIterator", "BackgroundSink"]

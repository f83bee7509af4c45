"""A process pool for preprocessing that never hangs: dead workers, Ctrl-C, errors.

``concurrent.futures.ProcessPoolExecutor`` can wait forever on a result when a worker
is SIGKILLed (the OOM killer), and its shutdown can hang in the queue feeder thread
after Ctrl-C.  This pool keeps one task in flight per worker over a pipe each, waits
on the pipes and the workers' process sentinels together (so a death is seen at
once), and on any exit terminates its workers (SIGTERM, then SIGKILL) within a
bounded time.  Workers ignore SIGINT: Ctrl-C reaches the main process only, which
then stops the pool, so no worker prints a ``KeyboardInterrupt`` traceback.

Results come back in submission order.
"""

from __future__ import annotations

import collections
import signal
import traceback
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any, Optional

from tokenloom.errors import PreprocessError

_STOP = None
_JOIN_S = 2.0


def worker_main(
    conn: Connection,
    initializer: Callable[..., None],
    initargs: tuple[Any, ...],
    function: Callable[[Any], Any],
) -> None:
    """Body of a worker process: run ``function`` on each task until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    try:
        initializer(*initargs)
    except BaseException as error:  # reported as the answer to the first task
        failure: Optional[BaseException] = error
    else:
        failure = None
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return  # the main process went away
        if task is _STOP:
            return
        seq, item = task
        try:
            if failure is not None:
                raise failure
            answer: tuple[int, bool, Any] = (seq, True, function(item))
        except Exception as error:  # the main process re-raises it
            answer = (seq, False, _picklable(error))
        conn.send(answer)


def _picklable(error: Exception) -> Exception:
    import pickle

    try:
        pickle.dumps(error)
        return error
    except Exception:
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
        return PreprocessError(f"a preprocess worker failed: {text}")


class _Worker:
    def __init__(self, number: int, context, target_args: tuple[Any, ...]) -> None:
        self.number = number
        self.conn, child = context.Pipe(duplex=True)
        self.process = context.Process(
            target=worker_main,
            args=(child,) + target_args,
            name=f"tokenloom-preprocess-{number}",
            daemon=True,
        )
        self.process.start()
        child.close()
        self.task: Optional[tuple[int, Any]] = None  # (seq, description) in flight


class WorkerPool:
    """``workers`` processes running ``function(item)`` after ``initializer(*initargs)``.

    ``describe(item)`` names an item in errors (e.g. "input.jsonl from line 1201")."""

    def __init__(
        self,
        workers: int,
        context,
        initializer: Callable[..., None],
        initargs: tuple[Any, ...],
        function: Callable[[Any], Any],
        describe: Callable[[Any], str] = repr,
    ) -> None:
        self._describe = describe
        self._workers: list[_Worker] = []
        try:
            for number in range(int(workers)):
                self._workers.append(_Worker(number, context, (initializer, initargs, function)))
        except BaseException:
            self.close()
            raise

    def map(self, items: Iterable[Any]) -> Iterator[Any]:
        """Results of ``function`` over ``items``, in order; raises a worker's error, or a
        PreprocessError naming the worker and the item when a worker dies."""
        items = iter(items)
        done: dict[int, Any] = {}
        order: collections.deque[int] = collections.deque()
        exhausted, next_seq = False, 0
        while True:
            for worker in self._workers:
                if worker.task is None and not exhausted and len(order) < 2 * len(self._workers):
                    try:
                        item = next(items)
                    except StopIteration:
                        exhausted = True
                        break
                    self._send(worker, next_seq, item)
                    order.append(next_seq)
                    next_seq += 1
            while order and order[0] in done:
                ok, value = done.pop(order.popleft())
                if not ok:
                    raise value  # errors surface in input order, as results do
                yield value
            if exhausted and not order:
                return
            if any(worker.task is not None for worker in self._workers):
                self._collect(done)  # else: results were just yielded; go back to sending

    def _send(self, worker: _Worker, seq: int, item: Any) -> None:
        worker.task = (seq, self._describe(item))
        try:
            worker.conn.send((seq, item))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            raise self._died(worker) from None

    def _collect(self, done: dict[int, Any]) -> None:
        busy = [worker for worker in self._workers if worker.task is not None]
        ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
        for worker in busy:
            if worker.conn in ready:
                try:
                    seq, ok, value = worker.conn.recv()
                except (EOFError, OSError):
                    raise self._died(worker) from None
                worker.task = None
                done[seq] = (ok, value)
            elif worker.process.sentinel in ready:
                raise self._died(worker)

    def _died(self, worker: _Worker) -> PreprocessError:
        worker.process.join(_JOIN_S)
        code = worker.process.exitcode
        how = (
            f"was killed by signal {signal.Signals(-code).name}"
            if code is not None and code < 0
            else f"exited with code {code}"
        )
        task = worker.task[1] if worker.task is not None else "no chunk"
        hint = (
            " (SIGKILL: often the out-of-memory killer; try fewer --workers)"
            if code == -signal.SIGKILL
            else ""
        )
        return PreprocessError(
            f"preprocess worker {worker.number} (pid {worker.process.pid}) "
            f"{how} while encoding {task}{hint}; nothing was written"
        )

    def close(self) -> None:
        """Stop every worker: politely when idle, else SIGTERM, then SIGKILL; bounded."""
        for worker in self._workers:
            if worker.task is None and worker.process.is_alive():
                try:
                    worker.conn.send(_STOP)
                except OSError:
                    pass
            else:
                worker.process.terminate()
        for worker in self._workers:
            worker.process.join(_JOIN_S)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(_JOIN_S)
            worker.conn.close()
        self._workers = []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["WorkerPool", "worker_main"]

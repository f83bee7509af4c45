"""Bounded collectives: every exchange tokenloom issues ends within the timeout.

A collective that one rank never joins waits forever on the others (gloo's own default
is 30 minutes, NCCL's 10, and neither names the missing rank); a rank that exits gives
the others gloo's raw "Connection closed by peer", naming no rank either.  Every
collective of tokenloom (the dataset build's exchanges and the packing path's
all-gathers, broadcasts and all-to-alls) goes through this module instead, and ends in
a :class:`~tokenloom.errors.DistributedError` that names the group (its global ranks),
the step (which call, e.g. ``wrap_data_iterator: all_gather of the sub-sample lengths
over DP``) and, where the backend can tell, the rank that did not answer:

* **gloo**: a roll call first.  Every member sends a token to the group's first rank,
  which waits for all of them until the timeout and sends back a verdict (who arrived,
  who stayed silent, whose connection closed because it exited or crashed); so every
  rank that is alive raises the same error, naming the missing ranks, within about one
  timeout (also when the first rank itself is the one missing: the others then name
  it; at once for a rank that exited).  A gloo receive that times out closes every
  connection of the group, so the first rank polls the tokens instead of waiting with
  a timeout.  The first collective of a step passes the roll call; the collective
  itself runs with ``async_op=True`` and is waited for with the same timeout; a
  connection that closes during it is reported as such (the backend does not say
  whose).
* **other backends** (NCCL has no point-to-point failure detection worth a roll call):
  the collective runs with ``async_op=True`` and is polled until it completes or the
  timeout passes.  A collective cannot be cancelled, so the error names the group and
  the step, and says that the backend cannot tell which rank is missing.

The timeout is ``TOKENLOOM_DISTRIBUTED_TIMEOUT_S`` (:mod:`tokenloom.distributed.timeout`).
After such an error the group is broken (tokenloom cannot cancel what the backend still
waits for): stop the job.  torch is imported only when a collective runs.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from typing import Any, Optional, TypeVar

from tokenloom.distributed.timeout import ENV, check_timeout, default_timeout_s
from tokenloom.errors import DistributedError

T = TypeVar("T")

ROLL_TAG = 0x544C
"""Point-to-point tag of the roll call (the verdict uses ``ROLL_TAG + 1``)."""
PRESENT, SILENT, CLOSED = 0, 1, 2
_CLOSED_WORDS = ("closed", "reset by peer", "broken pipe", "refused", "end of file")
_SHOWN_RANKS = 16
_WHY_SILENT = "it stopped on an error, crashed, hangs, or never made this call"


def _timed_out(error: BaseException) -> bool:
    text = str(error).lower()
    return "timed out" in text or "timeout" in text


def _closed(error: BaseException) -> bool:
    text = str(error).lower()
    return any(word in text for word in _CLOSED_WORDS)


def _ranks_text(ranks: list[int]) -> str:
    shown = ", ".join(map(str, ranks[:_SHOWN_RANKS]))
    return shown + (f", ... ({len(ranks)} ranks)" if len(ranks) > _SHOWN_RANKS else "")


def _who(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {_ranks_text(ranks)}"


class _Call:
    """One collective call: the group, the step, the timeout, and its errors."""

    def __init__(self, group: Any, step: str, seconds: Optional[float]) -> None:
        import torch.distributed as dist

        self.dist, self.group, self.step = dist, group, step
        self.seconds = default_timeout_s() if seconds is None else check_timeout(seconds)
        self.ranks = [
            int(r)
            for r in dist.get_process_group_ranks(dist.group.WORLD if group is None else group)
        ]
        self.me = int(dist.get_rank())
        self.backend = str(dist.get_backend(group)).lower()

    @property
    def timeout(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.seconds)

    def error(self, text: str) -> DistributedError:
        """A DistributedError naming this rank, the step and the group."""
        return DistributedError(
            f"rank {self.me}: {self.step}, group of ranks [{_ranks_text(self.ranks)}]: {text}"
        )

    def missing(self, status: list[int], reporter: Optional[int]) -> DistributedError:
        """The error of a roll call that found ranks missing (``status`` per group rank)."""
        silent = [self.ranks[i] for i, s in enumerate(status) if s == SILENT]
        closed = [self.ranks[i] for i, s in enumerate(status) if s not in (PRESENT, SILENT)]
        parts = []
        if silent:
            parts.append(f"{_who(silent)} did not answer within {self.seconds:g} s ({_WHY_SILENT})")
        if closed:
            parts.append(
                f"{_who(closed)} closed {'its' if len(closed) == 1 else 'their'} connection "
                "(exited or crashed)"
            )
        by = "" if reporter is None else f"rank {reporter}, the group's first rank, reports: "
        slow = f", or raise {ENV} if it is just slow" if silent else ""
        return self.error(f"{by}{'; '.join(parts)}. See the log of {_who(silent + closed)}{slow}")

    def leader_lost(self, error: BaseException, verdict: bool) -> DistributedError:
        """The error of a member whose exchange with the group's first rank failed."""
        leader = self.ranks[0]
        slow = f", or raise {ENV} if it is just slow"
        if _closed(error) and not _timed_out(error):
            what, slow = "closed its connection (exited or crashed)", ""
        elif verdict:
            what = f"sent no verdict within {self.seconds:g} s of the roll call (it hangs)"
        else:
            what = f"did not answer within {self.seconds:g} s ({_WHY_SILENT})"
        return self.error(
            f"rank {leader}, the group's first rank (it checks that every rank arrived), {what}. "
            f"See its log{slow}"
        )

    def broken(self, error: BaseException) -> DistributedError:
        """The error of the collective itself failing or not completing."""
        if isinstance(error, TimeoutError):
            return self.error(self.unfinished())
        detail = f" ({self.backend}: {str(error).strip()[:200]})"
        if _timed_out(error) and self.backend == "gloo":
            text = (
                f"every rank arrived, but the collective did not complete within "
                f"{self.seconds:g} s: the ranks made different collectives (different "
                "code paths, or batches of different shapes)"
            )
        elif _timed_out(error):
            text = self.unfinished()
        elif _closed(error):
            text = (
                "a rank of the group closed its connection during the collective (it exited "
                "or crashed); the backend does not say which: see the other ranks' logs"
            )
        else:
            text = "the collective failed"
        return self.error(text + detail)

    def unfinished(self) -> str:
        return (
            f"the collective did not complete within {self.seconds:g} s: a rank crashed, "
            f"hangs or never made this call (the {self.backend} backend cannot tell which: "
            f"see the other ranks' logs), or raise {ENV} if it is just slow"
        )

    # -- the roll call (gloo) -------------------------------------------------------

    def roll_call(self) -> None:
        """Check that every member arrived; raise naming the missing ones on every rank."""
        if self.ranks.index(self.me) == 0:
            self._lead()
        else:
            self._follow()

    def _lead(self) -> None:
        import torch

        deadline = time.monotonic() + self.seconds
        status = [PRESENT] * len(self.ranks)
        pending: dict[int, tuple[Any, Any]] = {}
        for i in range(1, len(self.ranks)):
            token = torch.zeros(1, dtype=torch.int64)
            try:
                work = self._recv(token, self.ranks[i], ROLL_TAG)
            except RuntimeError:  # the connection is closed already: that rank exited
                status[i] = CLOSED
                continue
            pending[i] = (token, work)
        self._collect(pending, status, deadline)
        self._send_verdict(status)
        if any(s != PRESENT for s in status):
            raise self.missing(status, reporter=None)

    def _collect(
        self, pending: dict[int, tuple[Any, Any]], status: list[int], deadline: float
    ) -> None:
        """Wait until every token arrived or the deadline passed; mark the silent ones.

        A gloo receive that times out closes every connection of the group (and then the
        verdict could not reach anyone), so the tokens are polled instead: a member's
        token (a 1) lands in its zeroed buffer, and only then is its receive waited for.
        Receives of silent members are left pending.
        """

        def arrived() -> bool:
            for i, (token, work) in list(pending.items()):
                if int(token[0]) != 0:
                    del pending[i]
                    try:
                        work.wait(self.timeout)
                    except RuntimeError:
                        status[i] = CLOSED
            return not pending

        _poll_until(arrived, deadline)
        for i in pending:
            status[i] = SILENT

    def _send_verdict(self, status: list[int]) -> None:
        import torch

        verdict = torch.tensor(status, dtype=torch.int64)
        works = []
        for i in range(1, len(self.ranks)):
            if status[i] == PRESENT:
                try:
                    works.append(self._send(verdict, self.ranks[i], ROLL_TAG + 1))
                except RuntimeError:
                    continue  # that rank is gone now; it reports for itself
        for work in works:
            try:
                work.wait(self.timeout)
            except RuntimeError:
                continue

    def _send(self, tensor: Any, peer: int, tag: int) -> Any:
        work = self.dist.isend(tensor, dst=peer, group=self.group, tag=tag)
        if work is None:
            raise self.error(f"rank {self.me} is not a member of this group")
        return work

    def _recv(self, tensor: Any, peer: int, tag: int) -> Any:
        work = self.dist.irecv(tensor, src=peer, group=self.group, tag=tag)
        if work is None:
            raise self.error(f"rank {self.me} is not a member of this group")
        return work

    def _follow(self) -> None:
        import torch

        leader = self.ranks[0]
        try:
            token = torch.ones(1, dtype=torch.int64)
            self._send(token, leader, ROLL_TAG).wait(self.timeout)
        except RuntimeError as error:
            raise self.leader_lost(error, verdict=False) from None
        verdict = torch.full((len(self.ranks),), -1, dtype=torch.int64)
        grace = datetime.timedelta(seconds=self.seconds + min(self.seconds, 5.0))
        try:
            self._recv(verdict, leader, ROLL_TAG + 1).wait(grace)
        except RuntimeError as error:
            raise self.leader_lost(error, verdict=True) from None
        status = [int(s) for s in verdict.tolist()]
        if any(s != PRESENT for s in status):
            raise self.missing(status, reporter=leader)

    # -- waiting ------------------------------------------------------------------------

    def wait(self, work: Any) -> None:
        """Wait for an async collective's ``work`` at most the timeout."""
        if work is None:
            return
        try:
            if self.backend == "gloo":
                work.wait(self.timeout)
            elif self._completes(work):
                work.wait()
            else:
                raise TimeoutError("timed out")
        except (RuntimeError, TimeoutError) as error:
            raise self.broken(error) from None

    def _completes(self, work: Any) -> bool:
        """Poll ``work`` until it completes (True) or the timeout passes (False)."""
        return _poll_until(work.is_completed, time.monotonic() + self.seconds)


def _poll_until(done: Callable[[], bool], deadline: float) -> bool:
    """Call ``done()`` until it is true (return True) or ``deadline`` passes (False).

    The sleeps grow from 10 us by half each time, to at most 1 ms during the first
    second (a wait that ends normally is seen within half its length or 1 ms), then to
    at most 20 ms (a long wait costs little CPU).
    """
    started, pause = time.monotonic(), 1e-5
    while not done():
        now = time.monotonic()
        if now > deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 1.5, 1e-3 if now - started < 1.0 else 0.02)
    return True


def run_collective(
    group: Any,
    step: str,
    issue: Callable[[], Any],
    *,
    seconds: Optional[float] = None,
    roll_call: bool = True,
) -> None:
    """Run one collective over ``group`` (None: the default group), bounded by ``seconds``.

    ``issue()`` starts the collective with ``async_op=True`` and returns its work
    handle; ``step`` names the call in errors; ``seconds`` defaults to
    ``TOKENLOOM_DISTRIBUTED_TIMEOUT_S``.  Raises :class:`DistributedError` (see the
    module docstring).  Every member of the group must call it for the same step.
    ``roll_call=False`` skips the gloo roll call, for the second and later of several
    collectives that the same code issues back to back (every rank that passed the
    first one is there; one that dies in between is reported by the collective).
    """
    call = _Call(group, step, seconds)
    if roll_call and len(call.ranks) > 1 and call.backend == "gloo":
        call.roll_call()
    try:
        work = issue()
    except RuntimeError as error:
        raise call.broken(error) from None
    call.wait(work)


def run_blocking(
    group: Any, step: str, collective: Callable[[], T], *, seconds: Optional[float] = None
) -> T:
    """Run a collective that has no ``async_op`` (``all_gather_object``), bounded.

    On gloo the roll call runs first; the collective then runs in a helper thread
    (on this thread's CUDA device) that the caller waits for at most ``seconds``.
    """
    call = _Call(group, step, seconds)
    if len(call.ranks) > 1 and call.backend == "gloo":
        call.roll_call()
    done: list[Any] = []
    failure: list[BaseException] = []
    device = _cuda_device()

    def run() -> None:
        try:
            if device is not None:
                import torch

                torch.cuda.set_device(device)
            done.append(collective())
        except BaseException as error:  # handed to the waiting thread
            failure.append(error)

    thread = threading.Thread(target=run, name="tokenloom-collective", daemon=True)
    thread.start()
    thread.join(call.seconds)
    if thread.is_alive():
        raise call.error(call.unfinished())
    if failure:
        if isinstance(failure[0], RuntimeError):
            raise call.broken(failure[0]) from None
        raise failure[0]
    return done[0]


def _cuda_device() -> Optional[int]:
    """This thread's CUDA device when CUDA is in use (a new thread starts on device 0)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.current_device())
    return None


__all__ = ["ROLL_TAG", "run_blocking", "run_collective"]

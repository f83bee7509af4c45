"""Shared by the Ray tests: corpora, tokenizers that fail on cue, process checks via /proc."""

from __future__ import annotations

import gzip
import json
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.waiting import poll

from tokenloom.format import IndexedDataset
from tokenloom.preprocess import output_prefix_for, preprocess

RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "TOKENIZERS_PARALLELISM": "false",
}
SENTINEL = "FAULT-SENTINEL"


def write_corpus(
    folder: Path,
    texts: Sequence[str],
    files: int = 3,
    gzip_last: bool = True,
    sentinel_at: int = -1,
) -> list[str]:
    """Real texts as JSONL records (``text`` and ``title``), spread over ``files`` files.

    The last file is gzip-compressed (cannot be cut into ranges); blank lines appear;
    ``sentinel_at`` puts the fault sentinel into that record's text.
    """
    folder.mkdir(parents=True, exist_ok=True)
    records = []
    for i, text in enumerate(texts):
        body = f"{text} {SENTINEL}" if i == sentinel_at else text
        records.append(json.dumps({"text": body, "title": f"doc {i}: {text[:40]}"}))
        if i % 97 == 13:
            records.append("")
    paths, per_file = [], -(-len(records) // files)
    for n in range(files):
        data = "".join(line + "\n" for line in records[n * per_file : (n + 1) * per_file])
        if gzip_last and n == files - 1:
            path = folder / f"part-{n}.jsonl.gz"
            path.write_bytes(gzip.compress(data.encode("utf-8"), mtime=0))
        else:
            path = folder / f"part-{n}.jsonl"
            path.write_text(data, encoding="utf-8")
        paths.append(str(path))
    return paths


def local_run(paths: Sequence[str], prefix: str, tokenizer: Any, **options: Any) -> Any:
    """The local engine on the same input (the reference of every byte-identity check)."""
    return preprocess(list(paths), prefix, tokenizer, show_progress=False, **options)


def same_bytes(prefix_a: str, prefix_b: str, keys: Sequence[str] = ("text",)) -> bool:
    """Whether the outputs of two runs are byte-identical for every key."""
    for key in keys:
        for ext in (".bin", ".idx"):
            a = Path(output_prefix_for(prefix_a, key) + ext).read_bytes()
            b = Path(output_prefix_for(prefix_b, key) + ext).read_bytes()
            if a != b:
                return False
    return True


def documents(prefix: str) -> list[list[int]]:
    dataset = IndexedDataset(prefix)
    return [dataset[i].tolist() for i in range(len(dataset))]


class CueTokenizer:
    """A real tokenizer that, on a batch holding the sentinel, acts once (cluster-wide).

    ``action``: ``kill`` (SIGKILL its own worker process), ``oserror``, ``valueerror``,
    or ``none``; ``delay``: seconds to sleep per batch (to make runs last; the
    ``TL_TEST_DELAY`` environment variable, when set, overrides it without changing
    the tokenizer's settings fingerprint).  ``flag`` is a file created (O_EXCL) before
    acting, so the action happens only once.
    """

    def __init__(self, inner: Any, flag: str, action: str = "none", delay: float = 0.0) -> None:
        self.inner, self.flag, self.action, self.delay = inner, flag, action, delay
        self.vocab_size, self.eod = inner.vocab_size, inner.eod
        self.pad = getattr(inner, "pad", None)
        self.unique_identifiers: dict[str, Any] = dict(inner.unique_identifiers)

    def _fire(self) -> None:
        try:
            os.close(os.open(self.flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.action == "oserror":
            raise OSError(5, "injected I/O error")
        if self.action == "valueerror":
            raise ValueError("injected application error")

    def encode_batch(self, texts: Sequence[str]) -> list:
        delay = float(os.environ.get("TL_TEST_DELAY", self.delay))
        if delay:
            time.sleep(delay)
        if self.action != "none" and any(SENTINEL in text for text in texts):
            self._fire()
        return self.inner.encode_batch(texts)

    def decode(self, ids: Any) -> str:
        return str(self.inner.decode(ids))


class NodeCueTokenizer(CueTokenizer):
    """A :class:`CueTokenizer` that touches ``cue_dir/<ray node id>`` before every batch.

    A test waits until the file of one node was touched a moment ago: a shard is then
    being tokenised on that node. To be sure that removing the node hits running work
    (a shard can finish between the cue and the removal), the test first creates
    ``cue_dir/hold-<node id>`` (:meth:`hold`): a batch on that node then stays in
    progress, touching its cue and ``cue_dir/holding-<node id>``, until the file goes or
    the node is killed.  A fresh ``holding-`` file is the proof that work is running there.
    """

    def __init__(self, inner: Any, cue_dir: str, delay: float) -> None:
        super().__init__(inner, os.path.join(cue_dir, "unused"), delay=delay)
        self.cue_dir = cue_dir

    @staticmethod
    def hold(cue_dir: str, node_id: str) -> None:
        """Make every batch that starts on ``node_id`` stay in progress."""
        with open(os.path.join(cue_dir, f"hold-{node_id}"), "w"):
            pass

    def encode_batch(self, texts: Sequence[str]) -> list:
        import ray

        node = ray.get_runtime_context().get_node_id()
        cue = os.path.join(self.cue_dir, node)
        held = os.path.join(self.cue_dir, f"hold-{node}")

        holding = os.path.join(self.cue_dir, f"holding-{node}")
        deadline = time.monotonic() + 300  # beyond the test's own timeout
        while True:  # once, unless the node is held (this runs in a Ray worker)
            with open(cue, "a"):
                os.utime(cue)
            if not os.path.exists(held) or time.monotonic() > deadline:
                break
            with open(holding, "a"):  # a batch is held here, right now
                os.utime(holding)
            time.sleep(0.02)
        return super().encode_batch(texts)


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line, environment or open files name ``text``.

    Open files matter: Ray's agents rewrite their command line (``ray::DashboardAgent``),
    which may overwrite their environment too, but they keep their log files in the
    session folder open.
    """
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and _mentions(int(entry), text):
            if _alive(int(entry)):
                found.append(int(entry))
    return found


def _mentions(pid: int, text: str) -> bool:
    needle = text.encode()
    for part in ("cmdline", "environ"):
        try:
            if needle in Path(f"/proc/{pid}/{part}").read_bytes():
                return True
        except OSError:
            continue
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if text in os.readlink(f"/proc/{pid}/fd/{fd}"):
                return True
        except OSError:
            continue
    return False


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_for_no_processes(text: str, timeout: float = 20.0) -> list[int]:
    """Wait until no process mentions ``text``; return the ones left at the timeout."""
    poll(lambda: not processes_mentioning(text), timeout, interval=0.1)
    return processes_mentioning(text)

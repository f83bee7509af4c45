"""``preprocess_ray``: the local preprocess engine, run shard by shard as Ray tasks.

1. The inputs are expanded and cut into shards (:mod:`.plan`) in a fixed order.
2. Shards whose completion marker matches the current inputs and settings are reused
   (:mod:`.markers`); the others run as Ray tasks (:mod:`.shard_task`), each calling
   the local engine on its input.  A task whose worker or node dies is retried
   (``max_retries``); an exception inside a task is retried only when it is an
   ``OSError`` (I/O); any other error (a ``fail`` policy, a bad tokenizer) stops the
   run and is raised as it is, naming the file and line.
3. The shards are merged in order (:mod:`.merge`) into ``{output_prefix}_{key}_document``,
   byte-identical to a local run, and the shard folder is removed; or, with
   ``merge=False``, kept and listed in a prefix-list file per key.

Shards live in ``{output_prefix}_shards/``, which every node must see (a shared file
system).  One driver per output prefix at a time.

The arguments of :func:`preprocess_ray`:

    inputs, output_prefix, tokenizer: as :func:`tokenloom.preprocess.preprocess`.
    address: Ray cluster to use (``auto``, ``HOST:PORT``, ``ray://...``); None starts
        a private local cluster for this run (``RAY_TMPDIR`` honoured), stopped at the end.
    num_shards: target number of shards, 1..99999 (see :mod:`.plan`); None: two per
        task slot of the cluster, or one per 256 MiB of input if that is more.  Pass it
        to make a re-run on another cluster reuse the finished shards.
    merge: merge the shards into ``{output_prefix}_{key}_document``; False keeps them
        and writes ``{output_prefix}_{key}_document.prefixes`` (a blend list).
    keep_shards: keep the shard folder after merging.
    max_retries: retries (0..100) of a shard whose worker or node dies, or that hits
        an I/O error.
    num_cpus: CPUs of the private cluster (None: all of this machine's).
    show_progress: live bar on stderr (None: only when stderr is a terminal).
    connect_timeout_s: seconds to reach the cluster at ``address`` before a clear
        error naming it (None: ``TOKENLOOM_RAY_CONNECT_TIMEOUT_S``, else 15).
    **options: every other option of the local engine (json_keys, append_eod,
        policy, workers = CPUs per task, chunk_bytes, ...), passed to it unchanged.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import time
from collections.abc import Sequence
from typing import Any, Optional, Union

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError, PreprocessError, TokenloomError
from tokenloom.format import optimal_dtype
from tokenloom.preprocess.inputs import expand_inputs
from tokenloom.preprocess.ray_engine.cluster import ClusterInfo, import_ray, ray_cluster
from tokenloom.preprocess.ray_engine.markers import reusable_marker, settings_fingerprint
from tokenloom.preprocess.ray_engine.merge import merge_shards, write_prefix_list
from tokenloom.preprocess.ray_engine.options import (
    MAX_SHARDS,
    check_max_retries,
    check_num_cpus,
    check_num_shards,
    check_task_fits,
    check_workers,
)
from tokenloom.preprocess.ray_engine.plan import Shard, plan_shards
from tokenloom.preprocess.ray_engine.report import LiveProgress, RaySummary, inflight_tokens
from tokenloom.preprocess.ray_engine.shard_task import ShardJob, run_shard
from tokenloom.preprocess.remote_inputs import is_remote_input
from tokenloom.preprocess.summary import OutputStats
from tokenloom.progress import progress

DEFAULT_SHARD_BYTES = 256 << 20
_SHARD_NAME = re.compile(r"^shard-\d{5}-of-(\d{5})[._]")


def default_num_shards(cluster: ClusterInfo, total_bytes: int, cpus_per_task: int) -> int:
    """Two shards per task slot of the cluster, more for inputs over 256 MiB a slot
    (at most 99,999, the most that shard names can number)."""
    slots = max(cluster.cpus // max(cpus_per_task, 1), 1)
    return min(max(2 * slots, math.ceil(total_bytes / DEFAULT_SHARD_BYTES), 1), MAX_SHARDS)


def _prepare_workdir(workdir: str, count: int) -> None:
    """Create the shard folder; drop temporary files and shards of a plan of another size."""
    os.makedirs(workdir, exist_ok=True)
    for sub in ("tmp", "attempts"):
        shutil.rmtree(os.path.join(workdir, sub), ignore_errors=True)
    for name in os.listdir(workdir):
        match = _SHARD_NAME.match(name)
        if match and int(match.group(1)) != count:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(workdir, name))


def _attempts(workdir: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir(os.path.join(workdir, "attempts")):
            stem = name.split(".", 1)[0]
            counts[stem] = counts.get(stem, 0) + 1
    return counts


def _task_failure(ray: Any, error: Exception, shard: Shard, max_retries: int) -> Exception:
    """The error to raise for a failed shard: a tokenloom error as it is, else a PreprocessError."""
    cause = read_attribute(error, "cause", None)
    if isinstance(error, ray.exceptions.RayTaskError) and isinstance(cause, TokenloomError):
        return cause
    if isinstance(error, ray.exceptions.RayTaskError) and cause is not None:
        return PreprocessError(
            f"shard {shard.name} ({shard.describe()}) failed: {type(cause).__name__}: {cause}"
        )
    return PreprocessError(
        f"shard {shard.name} ({shard.describe()}) failed after "
        f"{max_retries} retries: {type(error).__name__}: {error}"
    )


def _run_shards(
    pending: list[Shard],
    job: ShardJob,
    tokenizer: Any,
    max_retries: int,
    cpus_per_task: int,
    live: LiveProgress,
) -> dict[int, dict]:
    """Run ``pending`` as Ray tasks; return their markers by shard index."""
    ray = import_ray()
    task = ray.remote(run_shard).options(
        num_cpus=cpus_per_task, max_retries=max_retries, retry_exceptions=[OSError]
    )
    tokenizer_ref = ray.put(tokenizer)
    refs = {task.remote(shard, job, tokenizer_ref): shard for shard in pending}
    markers: dict[int, dict] = {}
    try:
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1, timeout=0.5)
            for ref in done:
                shard = refs.pop(ref)
                try:
                    marker = ray.get(ref)
                except ray.exceptions.RayError as error:
                    raise _task_failure(ray, error, shard, max_retries) from None
                markers[shard.index] = marker
                outputs = marker["counts"]["outputs"].values()
                live.shard_done(
                    shard.nbytes,
                    sum(o["documents"] for o in outputs),
                    sum(o["tokens"] for o in outputs),
                )
            live.refresh()
    finally:
        for ref in refs:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
    return markers


def _merge_bar(prefixes: Sequence[str], show_progress: Optional[bool]) -> Any:
    from tokenloom.format import get_bin_path

    total = sum(os.path.getsize(get_bin_path(prefix)) for prefix in prefixes)
    return progress(total=total, unit="B", unit_scale=True, desc="merge", enabled=show_progress)


def _finish(
    summary: RaySummary,
    shards: list[Shard],
    markers: dict[int, dict],
    keys: Sequence[str],
    workdir: str,
    output_prefix: str,
    merge: bool,
    keep_shards: bool,
    show_progress: Optional[bool],
) -> None:
    """Merge the shards of each key (or write its prefix list), then tidy the shard folder."""
    for key in keys:
        names = [str(markers[shard.index]["outputs"][key]) for shard in shards]
        prefixes = [os.path.join(workdir, name) for name in names]
        final = os.fspath(output_prefix) + names[0][len(shards[0].name) :]
        if merge:
            with _merge_bar(prefixes, show_progress) as bar:
                stats = merge_shards(prefixes, final, progress=bar.update)
            summary.merge_bytes += stats.nbytes
            summary.merge_seconds += stats.seconds
            continue
        tokens = [int(markers[s.index]["counts"]["outputs"][key]["tokens"]) for s in shards]
        kept = [(p, t) for p, t in zip(prefixes, tokens) if t > 0] or [(prefixes[0], 0)]
        summary.prefix_lists[key] = write_prefix_list(
            final, [p for p, _ in kept], [t for _, t in kept]
        )
    if merge and not keep_shards:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        for sub in ("tmp", "attempts"):
            shutil.rmtree(os.path.join(workdir, sub), ignore_errors=True)


def _check_options(options: dict) -> None:
    if int(options.get("partitions", 1)) > 1 and not options.get("keep_sequential_samples"):
        raise ConfigError(
            f"--partitions {options['partitions']} deals records round-robin over "
            "the whole input, which shards cannot reproduce; with --engine ray "
            "drop --partitions (shards are the partitions) or add "
            "--keep-sequential-samples"
        )


def _file_inputs(inputs: Any) -> Any:
    if isinstance(inputs, (str, os.PathLike)) or (
        isinstance(inputs, (list, tuple))
        and all(isinstance(item, (str, os.PathLike)) for item in inputs)
    ):
        for item in [inputs] if isinstance(inputs, (str, os.PathLike)) else inputs:
            if is_remote_input(item):
                raise ConfigError(
                    f"--input {item}: --engine ray reads files that every node sees at the "
                    "same path, not objects in s3:// or msc:// storage; run it on the local "
                    "engine (drop --engine ray: it streams the object), or download it to a "
                    f"shared folder first (e.g. aws s3 cp {item} /shared/corpus/) and pass "
                    "that path"
                )
        return inputs
    raise ConfigError(
        f"--engine ray reads files (--input FILE_OR_GLOB), not "
        f"{type(inputs).__name__}; run other inputs on the local engine"
    )


def _resolve_tokenizer(tokenizer: Any) -> Any:
    if isinstance(tokenizer, str):
        from tokenloom.tokenizers import load_tokenizer

        return load_tokenizer(tokenizer)
    return tokenizer


def preprocess_ray(
    inputs: Union[str, Sequence[str]],
    output_prefix: str,
    tokenizer: Any,
    *,
    address: Optional[str] = None,
    num_shards: Optional[int] = None,
    merge: bool = True,
    keep_shards: bool = False,
    max_retries: int = 3,
    num_cpus: Optional[int] = None,
    show_progress: Optional[bool] = None,
    connect_timeout_s: Optional[float] = None,
    **options: Any,
) -> RaySummary:
    """Tokenize ``inputs`` on a Ray cluster into the same files a local run writes; the
    arguments are described in this module's docstring, every numeric one checked before
    a cluster is touched (:mod:`tokenloom.preprocess.ray_engine.options`)."""
    started = time.perf_counter()
    _check_options(options)
    num_shards = check_num_shards(num_shards)
    max_retries = check_max_retries(max_retries)
    num_cpus = check_num_cpus(num_cpus)
    keys = tuple(options.get("json_keys", ("text",)))
    cpus_per_task = check_workers(options.get("workers", 1))
    paths = expand_inputs(_file_inputs(inputs))
    tokenizer = _resolve_tokenizer(tokenizer)
    workdir = f"{os.fspath(output_prefix)}_shards"
    job = ShardJob(workdir, settings_fingerprint(tokenizer, options), keys, dict(options))
    with ray_cluster(address, num_cpus, connect_timeout_s) as cluster:
        total, shards, markers = _plan(cluster, paths, num_shards, cpus_per_task, job)
        fresh = _run_pending(
            shards, markers, total, job, tokenizer, max_retries, cpus_per_task, show_progress
        )
        where = "private local cluster" if cluster.private else f"cluster {cluster.address}"
    reused = set(markers)
    markers.update(fresh)
    summary = _summary(paths, output_prefix, keys, shards, markers, reused, workdir)
    summary.cluster = f"{where}, {cluster.nodes} node(s), {cluster.cpus} CPUs"
    _finish(
        summary, shards, markers, keys, workdir, output_prefix, merge, keep_shards, show_progress
    )
    summary.seconds = time.perf_counter() - started
    return summary


def _plan(
    cluster: ClusterInfo,
    paths: Sequence[str],
    num_shards: Optional[int],
    cpus_per_task: int,
    job: ShardJob,
) -> tuple[int, list[Shard], dict[int, dict]]:
    """``(input bytes, shards, {index: marker} of the shards a previous run finished)``,
    the shard folder prepared for them."""
    check_task_fits(cpus_per_task, cluster.largest_node_cpus)
    total = sum(os.path.getsize(path) for path in paths)
    if num_shards is None:
        num_shards = default_num_shards(cluster, total, cpus_per_task)
    shards = plan_shards(paths, num_shards)
    _prepare_workdir(job.workdir, len(shards))
    markers = {
        s.index: m
        for s in shards
        if (m := reusable_marker(job.workdir, s, job.settings, job.keys)) is not None
    }
    return total, shards, markers


def _run_pending(
    shards: list[Shard],
    markers: dict[int, dict],
    total: int,
    job: ShardJob,
    tokenizer: Any,
    max_retries: int,
    cpus_per_task: int,
    show_progress: Optional[bool],
) -> dict[int, dict]:
    """Run the shards without a marker, under a live progress bar: their new markers."""
    reused_bytes = sum(s.nbytes for s in shards if s.index in markers)
    pending = [s for s in shards if s.index not in markers]
    itemsize = optimal_dtype(int(tokenizer.vocab_size))().itemsize
    with LiveProgress(
        total,
        reused_bytes,
        len(shards),
        len(markers),
        show_progress,
        lambda: inflight_tokens(job.workdir, itemsize),
    ) as live:
        return _run_shards(pending, job, tokenizer, max_retries, cpus_per_task, live)


def _summary(
    paths: Sequence[str],
    output_prefix: str,
    keys: Sequence[str],
    shards: list[Shard],
    markers: dict[int, dict],
    reused: set,
    workdir: str,
) -> RaySummary:
    first = markers[shards[0].index]["outputs"]
    outputs = {
        key: OutputStats(key, os.fspath(output_prefix) + first[key][len(shards[0].name) :])
        for key in keys
    }
    summary = RaySummary(len(paths), "", outputs)
    attempts = _attempts(workdir)
    for shard in shards:
        marker = markers[shard.index]
        summary.add_shard(
            marker,
            shard.describe(),
            shard.nbytes,
            shard.index in reused,
            attempts.get(shard.name, 1),
        )
    return summary


__all__ = ["preprocess_ray", "default_num_shards", "DEFAULT_SHARD_BYTES"]

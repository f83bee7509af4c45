"""Per-element build rates of this machine for ``tokenloom plan``'s time estimates.

``tokenloom plan --calibrate`` (:func:`calibrate`) times small real cold builds
(``BlendedMegatronDatasetBuilder`` on a synthetic 20,000-document pair in a temporary
folder) and a blend, and stores the rates in a small JSON file (:func:`rates_path`:
``$TOKENLOOM_PLAN_RATES``, else ``$XDG_CACHE_HOME/tokenloom/plan-rates.json``, else
``~/.cache/tokenloom/plan-rates.json``), written atomically. Without it
:data:`DEFAULT_RATES` apply (measured on a loaded 2-core development machine).

Every calibration build's document index is long enough for the kernel routes of
:mod:`tokenloom.index.dispatch` (:func:`kernel_epochs`), as a large build's is: the first
one's extra time over the second's is ``startup`` (numba's import and cached machine
code), and the per-element rates are the kernels'. A build whose every index takes the
numpy routes loads no kernel, and ``tokenloom plan`` adds no ``startup`` to its estimate.

The model: a cold build costs ``startup`` once (when it takes a kernel route), per
GPTDataset ``dataset`` plus ``document_element`` per document-index element plus
``sample`` per sample, per blend ``blend`` plus ``blend_sample`` per blended sample; the
first batch adds
``fetch_sample + fetch_token * sequence_length`` per sample of the global batch.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from typing import Any, Optional

import numpy

from tokenloom.errors import ConfigError, UntrustedFileError

__all__ = [
    "DEFAULT_RATES",
    "RATE_NAMES",
    "calibrate",
    "kernel_epochs",
    "load_rates",
    "rates_path",
    "store_rates",
]

DEFAULT_RATES = {
    "startup": 1.8,
    "dataset": 0.012,
    "document_element": 3.5e-8,
    "sample": 7e-8,
    "blend": 0.002,
    "blend_sample": 3e-8,
    "fetch_sample": 6e-4,
    "fetch_token": 1.5e-7,
}
"""Seconds per event when the machine was never calibrated."""
RATE_NAMES = tuple(DEFAULT_RATES)
_VERSION = 1
_DOCUMENTS = 20_000


def rates_path() -> str:
    """Where the calibrated rates live (``$TOKENLOOM_PLAN_RATES`` overrides)."""
    explicit = os.environ.get("TOKENLOOM_PLAN_RATES")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tokenloom", "plan-rates.json")


def load_rates() -> tuple[dict[str, float], Optional[str]]:
    """``(rates, the file they came from)``; the defaults and None without a file."""
    from tokenloom.untrusted_json import read_json_file

    path = rates_path()
    if not os.path.exists(path):
        return dict(DEFAULT_RATES), None
    fix = "run `tokenloom plan --calibrate` to measure them again"
    try:
        data = read_json_file(path, what="plan rates file", max_bytes=64 * 1024)
    except (OSError, UntrustedFileError) as error:
        raise ConfigError(f"{path}: cannot read the plan rates ({error}); {fix}") from None
    if not isinstance(data, dict) or data.get("version") != _VERSION:
        raise ConfigError(f"{path}: not a version-{_VERSION} plan rates file; {fix}")
    rates = data.get("rates")
    if not isinstance(rates, dict):
        raise ConfigError(f"{path}: field 'rates' must be a mapping; {fix}")
    for name in RATE_NAMES:
        value = rates.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: rates.{name}={value!r} must be a number; {fix}")
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{path}: rates.{name}={value!r} must be finite and >= 0; {fix}")
    return {name: float(rates[name]) for name in RATE_NAMES}, path


def store_rates(rates: dict[str, float]) -> str:
    """Write ``rates`` to :func:`rates_path` atomically; returns the path."""
    from tokenloom.atomic import atomic_write_bytes

    path = rates_path()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    record = {"version": _VERSION, "measured_at": time.time(), "rates": rates}
    atomic_write_bytes(path, (json.dumps(record, indent=1) + "\n").encode())
    return path


def _corpus(folder: str) -> tuple[str, numpy.ndarray]:
    from tokenloom.format import IndexedDatasetBuilder

    rng = numpy.random.default_rng(0)
    lengths = rng.integers(20, 400, _DOCUMENTS)
    prefix = os.path.join(folder, "calibration")
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    for length in lengths.tolist():
        builder.add_item(numpy.full(length, 7, numpy.uint16))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return prefix, lengths


def _timed_build(prefix: str, folder: str, seq: int, samples: int, seed: int) -> tuple[float, Any]:
    """Seconds of one cold build of ``samples`` train samples, and the dataset."""
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.datasets import GPTDataset, GPTDatasetConfig
    from tokenloom.process_caches import clear_process_caches

    clear_process_caches()
    config = GPTDatasetConfig(
        random_seed=seed,
        sequence_length=seq,
        blend=([prefix], None),
        split="100,0,0",
        tokenizer={"vocab_size": 32000, "eod": 2},
        path_to_cache=os.path.join(folder, f"cache-{seed}"),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    start = time.perf_counter()
    train = BlendedMegatronDatasetBuilder(
        GPTDataset, [samples, 0, 0], lambda: True, config
    ).build()[0]
    return time.perf_counter() - start, train


def _fetch_seconds(dataset: Any, count: int = 200) -> float:
    picks = numpy.random.default_rng(1).integers(0, len(dataset), count).tolist()
    start = time.perf_counter()
    for k in picks:
        dataset[k]
    return (time.perf_counter() - start) / count


def _blend_rate() -> tuple[float, float]:
    from tokenloom.index import build_blending_indices, dispatch

    weights = numpy.array([0.5, 0.3, 0.2])
    size = 1000
    while dispatch.blending_route(len(weights), size) == dispatch.NUMPY:
        size *= 2
    build_blending_indices(weights, size)  # takes the kernel's route: loads the kernel
    start = time.perf_counter()
    build_blending_indices(weights, 10)
    fixed = time.perf_counter() - start
    start = time.perf_counter()
    build_blending_indices(weights, 2_000_000)
    return fixed + 0.002, max((time.perf_counter() - start - fixed) / 2_000_000, 0.0)


def _solve(runs: list[tuple[float, int, int]], fixed: float) -> tuple[float, float]:
    """Per document element and per sample seconds from ``(seconds, elements, samples)``."""
    (t1, d1, s1), (t2, d2, s2) = runs
    matrix = numpy.array([[d1, s1], [d2, s2]], dtype=float)
    rd, rs = numpy.linalg.solve(matrix, [max(t1 - fixed, 0.0), max(t2 - fixed, 0.0)])
    if rd <= 0 or rs <= 0:  # noisy timings: one rate for both kinds of element
        rd = rs = (t1 + t2 - 2 * fixed) / float(d1 + s1 + d2 + s2)
    return max(float(rd), 1e-10), max(float(rs), 1e-10)


def kernel_epochs() -> int:
    """The fewest whole epochs of the calibration corpus whose document index takes the
    kernel routes of :mod:`tokenloom.index.dispatch` (sample index and shuffle), as a
    large build's does: every calibration build is at least this long, so that the
    first one loads the kernels (``startup``) and the rates are the kernels'."""
    from tokenloom.index import dispatch

    least = max(dispatch.SAMPLE_VECTORIZED_MAX_DOCUMENTS + 1, dispatch.SHUFFLE_KERNEL_MIN_SIZE)
    return -(-least // _DOCUMENTS)


def calibrate() -> dict[str, float]:
    """Measure every rate of :data:`RATE_NAMES` on this machine (a few seconds)."""
    with tempfile.TemporaryDirectory(prefix="tokenloom-plan-") as folder:
        prefix, lengths = _corpus(folder)
        tokens, least = int(lengths.sum()), kernel_epochs()
        small = (least * _DOCUMENTS, least * tokens // 4096 - 1)  # elements, samples
        first, _ = _timed_build(prefix, folder, 4096, small[1], 11)  # + loading the kernels
        again, _ = _timed_build(prefix, folder, 4096, small[1], 12)
        epochs = max(20, 5 * least)  # document-index heavy: long samples
        t_docs, long = _timed_build(prefix, folder, 4096, epochs * tokens // 4096 - 1, 13)
        t_samples, short = _timed_build(prefix, folder, 8, least * tokens // 8 - 1, 14)
        runs = [
            (t_docs, epochs * _DOCUMENTS, len(long)),
            (t_samples, least * _DOCUMENTS, len(short)),
        ]
        per_document, per_sample = DEFAULT_RATES["document_element"], DEFAULT_RATES["sample"]
        for _ in range(2):  # the fixed cost less the small build's elements, then the rates
            fixed = max(again - small[0] * per_document - small[1] * per_sample, 0.0)
            per_document, per_sample = _solve(runs, fixed)
        fetch_short, fetch_long = _fetch_seconds(short), _fetch_seconds(long)
    per_token = max((fetch_long - fetch_short) / (4096 - 8), 0.0)
    blend, blend_sample = _blend_rate()
    return {
        "startup": max(first - again, 0.0),
        "dataset": fixed,
        "document_element": per_document,
        "sample": per_sample,
        "blend": blend,
        "blend_sample": blend_sample,
        "fetch_sample": max(fetch_short - 8 * per_token, 1e-7),
        "fetch_token": per_token,
    }

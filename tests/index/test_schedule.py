"""Mixture-schedule blending: one phase is megatron-core's fixed blend byte for byte, and
every prefix follows the cumulative scheduled target within the greedy bound."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokenloom.index as index
from tokenloom.errors import ConfigError
from tokenloom.index import dispatch, reference
from tokenloom.index._targets import phase_offsets
from tokenloom.index.schedule import (
    build_scheduled_blending_indices,
    schedule_arrays,
    scheduled_targets,
)
from tokenloom.kernels import KERNELS

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _row(draw, k, positive):
    low = 1 if positive else 0
    raw = numpy.asarray(draw(st.lists(st.integers(low, 50), min_size=k, max_size=k)), float)
    if raw.sum() == 0:
        raw[draw(st.integers(0, k - 1))] = 1.0
    return raw / raw.sum()


@st.composite
def schedules(draw, positive=False):
    """``(starts, weights, linear, size)``: 1-5 phases over 1-6 datasets."""
    k = draw(st.integers(1, 6))
    gaps = draw(st.lists(st.integers(1, 60), min_size=0, max_size=4))
    starts = numpy.cumsum([0, *gaps]).astype(numpy.int64)
    weights = numpy.stack([_row(draw, k, positive) for _ in starts])
    linear = numpy.array(
        [0 < p < starts.size - 1 and draw(st.booleans()) for p in range(starts.size)]
    )
    size = draw(st.integers(0, int(starts[-1]) + 80))
    return starts, weights, linear, size


@SETTINGS
@given(
    weights=st.lists(st.integers(1, 1000), min_size=1, max_size=40),
    size=st.integers(0, 600),
)
def test_one_phase_is_the_fixed_blend(weights, size):
    w = numpy.asarray(weights, float) / sum(weights)
    expected = index.build_blending_indices(w, size)
    for actual in (
        build_scheduled_blending_indices([0], w[None, :], [False], size),
        index.reference.build_scheduled_blending_indices(
            schedule_arrays([0], w[None, :], [False]), size
        ),
    ):
        assert actual[0].dtype == numpy.int16 and actual[1].dtype == numpy.int64
        assert actual[0].tobytes() == expected[0].tobytes()
        assert actual[1].tobytes() == expected[1].tobytes()


def _deviations(case):
    """``count - target(n)`` per source after every sample ``n`` (checking the running
    sample numbers on the way)."""
    starts, weights, linear, size = case
    dataset_index, sample_index = build_scheduled_blending_indices(starts, weights, linear, size)
    schedule = schedule_arrays(starts, weights, linear)
    counts = numpy.zeros(weights.shape[1], dtype=numpy.int64)
    deviations = numpy.zeros((size, weights.shape[1]))
    for n in range(size):
        j = dataset_index[n]
        assert sample_index[n] == counts[j]  # running count of that dataset
        counts[j] += 1
        deviations[n] = counts - scheduled_targets(schedule, n)  # the target sample n used
    return deviations


@SETTINGS
@given(schedules(positive=True))
def test_every_prefix_within_one_sample_of_the_target(case):
    """After sample ``n`` each source's count is within 1 of ``target(n)``, as in
    megatron-core's fixed blend (whose ``max(t, 1)`` has the counts one sample ahead:
    ``target(n + 1)`` can be missed by more than 1)."""
    assert numpy.all(numpy.abs(_deviations(case)) <= 1.0 + 1e-9)


@SETTINGS
@given(schedules())
def test_a_source_switched_off_keeps_its_error(case):
    """A weight of 0 freezes that source's error (it is not drawn); the others absorb it,
    so the bound grows by at most 1 per source whose weight is 0 somewhere."""
    zeros = int(numpy.any(case[1] == 0, axis=0).sum())
    assert numpy.all(numpy.abs(_deviations(case)) <= 1.0 + zeros + 1e-9)


@SETTINGS
@given(schedules())
def test_zero_weight_sources_are_never_drawn_in_a_constant_phase(case):
    starts, weights, linear, size = case
    dataset_index, _ = build_scheduled_blending_indices(starts, weights, linear, size)
    phase = numpy.searchsorted(starts, numpy.arange(size), side="right") - 1
    constant = ~linear[phase]
    assert numpy.all(weights[phase[constant], dataset_index[constant]] > 0)


def test_a_three_phase_schedule_follows_each_phase():
    weights = numpy.array([[0.8, 0.2, 0.0], [0.1, 0.1, 0.8], [1 / 3, 1 / 3, 1 / 3]])
    ids, _ = build_scheduled_blending_indices([0, 1000, 2000], weights, [False] * 3, 3000)
    for p, (low, high) in enumerate([(0, 1000), (1000, 2000), (2000, 3000)]):
        counts = numpy.bincount(ids[low:high], minlength=3)
        assert numpy.all(numpy.abs(counts - weights[p] * 1000) <= 2), (p, counts)


def test_a_linear_ramp_integrates_the_weights():
    schedule = schedule_arrays([0, 100, 300], [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], [0, 1, 0])
    # ramp from [1, 0] at 100 to [0, 1] at 300: area 100 each
    numpy.testing.assert_allclose(scheduled_targets(schedule, 300), [200.0, 100.0])
    numpy.testing.assert_allclose(scheduled_targets(schedule, 200), [175.0, 25.0])
    numpy.testing.assert_allclose(scheduled_targets(schedule, 400), [250.0, 150.0])


def test_the_route_table():
    small, large = (
        dispatch.SCHEDULE_REFERENCE_MAX_SAMPLES,
        dispatch.SCHEDULE_REFERENCE_MAX_SAMPLES + 1,
    )
    assert dispatch.schedule_route(1, True, large) == dispatch.FIXED
    assert dispatch.schedule_route(1, False, small) == dispatch.REFERENCE
    assert dispatch.schedule_route(3, True, small) == dispatch.REFERENCE
    assert dispatch.schedule_route(3, True, large) == dispatch.SCAN
    many = dispatch.BLEND_SCAN_BELOW
    assert dispatch.schedule_route(3, True, large, many - 1) == dispatch.SCAN
    assert dispatch.schedule_route(3, True, large, many) == dispatch.FAST
    assert dispatch.schedule_route(3, True, large, many, distinct=False) == dispatch.SCAN


def _kernel(schedule, size):
    kernels = KERNELS.get("blend_scan")
    if kernels is None:
        pytest.skip("numba is not installed (or TOKENLOOM_DISABLE_NUMBA is set)")
    dataset_index = numpy.empty(size, dtype=numpy.int16)
    sample_index = numpy.empty(size, dtype=numpy.int64)
    kernels.schedule_scan(*schedule, phase_offsets(schedule), dataset_index, sample_index)
    return dataset_index, sample_index


@SETTINGS
@given(schedules())
def test_the_scan_kernel_equals_the_reference(case):
    starts, weights, linear, size = case
    schedule = schedule_arrays(starts, weights, linear)
    expected = reference.build_scheduled_blending_indices(schedule, size)
    actual = _kernel(schedule, size)
    assert actual[0].tobytes() == expected[0].tobytes()
    assert actual[1].tobytes() == expected[1].tobytes()


def test_a_long_schedule_takes_the_kernel_and_equals_the_reference():
    size = dispatch.SCHEDULE_REFERENCE_MAX_SAMPLES * 3
    weights = numpy.array(
        [[0.7, 0.2, 0.1, 0.0], [0.1, 0.2, 0.3, 0.4], [0.25] * 4, [0, 0, 0.5, 0.5]]
    )
    starts, linear = [0, 1500, 3000, 5000], [False, False, True, False]
    schedule = schedule_arrays(starts, weights, linear)
    expected = reference.build_scheduled_blending_indices(schedule, size)
    actual = build_scheduled_blending_indices(starts, weights, linear, size)
    assert actual[0].tobytes() == expected[0].tobytes()
    assert actual[1].tobytes() == expected[1].tobytes()


@pytest.mark.parametrize(
    ("starts", "weights", "linear", "message"),
    [
        ([1], [[1.0]], [False], "first phase starts at 0"),
        ([0, 5, 5], [[1.0]] * 3, [False] * 3, "later than the one before"),
        ([0, 5], [[1.0], [1.0]], [False, True], "cannot be linear"),
        ([0], [[0.5, 0.6]], [False], "phase 0"),
        ([0, 2], [[1.0, 0.0], [-1.0, 2.0]], [False, False], "phase 1"),
        ([0, 2], [[1.0]], [False, False], "one weight row"),
    ],
)
def test_bad_schedules_are_refused(starts, weights, linear, message):
    with pytest.raises(ConfigError, match=message):
        build_scheduled_blending_indices(starts, weights, linear, 10)


def _fast(schedule, size, tuning):
    phased = KERNELS.get("blend_phases")
    if phased is None:
        pytest.skip("numba is not installed (or TOKENLOOM_DISABLE_NUMBA is set)")
    dataset_index = numpy.empty(size, dtype=numpy.int16)
    sample_index = numpy.empty(size, dtype=numpy.int64)
    target, period = tuning if tuning else (None, None)
    phased.run(*schedule, phase_offsets(schedule), dataset_index, sample_index, target, period)
    return dataset_index, sample_index


@st.composite
def wide_schedules(draw):
    """Like :func:`schedules` over up to 48 datasets, with adversarial rows: small
    integer ratios (exact ties), ulp-close weights, many zeros, equal rows."""
    k = draw(st.integers(1, 48))
    gaps = draw(st.lists(st.integers(1, 500), min_size=0, max_size=3))
    starts = numpy.cumsum([0, *gaps]).astype(numpy.int64)
    rng = numpy.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rows = []
    for _ in starts:
        family = draw(st.sampled_from(["ratios", "ulp", "zeros", "equal", "random"]))
        if family == "ratios":
            raw = rng.integers(0, 5, k).astype(float)
        elif family == "ulp":
            raw = numpy.nextafter(numpy.ones(k), 2.0) ** rng.integers(0, 4, k)
        elif family == "zeros":
            raw = rng.random(k) * (rng.random(k) < 0.3)
        elif family == "equal":
            raw = numpy.ones(k)
        else:
            raw = rng.lognormal(size=k)
        if raw.sum() == 0:
            raw[0] = 1.0
        rows.append(raw / raw.sum())
    linear = numpy.array(
        [0 < p < starts.size - 1 and draw(st.booleans()) for p in range(starts.size)]
    )
    size = draw(st.integers(0, int(starts[-1]) + 600))
    return starts, numpy.stack(rows), linear, size


TUNING = st.one_of(st.none(), st.tuples(st.integers(1, 30), st.integers(1, 300)))


@SETTINGS
@given(st.one_of(schedules(), wide_schedules()), TUNING)
def test_the_fast_kernel_equals_the_reference(case, tuning):
    """``blend_phases`` (level, calendar, certified winners, fallbacks and rebuilds: the
    tiny tunings force them) gives the reference's bytes."""
    starts, weights, linear, size = case
    schedule = schedule_arrays(starts, weights, linear)
    expected = reference.build_scheduled_blending_indices(schedule, size)
    actual = _fast(schedule, size, tuning)
    assert actual[0].tobytes() == expected[0].tobytes()
    assert actual[1].tobytes() == expected[1].tobytes()


def test_a_long_wide_schedule_takes_the_fast_kernel_and_equals_the_scan():
    """300 lognormal sources, 200,000 samples, constant / ramp / constant: the public
    builder routes to ``blend_phases`` and equals ``schedule_scan``."""
    rng = numpy.random.default_rng(5)
    weights = rng.lognormal(size=(3, 300))
    weights[1, :40] = 0.0  # sources switched off, then ramped back in
    weights /= weights.sum(axis=1, keepdims=True)
    starts, linear, size = [0, 60_000, 140_000], [False, True, False], 200_000
    schedule = schedule_arrays(starts, weights, linear)
    assert dispatch.schedule_route(3, False, size, 300) == dispatch.FAST
    actual = build_scheduled_blending_indices(starts, weights, linear, size)
    expected = _kernel(schedule, size)
    assert actual[0].tobytes() == expected[0].tobytes()
    assert actual[1].tobytes() == expected[1].tobytes()

"""``load_state_dict(state, allow_mixture_change=True)`` with schedules on both sides
(resumes inside a linear ramp included) and with a pair moved to another path, checked
against the brute-force reference of tests/training/_mixture_reference.py."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.training._data import write_corpus
from tests.training._mixture_reference import (
    blend_of,
    build,
    ramp_tail,
    reference,
    same,
    served,
    state_after,
)

from tokenloom.training import build_pretraining_data_loader

MBS = 2


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("ramps")
    prefixes = {name: write_corpus(root / name, 60, seed) for seed, name in enumerate("abcd")}
    return {"prefixes": prefixes, "cache": root / "cache"}


schedules = st.lists(
    st.tuples(
        st.integers(1, 40), st.lists(st.integers(0, 4), min_size=3, max_size=3), st.booleans()
    ),
    min_size=1,
    max_size=4,
)


def _phases(spec: list) -> list:
    """A valid blend_schedule over 3 sources from hypothesis' draws (ramps included)."""
    phases, start = [], 0
    for p, (gap, weights, linear) in enumerate(spec):
        row = [float(w) for w in weights] if sum(weights) else [1.0, 1.0, 1.0]
        phases.append((start, row, "linear") if linear and 0 < p < len(spec) - 1 else (start, row))
        start += gap
    for column in range(3):  # a source with weight 0 in every phase is refused
        if not any(phase[1][column] for phase in phases):
            phases[0][1][column] = 1.0
    return phases


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    old_spec=schedules,
    new_spec=schedules,
    steps=st.integers(0, 30),
    old_dp=st.sampled_from([1, 2]),
    new_dp=st.sampled_from([1, 2, 4]),
)
def test_schedules_before_and_after_a_change_combine(
    corpora: dict, old_spec: list, new_spec: list, steps: int, old_dp: int, new_dp: int
) -> None:
    """An old run on a schedule, resumed anywhere (inside a linear ramp too) over a new
    blend with its own schedule and another DP size: the reference's samples, each
    source from its next unconsumed sample, the new schedule followed from the resume."""
    old_phases, new_phases = _phases(old_spec), _phases(new_spec)
    old_blend = blend_of(corpora, {"a": 1.0, "b": 1.0, "c": 1.0}, 96, schedule=old_phases)
    new_blend = blend_of(corpora, {"b": 1.0, "c": 1.0, "d": 1.0}, 200, schedule=new_phases)
    state = state_after(old_blend, steps // old_dp, old_dp, micro_batch_size=MBS)
    consumed = state["consumed_samples"]
    after = served(new_blend, state, 5, new_dp, micro_batch_size=MBS)
    old_order = ramp_tail(old_phases, 0, consumed)
    new_order = ramp_tail(new_phases, consumed, len(after))
    want, streams = reference(old_blend, consumed, new_blend, len(after), old_order, new_order)
    assert len(after) == 5 * MBS * new_dp and same(after, want)
    loader = build_pretraining_data_loader(new_blend, 0, micro_batch_size=MBS)
    loader.load_state_dict(state, allow_mixture_change=True)
    iterator = iter(loader)
    for _ in range(5 * new_dp):
        next(iterator)
    counts = {n: r["consumed"] for n, r in loader.state_dict()["sources"].items()}
    assert counts == streams.next


def test_a_moved_pair_continues_its_stream(tmp_path: Path, caplog: Any) -> None:
    """A pair moved to another path (same identity: a rename keeps sizes, mtime_ns and
    the .idx digest) is the same source: it continues from its count in its saved order,
    read from the new path; the old path is gone. A copy with a new mtime is a new
    source (a warning says why)."""
    a, b = write_corpus(tmp_path / "a", 60, 1), write_corpus(tmp_path / "b", 60, 2)
    old_blend = build([a, b], [1.0, 1.0], 96, tmp_path / "cache")
    state = state_after(old_blend, 5, micro_batch_size=MBS)
    (tmp_path / "moved").mkdir()
    moved = str(tmp_path / "moved" / "a")
    for suffix in (".bin", ".idx"):
        os.link(a + suffix, moved + suffix)  # the same file under a new name
    new_blend = build([moved, b], [2.0, 1.0], 140, tmp_path / "cache")
    count = 8 * MBS
    want, streams = reference(old_blend, 5 * MBS, new_blend, count, moved={moved: a})
    for suffix in (".bin", ".idx"):
        os.unlink(a + suffix)  # now a move: the old path is gone
    loader = build_pretraining_data_loader(new_blend, 0, micro_batch_size=MBS)
    with caplog.at_level(logging.INFO, logger="tokenloom.training.mixture_resume"):
        loader.load_state_dict(state, allow_mixture_change=True)
    assert f"{moved}: the pair of {a}, moved (same identity): continues" in caplog.text
    iterator, got = iter(loader), []
    for _ in range(4):
        got.extend(next(iterator)["tokens"].numpy())
    later = loader.state_dict()
    assert a not in later["sources"] and later["sources"][moved]["order"]["path"] == a
    again = build_pretraining_data_loader(new_blend, 0, micro_batch_size=MBS)
    again.load_state_dict(later)  # a plain resume of the continued run
    rest = iter(again)
    got.extend(t for _ in range(4) for t in next(rest)["tokens"].numpy())
    assert same(got, want)
    assert {n: r["consumed"] for n, r in again.state_dict()["sources"].items()} == streams.next
    copy = str(tmp_path / "copy")
    for suffix in (".bin", ".idx"):
        shutil.copyfile(moved + suffix, copy + suffix)  # same bytes, a new mtime
    copied = build([copy, b], [2.0, 1.0], 140, tmp_path / "cache")
    fresh = build_pretraining_data_loader(copied, 0, micro_batch_size=MBS)
    with caplog.at_level(logging.WARNING, logger="tokenloom.training.mixture_resume"):
        fresh.load_state_dict(later, allow_mixture_change=True)
    assert f"{copy} has the sizes and .idx digest of a saved source" in caplog.text
    assert fresh.fetcher.dataset.start[0] == 0  # a new source: from its sample 0


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 4])
def test_gloo_ranks_continue_inside_a_ramp(corpora: dict, tmp_path: Path, world: int) -> None:
    """A DP 1 state of a scheduled run resumed inside the new schedule's linear ramp on a
    real gloo group (odd ranks with a DataLoader worker): the reference's global order."""
    from tests.support import distributed_harness as harness

    p = corpora["prefixes"]
    results = harness.launch(
        str(Path(__file__).with_name("_mixture_worker.py")),
        "ramp",
        tmp_path,
        world,
        timeout=240,
        env_extra={"MIXTURE_PREFIXES": ",".join([p["a"], p["b"], p["c"]])},
    )
    assert [r["same"] for r in results] == [True] * world

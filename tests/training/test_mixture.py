"""A mixture change continues every source exactly (checked against a brute-force
reference that materialises the per-source streams)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.training._data import build_train, write_corpus
from tests.training._mixture_reference import ramp_tail

from tokenloom.errors import ConfigError
from tokenloom.index import build_blending_indices
from tokenloom.training.mixture import (
    ContinuedMixture,
    continue_blend,
    mixture_changes,
    source_consumed,
)


class Stream:
    """A source whose sample ``i`` is ``(name, order[i])``: reveals its own order."""

    def __init__(self, name: str, length: int) -> None:
        self.name, self.order = name, [(7 * i + 3) % length for i in range(length)]

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, i: int) -> tuple[str, int]:
        return self.name, self.order[i]


def greedy(weights: list[float], size: int) -> list[int]:
    """megatron-core's rule, readably: the largest weight * max(t, 1) - count wins."""
    total, counts, out = sum(weights), [0] * len(weights), []
    for t in range(size):
        errors = [w / total * max(t, 1) - c for w, c in zip(weights, counts)]
        best = errors.index(max(errors))
        counts[best] += 1
        out.append(best)
    return out


def reference(
    sources: dict, old: dict, consumed: int, new: dict, size: int, order: Any = None
) -> tuple:
    """Pop every source's stream (its dataset, round after round) along the old blend,
    then along the new one (``order``: the new blend's sources, default its greedy)."""
    streams = {
        name: [source[k % len(source)] for k in range(500)] for name, source in sources.items()
    }
    old_names = list(old)
    for i in greedy([old[n] for n in old_names], consumed):
        streams[old_names[i]].pop(0)
    new_names = list(new)
    order = greedy([new[n] for n in new_names], size) if order is None else order
    after = [streams[new_names[i]].pop(0) for i in order]
    return after, streams


weights_st = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]), st.integers(1, 9).map(float), min_size=1, max_size=4
)


@settings(max_examples=60, deadline=None)
@given(
    old=weights_st,
    new=weights_st,
    consumed=st.integers(0, 40),
    size=st.integers(0, 40),
    length=st.sampled_from([7, 100]),
)
def test_continued_mixture_is_the_reference(
    old: dict, new: dict, consumed: int, size: int, length: int
) -> None:
    """Sources of 7 samples run past their datasets (further rounds, same order)."""
    sources = {name: Stream(name, length) for name in "abcd"}
    names = list(old)
    total = sum(old.values())
    dataset_index, _ = build_blending_indices([old[n] / total for n in names], consumed)
    counts = source_consumed(dataset_index, consumed, names)
    mixture = ContinuedMixture(sources, counts, new, size)
    want, _ = reference(sources, old, consumed, new, size)
    assert [mixture[j] for j in range(size)] == want
    # no sample of a source repeated or lost within a round: old prefix + new draws are
    # its order, round after round
    for name in new:
        drawn = [sources[name][k % length][1] for k in range(counts.get(name, 0))]
        drawn += [s for n, s in want if n == name]
        assert drawn == [sources[name].order[k % length] for k in range(len(drawn))]


phases_st = st.lists(
    st.tuples(
        st.integers(1, 12), st.lists(st.integers(0, 5), min_size=4, max_size=4), st.booleans()
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(
    old=weights_st,
    spec=phases_st,
    consumed=st.integers(0, 40),
    resume=st.integers(0, 40),
    size=st.integers(0, 50),
)
def test_a_new_schedule_continues_as_the_reference(
    old: dict, spec: list, consumed: int, resume: int, size: int
) -> None:
    """A new blend_schedule (ramps included) followed from the resume, in any phase."""
    names, start, phases = list("abcd"), 0, []
    for p, (gap, weights, linear) in enumerate(spec):
        weights = [float(w) for w in weights] if sum(weights) else [1.0] * 4
        last = p in (0, len(spec) - 1)
        phases.append((start, weights, "linear") if linear and not last else (start, weights))
        start += gap
    sources = {name: Stream(name, 9) for name in names}
    total = sum(old.values())
    index, _ = build_blending_indices([old[n] / total for n in old], consumed)
    counts = source_consumed(index, consumed, list(old))
    new = dict.fromkeys(names, 1.0)
    mixture = ContinuedMixture(sources, counts, new, size, phases, resume)
    order = ramp_tail(phases, resume, size)
    want, _ = reference(sources, old, consumed, new, size, order)
    assert [mixture[j] for j in range(size)] == want


@settings(max_examples=30, deadline=None)
@given(old=weights_st, new=weights_st, consumed=st.integers(0, 30), cut=st.integers(0, 30))
def test_resume_at_every_step_gives_the_same_order(
    old: dict, new: dict, consumed: int, cut: int
) -> None:
    """Changing at c, then saving at c + cut and continuing at the same weights, gives
    the change's own order (the new blend's greedy state is a function of its position)."""
    sources = {name: Stream(name, 100) for name in "abcd"}
    names = list(old)
    total = sum(old.values())
    index, _ = build_blending_indices([old[n] / total for n in names], consumed)
    counts = source_consumed(index, consumed, names)
    whole = ContinuedMixture(sources, counts, new, 40)
    again = ContinuedMixture(sources, counts, new, cut + 10)
    assert [again[j] for j in range(cut, cut + 10)] == [whole[j] for j in range(cut, cut + 10)]


def test_log_lines_and_refusals(caplog: Any) -> None:
    sources = {name: Stream(name, 10) for name in "abc"}
    with caplog.at_level(logging.INFO, logger="tokenloom.training.mixture"):
        ContinuedMixture(sources, {"a": 4, "b": 2}, {"a": 1.0, "c": 1.0}, 8)
    assert "a: continues (from sample 4)" in caplog.text
    assert "b: stops (after 2 samples)" in caplog.text
    assert "c: starts (at sample 0)" in caplog.text
    assert mixture_changes({"a": 0}, {"a": 1.0}) == ["a: starts (at sample 0)"]
    with caplog.at_level(logging.INFO, logger="tokenloom.training.mixture"):
        rounds = ContinuedMixture(sources, {"a": 9}, {"a": 1.0}, 5)
    assert "a runs past its dataset of 10 samples (needs 14)" in caplog.text
    assert [rounds.position(j)[1] for j in range(5)] == [9, 0, 1, 2, 3]  # a next round
    with pytest.raises(ConfigError, match="phase 0: weights"):
        ContinuedMixture(sources, {}, {"a": 1.0}, 3, [(0, [1.0, 1.0])])
    with pytest.raises(ConfigError, match="without a dataset"):
        ContinuedMixture(sources, {}, {"z": 1.0}, 3)
    with pytest.raises(ConfigError, match="positive"):
        ContinuedMixture(sources, {}, {"a": 0.0}, 3)
    with pytest.raises(ConfigError, match="outside"):
        source_consumed(build_blending_indices([1.0], 3)[0], 4, ["a"])
    with pytest.raises(IndexError):
        ContinuedMixture(sources, {}, {"a": 1.0}, 3)[3]


def test_continue_a_real_blend_from_its_consumed_count(tmp_path: Path) -> None:
    """Megatron's path: the old config's blend and consumed_samples; a reweight that
    drops one source and adds another continues the kept one in its built order."""
    a, b, c = (write_corpus(tmp_path / n, 60, seed) for n, seed in (("a", 1), ("b", 2), ("c", 3)))
    old = build_train([a, b], tmp_path / "cache", 80, weights=[0.5, 0.5])
    added = build_train([c], tmp_path / "cache", 80)
    mixture = continue_blend(old, 30, {a: 3.0, c: 1.0}, 40, added={c: added})
    kept = int((old.dataset_index[:30] == 0).sum())
    order = {a: list(range(kept, 80)), c: list(range(80))}
    sources = {a: old.datasets[0], c: added}
    for j, which in enumerate(greedy([3.0, 1.0], 40)):
        name = (a, c)[which]
        want = sources[name][order[name].pop(0)]["tokens"]
        assert numpy.array_equal(mixture[j]["tokens"], want)


def test_the_docs_figure_shows_the_rule(tmp_path: Path) -> None:
    """docs/mixture_streams.py draws what the library serves: web continues from its
    next unconsumed sample, code stops, math starts at 0, each stream without a gap."""
    import importlib.util

    pytest.importorskip("matplotlib")
    path = Path(__file__).resolve().parents[2] / "docs" / "mixture_streams.py"
    spec = importlib.util.spec_from_file_location("mixture_streams", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    served, consumed = module.streams()
    before, after = served[: module.RESUME], served[module.RESUME :]
    assert consumed == {"web": 4, "code": 4}
    assert not [s for s, _ in after if s == "code"]  # removed: never drawn
    for name, first in (("web", consumed["web"]), ("math", 0)):
        drawn = [k for s, k in after if s == name]
        assert drawn == list(range(first, first + len(drawn)))
    assert [k for s, k in before if s == "web"] == [0, 1, 2, 3]
    module.draw(tmp_path / "figure.png")
    assert (tmp_path / "figure.png").stat().st_size > 10_000

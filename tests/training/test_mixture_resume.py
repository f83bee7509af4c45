"""``load_state_dict(state, allow_mixture_change=True)``: a loader built over a changed
blend continues every source exactly, checked against the brute-force reference of
tests/training/_mixture_reference.py (real .bin/.idx corpora and GPT blends)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.training._data import write_corpus
from tests.training._mixture_reference import (
    blend_of,
    build,
    parts,
    reference,
    same,
    served,
    state_after,
)

from tokenloom.errors import ConfigError
from tokenloom.index import reference as index_reference
from tokenloom.training import build_pretraining_data_loader

MBS = 2


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("mixture")
    prefixes = {name: write_corpus(root / name, 60, seed) for seed, name in enumerate("abcd")}
    return {"prefixes": prefixes, "cache": root / "cache", "root": root}


mixtures = st.dictionaries(
    st.sampled_from("abcd"), st.integers(1, 5).map(float), min_size=1, max_size=3
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    old=mixtures,
    new=mixtures,
    steps=st.integers(0, 12),
    old_dp=st.sampled_from([1, 2]),
    new_dp=st.sampled_from([1, 2, 4]),
    split=st.sampled_from(["100,0,0", "90,10,0"]),
    grow=st.integers(0, 120),
)
def test_a_changed_mixture_continues_as_the_reference(
    corpora: dict, old: dict, new: dict, steps: int, old_dp: int, new_dp: int, split: str, grow: int
) -> None:
    """Reweight, add, remove, a split change and a DP change, in any combination: the
    samples served after the resume are the reference's (first batch included), and
    each source's stream goes on from its next unconsumed sample."""
    old_blend = blend_of(corpora, old, 96)
    new_blend = blend_of(corpora, new, 96 + grow, split=split)
    state = state_after(old_blend, steps, old_dp, micro_batch_size=MBS)
    consumed = state["consumed_samples"]
    after = served(new_blend, state, 6, new_dp, micro_batch_size=MBS)
    want, _ = reference(old_blend, consumed, new_blend, len(after))
    if old_blend.unique_description_hash == new_blend.unique_description_hash:
        # nothing changed (same weights, size and split): a plain resume of the same blend
        want = [new_blend[i]["tokens"] for i in range(consumed, consumed + len(after))]
    assert len(after) == min(6 * MBS * new_dp, len(new_blend) - consumed) // (MBS * new_dp) * (
        MBS * new_dp
    )
    assert same(after, want)
    counts = {n: r["consumed"] for n, r in state["sources"].items()}
    assert sum(counts.values()) == consumed


def test_no_sample_is_repeated_or_lost_within_a_source(corpora: dict) -> None:
    """Every source's stream over the whole run (old blend, then the new one) is its
    dataset's samples in order: a continuing source's positions run on without a gap."""
    old_blend = blend_of(corpora, {"a": 1.0, "b": 1.0}, 96)
    new_blend = blend_of(corpora, {"a": 3.0, "c": 1.0}, 200)
    state = state_after(old_blend, 7, micro_batch_size=MBS)
    loader = build_pretraining_data_loader(new_blend, 0, micro_batch_size=MBS)
    loader.load_state_dict(state, allow_mixture_change=True)
    view = loader.fetcher.dataset
    start = state["consumed_samples"]
    names = list(parts(new_blend))
    for i, name in enumerate(names):
        rows = numpy.flatnonzero(view.dataset_index[start:] == i) + start
        positions = view.dataset_sample_index[rows]
        first = state["sources"].get(name, {"consumed": 0})["consumed"]
        expected = (first + numpy.arange(len(rows))) % len(view.datasets[i])
        assert numpy.array_equal(positions, expected), name
    a = names.index(corpora["prefixes"]["a"])
    old_a = parts(old_blend)[corpora["prefixes"]["a"]]
    assert len(view.datasets[a]) == len(old_a)  # a continues in its saved order
    assert same(
        [view.datasets[a][k]["tokens"] for k in range(5)], [old_a[k]["tokens"] for k in range(5)]
    )


def test_resuming_at_every_step_gives_the_same_global_order(corpora: dict) -> None:
    """Before and after a change, a loader resumed at every step serves the continuous
    run's samples, and every state's per-source counts are the reference streams'."""
    old_blend = blend_of(corpora, {"a": 1.0, "b": 2.0}, 96)
    new_blend = blend_of(corpora, {"b": 1.0, "c": 1.0, "d": 2.0}, 150)
    current = state_after(old_blend, 0, micro_batch_size=MBS)
    for step in range(5):  # plain resumes of the old blend: counts seeded from the state
        loader = build_pretraining_data_loader(old_blend, 0, micro_batch_size=MBS)
        loader.load_state_dict(current)
        next(iter(loader))
        current = loader.state_dict()
        _, streams = reference(old_blend, (step + 1) * MBS, old_blend, 0)
        assert {n: r["consumed"] for n, r in current["sources"].items()} == streams.next
    state = current
    continuous = served(new_blend, state, 20, 1, micro_batch_size=MBS)
    stepped = []
    for step in range(20):
        loader = build_pretraining_data_loader(new_blend, 0, micro_batch_size=MBS)
        loader.load_state_dict(current, allow_mixture_change=step == 0)
        stepped.extend(next(iter(loader))["tokens"].numpy())
        current = loader.state_dict()
        _, streams = reference(old_blend, 5 * MBS, new_blend, (step + 1) * MBS)
        assert {n: r["consumed"] for n, r in current["sources"].items()} == streams.next
    assert current["mixture"]["resume_at"] == state["consumed_samples"]
    assert same(stepped, continuous)


def test_two_changes_and_a_source_that_comes_back(corpora: dict) -> None:
    """a+b, then c only (a and b stop), then a+c: a continues where it stopped."""
    first = blend_of(corpora, {"a": 1.0, "b": 1.0}, 96)
    second = blend_of(corpora, {"c": 1.0}, 120)
    third = blend_of(corpora, {"a": 1.0, "c": 1.0}, 200)
    s1 = state_after(first, 4, micro_batch_size=MBS)
    loader = build_pretraining_data_loader(second, 0, micro_batch_size=MBS)
    loader.load_state_dict(s1, allow_mixture_change=True)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    s2 = loader.state_dict()
    a = corpora["prefixes"]["a"]
    assert s2["sources"][a]["consumed"] == s1["sources"][a]["consumed"]  # stopped, kept
    after = served(third, s2, 4, 1, micro_batch_size=MBS)
    third_loader = build_pretraining_data_loader(third, 0, micro_batch_size=MBS)
    third_loader.load_state_dict(s2, allow_mixture_change=True)
    view = third_loader.fetcher.dataset
    rows = range(s2["consumed_samples"], s2["consumed_samples"] + len(after))
    for row, tokens in zip(rows, after):
        source, k = int(view.dataset_index[row]), int(view.dataset_sample_index[row])
        name = list(parts(third))[source]
        stream = parts(first)[a] if name == a else view.datasets[source]
        assert numpy.array_equal(stream[k]["tokens"], tokens)
    a_rows = [r for r in rows if list(parts(third))[int(view.dataset_index[r])] == a]
    assert int(view.dataset_sample_index[a_rows[0]]) == s1["sources"][a]["consumed"]


def test_a_source_past_its_saved_dataset_starts_it_over(corpora: dict, caplog: Any) -> None:
    old_blend = blend_of(corpora, {"a": 1.0, "b": 1.0}, 40)
    new_blend = blend_of(corpora, {"a": 1.0}, 400)
    state = state_after(old_blend, 8, micro_batch_size=MBS)
    with caplog.at_level(logging.INFO, logger="tokenloom.training.mixture_resume"):
        after = served(new_blend, state, 400, 1, micro_batch_size=MBS)
    want, _ = reference(old_blend, state["consumed_samples"], new_blend, len(after))
    assert same(after, want)
    assert "starts that dataset over" in caplog.text


def test_the_log_names_what_continues_starts_and_stops(corpora: dict, caplog: Any) -> None:
    old_blend = blend_of(corpora, {"a": 1.0, "b": 1.0}, 96)
    new_blend = blend_of(corpora, {"a": 1.0, "c": 1.0}, 96)
    state = state_after(old_blend, 3, micro_batch_size=MBS)
    loader = build_pretraining_data_loader(new_blend, 0, micro_batch_size=MBS)
    with caplog.at_level(logging.INFO, logger="tokenloom.training.mixture_resume"):
        loader.load_state_dict(state, allow_mixture_change=True)
    p = corpora["prefixes"]
    count = state["sources"][p["a"]]["consumed"]
    assert f"{p['a']}: continues (from sample {count})" in caplog.text
    assert f"{p['b']}: stops (after {state['sources'][p['b']]['consumed']} samples)" in caplog.text
    assert f"{p['c']}: starts (at sample 0)" in caplog.text


def test_a_changed_mixture_is_refused_without_the_opt_in(corpora: dict) -> None:
    old_blend = blend_of(corpora, {"a": 1.0, "b": 1.0}, 96)
    new_blend = blend_of(corpora, {"a": 2.0, "b": 1.0}, 96)
    state = state_after(old_blend, 3, micro_batch_size=MBS)
    loader = build_pretraining_data_loader(new_blend, 0, micro_batch_size=MBS)
    with pytest.raises(ConfigError, match="allow_mixture_change=True"):
        loader.load_state_dict(state)
    with pytest.raises(ConfigError, match="data_parallel_size"):  # DP: only with the opt-in
        build_pretraining_data_loader(
            old_blend, 0, micro_batch_size=MBS, data_parallel_size=2
        ).load_state_dict(state)


@pytest.mark.parametrize("kind", ["cyclic", "elastic"])
def test_random_samplers_refuse_a_mixture_change(corpora: dict, kind: str) -> None:
    old_blend = blend_of(corpora, {"a": 1.0, "b": 1.0}, 96)
    new_blend = blend_of(corpora, {"a": 2.0, "b": 1.0}, 96)
    options = {"micro_batch_size": MBS, "dataloader_type": kind, "global_batch_size": MBS}
    state = state_after(old_blend, 3, **options)
    assert all(r["consumed"] is None for r in state["sources"].values())
    loader = build_pretraining_data_loader(new_blend, 0, **options)
    with pytest.raises(ConfigError, match="needs dataloader_type='single'"):
        loader.load_state_dict(state, allow_mixture_change=True)
    loader.load_state_dict(state_after(new_blend, 2, **options), allow_mixture_change=True)


def test_a_state_before_the_per_source_counts(corpora: dict) -> None:
    """/3 states load as before; a mixture change from one is refused, naming the way."""
    old_blend = blend_of(corpora, {"a": 1.0, "b": 1.0}, 96)
    state = state_after(old_blend, 3, micro_batch_size=MBS)
    old = {k: v for k, v in state.items() if k not in ("sources", "mixture")}
    old["format"] = "tokenloom.training.loader/3"
    plain = build_pretraining_data_loader(old_blend, 0, micro_batch_size=MBS)
    plain.load_state_dict(old)
    assert plain.state_dict()["sources"] == state["sources"]  # derived from the blend
    new_blend = blend_of(corpora, {"a": 2.0, "b": 1.0}, 96)
    loader = build_pretraining_data_loader(new_blend, 0, micro_batch_size=MBS)
    with pytest.raises(ConfigError, match="continue_blend"):
        loader.load_state_dict(old, allow_mixture_change=True)


def test_changed_files_are_refused_unless_allowed(tmp_path: Path) -> None:
    a, b = write_corpus(tmp_path / "a", 60, 1), write_corpus(tmp_path / "b", 60, 2)
    old_blend = build([a, b], [1.0, 1.0], 96, tmp_path / "cache")
    state = state_after(old_blend, 3, micro_batch_size=MBS)
    write_corpus(tmp_path / "a", 60, 1, token_seed=9)  # same lengths, other tokens
    new_blend = build([a, b], [2.0, 1.0], 96, tmp_path / "cache")
    loader = build_pretraining_data_loader(new_blend, 0, micro_batch_size=MBS)
    with pytest.raises(ConfigError, match="continuing source's files changed"):
        loader.load_state_dict(state, allow_mixture_change=True)
    loader.load_state_dict(state, allow_mixture_change=True, allow_data_change=True)
    next(iter(loader))


def test_another_sequence_length_is_refused(corpora: dict) -> None:
    old_blend = blend_of(corpora, {"a": 1.0, "b": 1.0}, 96)
    new_blend = blend_of(corpora, {"a": 2.0, "b": 1.0}, 96, sequence_length=8)
    state = state_after(old_blend, 3, micro_batch_size=MBS)
    loader = build_pretraining_data_loader(new_blend, 0, micro_batch_size=MBS)
    with pytest.raises(ConfigError, match="cannot|changed"):
        loader.load_state_dict(state, allow_mixture_change=True)


def test_skip_batches_and_blocked_documents_carry_over(corpora: dict) -> None:
    old_blend = blend_of(corpora, {"a": 1.0, "b": 1.0}, 96)
    new_blend = blend_of(corpora, {"a": 1.0, "c": 1.0}, 160)
    a = corpora["prefixes"]["a"]
    blocked = [f"{a}:{d}" for d in range(60)]  # every document of a
    options = {"micro_batch_size": MBS, "skip_batches": [(1, 2), (6, 8)]}
    state = state_after(old_blend, 4, block_documents=blocked, **options)  # steps 0, 2-4
    assert state["skip_batches"] == [[1, 2], [6, 8]]
    loader = build_pretraining_data_loader(
        new_blend, 0, micro_batch_size=MBS, block_documents=blocked
    )
    loader.load_state_dict(state, allow_mixture_change=True)
    got = []
    for batch in loader:
        got.append(batch)
        if len(got) == 6:
            break
    consumed = state["consumed_samples"]  # 5 steps: the skipped step 1 is consumed
    assert consumed == 5 * MBS
    want, _ = reference(old_blend, consumed, new_blend, 10 * MBS)
    kept = [want[s * MBS : (s + 1) * MBS] for s in range(10) if s + 5 not in (6, 7)]
    assert same([t for b in got for t in b["tokens"].numpy()], [t for s in kept[:6] for t in s])
    view = loader.fetcher.dataset
    a_id = list(parts(new_blend)).index(a)
    for batch in got:
        for row, source in enumerate(batch["dataset_id"].tolist()):
            masked = float(batch["loss_mask"][row].sum()) == 0
            assert masked == (source == a_id) or source != a_id and not masked
    assert view.datasets  # served by the continued blend


def test_a_schedule_and_a_later_change_combine(corpora: dict) -> None:
    """The old run follows a schedule; the change (inside a constant phase) continues it
    and the new config's own schedule holds from its phase in force at the resume (the
    tail built here by hand; test_mixture_resume_ramps_moves.py covers ramps)."""
    old_schedule = [(0, [1.0, 1.0]), (20, [1.0, 3.0])]
    old_blend = blend_of(corpora, {"a": 1.0, "b": 1.0}, 96, schedule=old_schedule)
    new_schedule = [(0, [1.0, 1.0]), (30, [4.0, 1.0]), (60, [1.0, 1.0])]
    new_blend = blend_of(corpora, {"a": 1.0, "c": 1.0}, 120, schedule=new_schedule)
    state = state_after(old_blend, 20, micro_batch_size=MBS)  # 40 samples: the new phase 1
    consumed = state["consumed_samples"]
    after = served(new_blend, state, 20, 1, micro_batch_size=MBS)
    old_order, _ = index_reference.build_scheduled_blending_indices(
        (numpy.array([0, 20]), numpy.array([[0.5, 0.5], [0.25, 0.75]]), numpy.array([False] * 2)),
        consumed,
    )
    tail, _ = index_reference.build_scheduled_blending_indices(
        (numpy.array([0, 20]), numpy.array([[0.8, 0.2], [0.5, 0.5]]), numpy.array([False] * 2)),
        len(after),
    )
    want, _ = _scheduled_reference(
        old_blend, old_order.tolist(), consumed, new_blend, tail.tolist()
    )
    assert same(after, want)


def _scheduled_reference(
    old: Any, old_order: list, consumed: int, new: Any, new_order: list
) -> tuple:
    from tests.training._mixture_reference import Streams

    streams = Streams()
    old_names, new_parts = list(parts(old)), parts(new)
    for name, dataset in parts(old).items():
        streams.datasets[name], streams.next[name] = dataset, 0
    for i in old_order[:consumed]:
        streams.pop(old_names[i])
    for name, dataset in new_parts.items():
        if streams.next.get(name, 0) == 0:
            streams.datasets[name], streams.next[name] = dataset, 0
    names = list(new_parts)
    return [streams.pop(names[i]) for i in new_order], streams


@pytest.mark.processes
@pytest.mark.timeout(240)
def test_dataloader_workers_serve_the_continued_blend(corpora: dict) -> None:
    old_blend = blend_of(corpora, {"a": 1.0, "b": 1.0}, 96)
    new_blend = blend_of(corpora, {"b": 1.0, "c": 2.0}, 160)
    state = state_after(old_blend, 6, micro_batch_size=MBS, num_workers=1)
    plain = served(new_blend, state, 12, 2, micro_batch_size=MBS)
    workers = served(new_blend, state, 12, 2, micro_batch_size=MBS, num_workers=2)
    want, _ = reference(old_blend, state["consumed_samples"], new_blend, len(plain))
    assert same(plain, want) and same(workers, want)
    # a loader whose persistent workers already ran forks new ones for the continued blend
    loader = build_pretraining_data_loader(new_blend, 0, micro_batch_size=MBS, num_workers=2)
    next(iter(loader))
    loader.load_state_dict(state, allow_mixture_change=True)
    assert same(list(next(iter(loader))["tokens"].numpy()), want[:MBS])


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 4])
def test_gloo_ranks_continue_a_changed_mixture(corpora: dict, tmp_path: Path, world: int) -> None:
    """A DP 1 state resumed over a changed blend on a real gloo group of ``world`` ranks
    (odd ranks with a DataLoader worker): the gathered global order is the reference's."""
    from tests.support import distributed_harness as harness

    p = corpora["prefixes"]
    results = harness.launch(
        str(Path(__file__).with_name("_mixture_worker.py")),
        "change",
        tmp_path,
        world,
        timeout=240,
        env_extra={"MIXTURE_PREFIXES": ",".join([p["a"], p["b"], p["c"]])},
    )
    assert [r["same"] for r in results] == [True] * world


@pytest.mark.parametrize(
    "edit, where",
    [
        (lambda s, p: s["sources"][p].update(consumed=-1), '["sources"]["{p}"]["consumed"]'),
        (lambda s, p: s["sources"][p]["order"].update(documents=[5, 2]), '["documents"]'),
        (lambda s, p: s.update(mixture={"resume_at": 0, "start": {p: "x"}}), '["mixture"]'),
        (lambda s, p: s["sources"][p].pop("order"), '["order"] is missing'),
    ],
)
def test_a_malformed_source_record_names_its_field(corpora: dict, edit: Any, where: str) -> None:
    old_blend = blend_of(corpora, {"a": 1.0, "b": 1.0}, 96)
    state = state_after(old_blend, 3, micro_batch_size=MBS)
    p = corpora["prefixes"]["a"]
    edit(state, p)
    loader = build_pretraining_data_loader(old_blend, 0, micro_batch_size=MBS)
    with pytest.raises(ConfigError) as error:
        loader.load_state_dict(state, allow_mixture_change=True)
    assert where.format(p=p) in str(error.value)

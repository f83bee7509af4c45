"""Quarantine on real builds: skipped global steps and blocked documents survive restarts."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import numpy
import pytest
from tests.training._data import EOD, build_train, write_corpus

from tokenloom.errors import ConfigError
from tokenloom.format import IndexedDatasetBuilder
from tokenloom.training import build_pretraining_data_loader
from tokenloom.training.quarantine import normalize_skip_batches

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def train(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("quarantine")
    prefix = write_corpus(root / "a", 300, seed=3)
    return build_train([prefix], root / "cache", 240, sequence_length=16)


def loader(data: Any, kind: str = "single", **kwargs: Any) -> Any:
    options = dict(micro_batch_size=2, dataloader_type=kind, drop_last=True)
    options.update(kwargs)
    return build_pretraining_data_loader(data, 0, **options)


def steps(source: Any, count: int) -> list[numpy.ndarray]:
    out = []
    for batch in source:
        out.append(batch["tokens"].numpy().copy())
        if len(out) == count:
            break
    return out


def expected(base: list[numpy.ndarray], skipped: set[int], count: int) -> list[numpy.ndarray]:
    return [base[s] for s in range(len(base)) if s not in skipped][:count]


def same(a: list[numpy.ndarray], b: list[numpy.ndarray]) -> bool:
    return len(a) == len(b) and all(numpy.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("kind", ["single", "cyclic", "elastic"])
def test_two_ranges_never_served_and_later_steps_match(train: Any, kind: str) -> None:
    extra = {"global_batch_size": 2} if kind == "elastic" else {}
    base = steps(loader(train, kind, **extra), 40)
    skip = [(7, 9), (2, 4)]  # unsorted on purpose
    quarantined = loader(train, kind, skip_batches=skip, **extra)
    got = steps(quarantined, 30)
    assert same(got, expected(base, {2, 3, 7, 8}, 30))
    assert not any(numpy.array_equal(g, base[s]) for g in got for s in (2, 3, 7, 8))
    # 30 served + 4 skipped steps of 2 samples each
    assert quarantined.consumed_samples == 34 * 2
    assert quarantined.state_dict()["skip_batches"] == [[2, 4], [7, 9]]


def test_single_pass_ends_where_the_unskipped_one_does(train: Any) -> None:
    base = steps(loader(train), 10**6)
    quarantined = loader(train, skip_batches=[(0, 1), (len(base) - 2, len(base) + 5)])
    got = steps(quarantined, 10**6)
    assert same(got, base[1:-2])
    assert quarantined.consumed_samples == len(train)


def test_a_step_is_a_global_batch_when_given(train: Any) -> None:
    """global_batch_size 8 with micro 2: step s is loader batches 4s..4s+3."""
    base = steps(loader(train, global_batch_size=8), 40)
    got = steps(loader(train, global_batch_size=8, skip_batches=[(1, 2)]), 20)
    assert same(got, base[:4] + base[8:24])
    with pytest.raises(ConfigError, match="multiple"):
        loader(train, global_batch_size=3, skip_batches=[(1, 2)])


def test_ranges_normalised_or_refused() -> None:
    assert normalize_skip_batches([(5, 7), (2, 4), (3, 6), (9, 10), (7, 8)]) == ((2, 8), (9, 10))
    assert normalize_skip_batches(None) == ()
    for bad in ([(3, 3)], [(4, 2)], [(-1, 2)], [(1,)], "0,3", [(1.5, 3)], [(True, 3)]):
        with pytest.raises(ConfigError, match="skip_batches"):
            normalize_skip_batches(bad)


@pytest.mark.parametrize("kind", ["single", "cyclic"])
def test_restart_mid_run_keeps_the_skips(train: Any, kind: str) -> None:
    base = steps(loader(train, kind), 40)
    skip = [(3, 5), (12, 14)]
    first = loader(train, kind, skip_batches=skip)
    head = steps(first, 6)  # steps 0-2, 5-7: past the first range
    state = first.state_dict()
    resumed = loader(train, kind)  # built without skip_batches: the state's are kept
    resumed.load_state_dict(state)
    tail = steps(resumed, 10)
    assert same(head + tail, expected(base, {3, 4, 12, 13}, 16))
    assert resumed.state_dict()["skip_batches"] == [[3, 5], [12, 14]]
    extended = loader(train, kind, skip_batches=skip + [(20, 22)])  # extends: accepted
    extended.load_state_dict(state)
    assert same(steps(extended, 14), expected(base, {3, 4, 12, 13, 20, 21}, 20)[6:])
    with pytest.raises(ConfigError, match=r"does not cover"):
        loader(train, kind, skip_batches=[(3, 5)]).load_state_dict(state)


def test_resume_inside_a_range(train: Any) -> None:
    base = steps(loader(train), 20)
    first = loader(train, skip_batches=[(3, 6)])
    steps(first, 3)  # steps 0-2: consumed is now at the start of step 3
    resumed = loader(train, skip_batches=[(3, 6)])
    resumed.load_state_dict(first.state_dict())
    assert same(steps(resumed, 4), base[6:10])


@pytest.mark.parametrize("kind", ["single", "cyclic"])
def test_each_data_parallel_rank_skips_the_same_global_steps(train: Any, kind: str) -> None:
    for rank in (0, 1):
        ranks = dict(data_parallel_rank=rank, data_parallel_size=2)
        base = steps(loader(train, kind, **ranks), 30)
        got = steps(loader(train, kind, skip_batches=[(1, 3), (9, 10)], **ranks), 20)
        assert same(got, expected(base, {1, 2, 9}, 20))


@pytest.mark.processes
@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["single", "cyclic"])
def test_with_workers_and_a_restart(train: Any, kind: str) -> None:
    ranks = dict(data_parallel_rank=1, data_parallel_size=2)
    base = steps(loader(train, kind, **ranks), 40)
    skip = [(2, 4), (10, 12)]
    first = loader(train, kind, skip_batches=skip, num_workers=2, **ranks)
    head = steps(first, 5)
    resumed = loader(train, kind, num_workers=2, **ranks)
    resumed.load_state_dict(first.state_dict())
    tail = steps(resumed, 15)
    del first, resumed  # reap the persistent workers here, not in a later quick test
    gc.collect()
    assert same(head + tail, expected(base, {2, 3, 10, 11}, 20))


# -- blocked documents -------------------------------------------------------------------
def marked_corpus(prefix: Path, documents: int, first_token: int) -> str:
    """Document d's tokens are all ``first_token + d`` (then EOD): a token names its document."""
    lengths = numpy.random.default_rng(documents).integers(3, 40, documents)
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    for d, length in enumerate(lengths):
        tokens = numpy.full(length, first_token + d, dtype=numpy.int64)
        tokens[-1] = EOD
        builder.add_item(tokens)
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def label_documents(batch: Any, first_token: int) -> numpy.ndarray:
    """The document of each label, read from the tokens (an EOD belongs to the token
    before it); -1 where it cannot be told (another corpus)."""
    labels, tokens = batch["labels"].numpy(), batch["tokens"].numpy()
    owner = numpy.where(labels == EOD, tokens, labels) - first_token
    return numpy.where((owner >= 0) & (owner < 100), owner, -1)


@pytest.fixture(scope="module")
def blend(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("blocked")
    a = marked_corpus(root / "a", 100, 3)
    b = marked_corpus(root / "b", 100, 200)
    return a, b, build_train([a, b], root / "cache", 160, weights=[1.0, 1.0])


def test_blocked_documents_have_no_loss_and_nothing_else_changes(blend: Any) -> None:
    a, b, data = blend
    blocked = [f"{a}:5", f"{a}:7", f"{b}:5"]
    base = list(loader(data))
    got = list(loader(data, block_documents=blocked))
    hits = 0
    for plain, masked in zip(base, got, strict=True):
        for name in ("tokens", "labels", "position_ids"):
            assert torch.equal(plain[name], masked[name])
        in_a = label_documents(plain, 3)
        in_b = label_documents(plain, 200)
        hit = numpy.isin(in_a, [5, 7]) | (in_b == 5)
        hits += int(hit.sum())
        assert (masked["loss_mask"].numpy()[hit] == 0).all()
        assert numpy.array_equal(
            masked["loss_mask"].numpy()[~hit], plain["loss_mask"].numpy()[~hit]
        )
    assert hits > 10  # the blocked documents were trained on without the list


def test_block_list_from_a_file_is_in_the_state(blend: Any, tmp_path: Path) -> None:
    a, b, data = blend
    listing = tmp_path / "blocked.txt"
    listing.write_text(f"# spikes\n{b}:5\n\n{a}:7\n{a}:5\n")
    from_file = loader(data, block_documents=str(listing))
    from_list = loader(data, block_documents=[f"{a}:5", f"{a}:7", f"{b}:5"])
    state = from_file.state_dict()
    assert (
        state["dataset"]["blocked_documents"]
        == from_list.state_dict()["dataset"]["blocked_documents"]
    )
    assert state["dataset"]["blocked_documents"] is not None
    from_list.load_state_dict(state)  # the same list in another order: accepted
    for other in (loader(data), loader(data, block_documents=[f"{a}:5"])):
        with pytest.raises(ConfigError, match="block_documents"):
            other.load_state_dict(state)
        other.load_state_dict(state, allow_data_change=True)  # deliberate: accepted


def test_bad_block_entries_are_refused(blend: Any, tmp_path: Path) -> None:
    a, _, data = blend
    for bad, match in (
        ([f"{a}"], "PREFIX:document_id"),
        ([f"{a}:x"], "PREFIX:document_id"),
        ([str(tmp_path / "other:3")], "reads no prefix"),
        (str(tmp_path / "missing.txt"), "cannot read"),
        ([3], "must be a list"),
        ([f"{a}:100"], "has 100 sequences"),
    ):
        with pytest.raises(ConfigError, match=match):
            loader(data, block_documents=bad)


def test_cyclic_range_across_an_epoch_boundary(train: Any) -> None:
    """240 samples, 4 per step: an epoch is 60 steps; skip 55-64 and resume inside it."""
    ranks = dict(data_parallel_rank=0, data_parallel_size=2)
    base = steps(loader(train, "cyclic", **ranks), 90)
    assert not numpy.array_equal(base[0], base[60])  # epoch 1 is another order
    first = loader(train, "cyclic", skip_batches=[(55, 65)], **ranks)
    head = steps(first, 54)
    resumed = loader(train, "cyclic", **ranks)
    resumed.load_state_dict(first.state_dict())
    tail = steps(resumed, 20)
    assert same(head + tail, expected(base, set(range(55, 65)), 74))
    assert resumed.consumed_samples == (74 + 10) * 4


def test_a_state_from_before_the_quarantine_loads_as_skipping_nothing(train: Any) -> None:
    first = loader(train)
    head = steps(first, 3)
    dropped = ("skip_batches", "sources", "mixture")  # /2 had neither
    old = {k: v for k, v in first.state_dict().items() if k not in dropped}
    old["format"] = "tokenloom.training.loader/2"
    old["dataset"] = {k: v for k, v in old["dataset"].items() if k != "blocked_documents"}
    resumed = loader(train, skip_batches=[(5, 6)])
    resumed.load_state_dict(old)
    base = steps(loader(train), 10)
    assert same(head + steps(resumed, 5), base[:5] + base[6:9])


@pytest.mark.distributed
@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["single", "cyclic"])
def test_gloo_ranks_skip_the_same_steps_across_a_restart(tmp_path: Path, kind: str) -> None:
    """DP 2 on a real gloo group (rank 1 with a DataLoader worker): every rank's batches
    are the unskipped run's at every served step, before and after a restart."""
    from tests.support import distributed_harness as harness

    prefix = write_corpus(tmp_path / "a", 300, seed=3)
    results = harness.launch(
        str(Path(__file__).with_name("_quarantine_worker.py")),
        kind,
        tmp_path,
        2,
        timeout=200,
        env_extra={"QUARANTINE_PREFIX": prefix},
    )
    assert [r["same"] for r in results] == [True, True]
    assert results[0]["served"] == results[1]["served"]  # gathered over gloo

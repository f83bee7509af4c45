"""Loaders over ``shuffle_mode="bijection"`` datasets (a blend of two real prefixes):
a resumed loader gives the batches of an uninterrupted one, and a state saved over the
exact shuffle is refused (the mode is part of the dataset's fingerprint)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from tests.training._data import build_train, write_corpus

from tokenloom.errors import ConfigError
from tokenloom.training import build_pretraining_data_loader
from tokenloom.training.state import dataset_fingerprint

torch = pytest.importorskip("torch")

KINDS = {
    "cyclic": dict(dataloader_type="cyclic", micro_batch_size=4, data_sharding=True),
    "single": dict(dataloader_type="single", micro_batch_size=4),
    "elastic": dict(dataloader_type="elastic", micro_batch_size=4, global_batch_size=8, seed=11),
}


def take(iterator: Any, count: int) -> list[list[tuple]]:
    return [[tuple(r) for r in next(iterator)["tokens"].tolist()] for _ in range(count)]


@pytest.fixture(scope="module")
def blend(tmp_path_factory: Any) -> tuple[list[str], Path]:
    root = tmp_path_factory.mktemp("blend")
    return [write_corpus(root / "a", 120, 1), write_corpus(root / "b", 90, 2)], root


@pytest.mark.parametrize("kind", list(KINDS))
def test_resume_gives_the_same_batches(blend: Any, kind: str) -> None:
    prefixes, root = blend
    mode = dict(weights=[0.6, 0.4], shuffle_mode="bijection")
    data = build_train(prefixes, root / "cache", 300, **mode)
    continuous = take(iter(build_pretraining_data_loader(data, 0, **KINDS[kind])), 12)
    first = build_pretraining_data_loader(data, 0, **KINDS[kind])
    head = take(iter(first), 5)
    state = pickle.loads(pickle.dumps(first.state_dict()))
    again = build_train(prefixes, root / "cache", 300, **mode)  # from the cache
    second = build_pretraining_data_loader(again, 0, **KINDS[kind])
    second.load_state_dict(state)
    assert head + take(iter(second), 7) == continuous


def test_an_exact_state_is_refused(blend: Any) -> None:
    prefixes, root = blend
    exact = build_train(prefixes, root / "cache", 300, weights=[0.6, 0.4])
    bij = build_train(prefixes, root / "cache", 300, weights=[0.6, 0.4], shuffle_mode="bijection")
    assert len(exact) == len(bij)
    before, after = dataset_fingerprint(exact), dataset_fingerprint(bij)
    assert before["description_hash"] != after["description_hash"]
    loader = build_pretraining_data_loader(exact, 0, **KINDS["cyclic"])
    take(iter(loader), 2)
    state = loader.state_dict()
    other = build_pretraining_data_loader(bij, 0, **KINDS["cyclic"])
    with pytest.raises(ConfigError, match="description"):
        other.load_state_dict(state)
    # and the two modes serve other batches (another order)
    fresh = build_pretraining_data_loader(exact, 0, **KINDS["cyclic"])
    assert take(iter(fresh), 4) != take(
        iter(build_pretraining_data_loader(bij, 0, **KINDS["cyclic"])), 4
    )

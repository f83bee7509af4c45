"""A loader state of the wrong shape or types: one clear ConfigError naming the field.

The explicit cases name the field path in the message; the property test mutates valid
states at random (wrong types, missing and extra keys, negative, NaN and huge numbers,
deep nesting, numpy integers, other mapping types) and holds that a load either raises
that one ConfigError or serves exactly the batches of the run at the loaded position.
"""

from __future__ import annotations

import copy
import math
import pickle
from collections import OrderedDict
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.training._data import IndexDataset, build_train, write_corpus

from tokenloom.errors import ConfigError
from tokenloom.training import build_pretraining_data_loader

torch = pytest.importorskip("torch")

BATCHES_BEFORE_SAVE = 5
NEXT = 6
KINDS: dict[str, dict[str, Any]] = {
    "single": dict(dataloader_type="single"),
    "single-hybrid": dict(
        dataloader_type="single", hybrid_context_parallel=True, global_batch_size=8
    ),
    "cyclic-sharded": dict(dataloader_type="cyclic", data_sharding=True),
    "cyclic-unsharded-drift": dict(
        dataloader_type="cyclic", data_sharding=False, micro_batch_size=1, data_parallel_size=4
    ),
    "elastic": dict(dataloader_type="elastic", global_batch_size=8, seed=11),
    "files-cyclic": dict(dataloader_type="cyclic", data_sharding=False),
}


_REAL: dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def real_files(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A blend over two real pairs (so the state's ``files`` holds two identities)."""
    root = tmp_path_factory.mktemp("state")
    prefixes = [write_corpus(root / "a", 120, 1), write_corpus(root / "b", 80, 2)]
    _REAL["dataset"] = build_train(prefixes, root / "cache", 60, weights=[0.5, 0.5])
    yield
    _REAL.clear()
    stream.cache_clear()
    saved.cache_clear()


def make(kind: str, consumed: int = 0) -> Any:
    data = _REAL["dataset"] if kind.startswith("files") else IndexDataset(30)
    kwargs = dict(
        dict(micro_batch_size=2, data_parallel_rank=1, data_parallel_size=2), **KINDS[kind]
    )
    if kind == "cyclic-unsharded-drift":
        kwargs["data_parallel_rank"] = 0
    return build_pretraining_data_loader(data, consumed, **kwargs)


def rows(batch: Any) -> list:
    if isinstance(batch, list):  # hybrid CP: one dict per sample
        return [sample["tokens"].tolist() for sample in batch]
    return batch["tokens"].tolist()


@cache
def stream(kind: str) -> tuple:
    """``(consumed before, rows)`` of the first 40 batches of a run from 0."""
    loader = make(kind)
    out, iterator = [], iter(loader)
    for _ in range(40):
        before = loader.consumed_samples
        try:
            out.append((before, rows(next(iterator))))
        except StopIteration:
            break
    return tuple(out)


@cache
def saved(kind: str) -> bytes:
    loader = make(kind)
    iterator = iter(loader)
    for _ in range(BATCHES_BEFORE_SAVE):
        next(iterator, None)  # the hybrid kind ends after 3: its state is at the end
    return pickle.dumps(loader.state_dict())


def state_of(kind: str) -> dict:
    return pickle.loads(saved(kind))


def next_batches(loader: Any) -> list:
    iterator, out = iter(loader), []
    for _ in range(NEXT):
        try:
            out.append(rows(next(iterator)))
        except StopIteration:
            break
    return out


def expected_at(kind: str, consumed: int) -> list:
    """What the run serves from ``consumed`` on."""
    if KINDS[kind]["dataloader_type"] == "cyclic":
        positions = [before for before, _ in stream(kind)]
        assert consumed in positions, (kind, consumed)  # a load elsewhere would be wrong
        start = positions.index(consumed)
        return [batch for _, batch in stream(kind)[start : start + NEXT]]
    if KINDS[kind]["dataloader_type"] == "single" and consumed >= 30:
        return []
    return next_batches(make(kind, consumed))


def deep(depth: int, mapping: bool = False) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = {"x": value} if mapping else [value]
    return value


def _set(state: dict, path: tuple, value: Any) -> None:
    target = state
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


Mutate = Callable[[dict], None]
EXPLICIT: list[tuple[str, Mutate, str]] = [
    (
        "dataset-str",
        lambda s: _set(s, ("dataset",), "abc"),
        "state[\"dataset\"] = 'abc': must be a dict",
    ),
    (
        "length-str",
        lambda s: _set(s, ("dataset", "length"), "x"),
        'state["dataset"]["length"] = \'x\'',
    ),
    (
        "consumed-str",
        lambda s: _set(s, ("consumed_samples",), "x"),
        "state[\"consumed_samples\"] = 'x': must be an integer >= 0",
    ),
    (
        "consumed-nan",
        lambda s: _set(s, ("consumed_samples",), math.nan),
        'state["consumed_samples"] = nan',
    ),
    (
        "consumed-bool",
        lambda s: _set(s, ("consumed_samples",), True),
        'state["consumed_samples"] = True',
    ),
    (
        "consumed-negative",
        lambda s: _set(s, ("consumed_samples",), -4),
        'state["consumed_samples"] = -4',
    ),
    (
        "consumed-huge",
        lambda s: _set(s, ("consumed_samples",), 10**10000),
        'state["consumed_samples"] = an integer of 33220 bits',
    ),
    (
        "pass-deep",
        lambda s: _set(s, ("pass_batches",), deep(50_000)),
        'state["pass_batches"] = [[[[...]]]]',
    ),
    (
        "files-list",
        lambda s: _set(s, ("dataset", "files"), ["a"]),
        'state["dataset"]["files"] = [\'a\']',
    ),
    (
        "identity-str",
        lambda s: _set(s, ("dataset", "files"), {"p": "x"}),
        'state["dataset"]["files"]["p"] = \'x\'',
    ),
    (
        "identity-field-float",
        lambda s: _set(s, ("dataset", "files"), {"p": {"bin": {"size": 1.5}}}),
        'state["dataset"]["files"]["p"]["bin"]["size"] = 1.5',
    ),
    ("seed-missing", lambda s: s.pop("seed"), 'state["seed"] is missing'),
    ("extra-key", lambda s: _set(s, ("extra",), 1), 'state["extra"] is not a field'),
    ("extra-nested", lambda s: _set(s, ("dataset", 7), 1), 'state["dataset"][7] is not a field'),
    ("format-int", lambda s: _set(s, ("format",), 2), 'state["format"] = 2'),
    ("rank-past-size", lambda s: _set(s, ("data_parallel_rank",), 2), "smaller than"),
    ("drop-last-str", lambda s: _set(s, ("drop_last",), "yes"), "state[\"drop_last\"] = 'yes'"),
    ("type-unknown", lambda s: _set(s, ("dataloader_type",), "random"), 'state["dataloader_type"]'),
    ("gbs-zero", lambda s: _set(s, ("global_batch_size",), 0), 'state["global_batch_size"] = 0'),
]


@pytest.mark.parametrize("name, mutate, words", EXPLICIT, ids=[case[0] for case in EXPLICIT])
def test_a_wrong_field_is_one_error_naming_its_path(name: str, mutate: Mutate, words: str) -> None:
    state = state_of("cyclic-sharded")
    mutate(state)
    with pytest.raises(ConfigError) as error:
        make("cyclic-sharded").load_state_dict(state)
    assert words in str(error.value)
    assert "\n" not in str(error.value) and len(str(error.value)) < 1000


def test_numpy_integers_and_other_mappings_are_accepted() -> None:
    state = state_of("cyclic-sharded")
    state = OrderedDict(
        (key, numpy.int64(value) if type(value) is int else value) for key, value in state.items()
    )
    loader = make("cyclic-sharded")
    loader.load_state_dict(state)
    assert next_batches(loader) == expected_at("cyclic-sharded", 5 * 4)


WEIRD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**63 - 1, 2**63, -(2**63)]),
    st.builds(lambda: 10**5000),  # too many digits for str(): messages must not format it
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.binary(max_size=6),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
    st.builds(deep, st.integers(1, 20_000), st.booleans()),
    st.builds(numpy.int64, st.integers(-(2**63), 2**63 - 1)),
    st.floats(width=32, allow_nan=True).map(numpy.float32),
)
KEYS = st.one_of(st.text(max_size=4), st.integers(), st.none(), st.sampled_from(["format", "seed"]))


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(value, dict) and len(prefix) < 6:  # the schema is 5 deep
        for key, inner in value.items():
            found += paths(inner, (*prefix, key))
    return found


def _get(state: Any, path: tuple) -> Any:
    for key in path:
        state = state[key]
    return state


def mutate(data: st.DataObject, state: dict) -> Any:
    """Apply one random mutation; returns the (possibly replaced) state."""
    path = data.draw(st.sampled_from(paths(state)))
    value = _get(state, path)
    actions = ["replace", "add" if isinstance(value, dict) else "replace"]
    actions += ["delete"] if path else []
    if type(value) is int:
        actions += ["nudge"] + (["numpy"] if -(2**63) <= value < 2**63 else [])
    if isinstance(value, dict):
        actions += ["ordered"]
    action = data.draw(st.sampled_from(actions))
    if action == "replace":
        new: Any = data.draw(WEIRD)
    elif action == "add":
        value[data.draw(KEYS)] = data.draw(WEIRD)
        return state
    elif action == "delete":
        del _get(state, path[:-1])[path[-1]]
        return state
    elif action == "nudge":
        new = value + data.draw(st.sampled_from([-4, -1, 1, 2, 4, 8, 2**62, -(2**62)]))
    elif action == "numpy":
        new = numpy.int64(value)
    else:
        new = OrderedDict(value)
    if not path:
        return new
    _set(state, path, new)
    return state


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(kind=st.sampled_from(list(KINDS)), count=st.integers(1, 3), data=st.data())
def test_mutated_states_give_one_clear_error_or_the_runs_batches(
    kind: str, count: int, data: st.DataObject
) -> None:
    state: Any = copy.deepcopy(state_of(kind))
    for _ in range(count):
        if not isinstance(state, dict):
            break
        state = mutate(data, state)
    loader = make(kind)
    try:
        loader.load_state_dict(state)
    except ConfigError as error:
        text = str(error)
        assert text and "\n" not in text and len(text) < 2000, text
        event("refused")
        return
    event("loaded")
    expected = expected_at(kind, loader.consumed_samples)
    assert next_batches(loader) == expected

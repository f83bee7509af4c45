"""A Megatron-LM run resumes with a changed mixture through the compat layer's builder.

The train split under ``TOKENLOOM_MIXTURE_CHANGE`` is, from ``consumed_samples`` on
(where Megatron's sequential sampler starts after a resume), the continued mixture that
:func:`tokenloom.training.mixture.continue_blend` gives on tokenloom's own builds of the
same configs: each continuing source carries on in its old order from its next
unconsumed sample, an added one starts at 0, a removed one is never drawn. Golden
corpora, real compat classes (and megatron-core's names in a subprocess).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy
import pytest
from tests.support.megatron_core import require_megatron, run_json

from tokenloom import errors
from tokenloom.builder import BlendedMegatronDatasetBuilder as NativeBuilder
from tokenloom.datasets import GPTDataset as NativeGPT
from tokenloom.datasets import GPTDatasetConfig as NativeConfig
from tokenloom.megatron.datasets.blended_megatron_dataset_builder import (
    BlendedMegatronDatasetBuilder,
)
from tokenloom.megatron.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from tokenloom.training.megatron_resume import ENVIRONMENT_VARIABLE, ContinuedTrainSplit
from tokenloom.training.mixture import continue_blend

OLD_SAMPLES, NEW_SAMPLES, CONSUMED = 2000, 200, 50  # old: c0 in 2 epochs


def _config(cls: type, cache: Path, blend: tuple, **extra: Any) -> Any:
    return cls(
        random_seed=1234,
        sequence_length=32,
        blend=blend,
        split="90,10,0",
        tokenizer={"vocab_size": 32000, "eod": 2},
        path_to_cache=str(cache),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        **extra,
    )


@pytest.fixture
def corpora(golden_dir: Path) -> list[str]:
    return [str(golden_dir / "corpora" / f"c{i}") for i in range(3)]


def _change(tmp_path: Path, corpora: list[str], **top: Any) -> Path:
    """Old run: c0:c1 = 1:1, 2000 train samples, 50 consumed."""
    data = {
        "allow_mixture_change": True,
        "consumed_samples": CONSUMED,
        "old": {"data_path": ["1", corpora[0], "1", corpora[1]], "train_samples": OLD_SAMPLES},
    }
    data.update(top)
    path = tmp_path / "change.json"
    path.write_text(json.dumps({k: v for k, v in data.items() if v is not None}))
    return path


def _build_new(tmp_path: Path, corpora: list[str]) -> list:
    """New run: c0:c2 = 1:3 (c1 removed, c2 added), 200 train samples."""
    config = _config(GPTDatasetConfig, tmp_path / "cache", ([corpora[0], corpora[2]], [1.0, 3.0]))
    return BlendedMegatronDatasetBuilder(
        GPTDataset, [NEW_SAMPLES, 8, 0], lambda: True, config
    ).build()


def _native(tmp_path: Path, blend: tuple, samples: int, **extra: Any) -> Any:
    config = _config(NativeConfig, tmp_path / "native", blend, **extra)
    return NativeBuilder(NativeGPT, [samples, 0, 0], lambda: True, config).build()[0]


def test_the_train_split_continues_each_source(tmp_path, corpora, monkeypatch, caplog):
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(_change(tmp_path, corpora)))
    with caplog.at_level(logging.INFO, logger="tokenloom.training.mixture"):
        train, valid, _ = _build_new(tmp_path, corpora)
    assert isinstance(train, ContinuedTrainSplit)
    old = _native(tmp_path, ([corpora[0], corpora[1]], [1.0, 1.0]), OLD_SAMPLES)
    new = _native(tmp_path, ([corpora[0], corpora[2]], [1.0, 3.0]), NEW_SAMPLES)
    assert len(train) == len(new) and len(valid) > 0
    kept = int((old.dataset_index[:CONSUMED] == 0).sum())
    assert f"{corpora[0]}: continues (from sample {kept})" in caplog.text
    assert f"{corpora[1]}: stops (after {CONSUMED - kept} samples)" in caplog.text
    assert f"{corpora[2]}: starts (at sample 0)" in caplog.text
    want = continue_blend(
        old, CONSUMED, {corpora[0]: 1.0, corpora[2]: 3.0}, len(new) - CONSUMED,
        added={corpora[2]: new.datasets[1]},
    )  # fmt: skip
    for idx in range(CONSUMED):  # what the sampler skips: the old blend's samples
        assert numpy.array_equal(train[idx]["tokens"].numpy(), old[idx]["tokens"])
    # the old run's order of c0 is not the new config's (so continuing in it matters)
    assert any(
        not numpy.array_equal(old.datasets[0][k]["tokens"], new.datasets[0][k]["tokens"])
        for k in range(kept, kept + 10)
    )
    nxt = {corpora[0]: kept, corpora[2]: 0}
    for idx in range(CONSUMED, len(train)):
        got = train[idx]
        source, sample = train.position(idx)
        assert sample == nxt[source]  # each source from its next unconsumed sample
        nxt[source] += 1
        order = old.datasets[0] if source == corpora[0] else new.datasets[1]
        assert numpy.array_equal(got["tokens"].numpy(), order[sample]["tokens"])
        assert numpy.array_equal(got["tokens"].numpy(), want[idx - CONSUMED]["tokens"])
        assert int(got["dataset_id"]) == [corpora[0], corpora[2]].index(source)
    assert sum(nxt.values()) - kept == len(train) - CONSUMED  # c1 never drawn
    with pytest.raises(IndexError):
        train[len(train)]


def test_a_source_past_its_old_dataset_and_a_new_schedule(tmp_path, corpora, monkeypatch, caplog):
    """The new run draws c0 past its old dataset (958 samples for an old run of 60): c0
    goes on into a further round of that dataset in the same order, as the loader's path
    does; the new config's blend_schedule is followed from the resume, which falls inside
    its linear ramp. Checked against the brute-force streams of the training tests."""
    from tests.training._mixture_reference import Streams, ramp_tail

    old_samples, new_samples = 60, 1400
    old = {"data_path": ["1", corpora[0], "1", corpora[1]], "train_samples": old_samples}
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(_change(tmp_path, corpora, old=old)))
    schedule = [(0, [1.0, 1.0]), (30, [4.0, 1.0], "linear"), (120, [9.0, 1.0])]
    blend = ([corpora[0], corpora[2]], [4.0, 1.0])
    config = _config(GPTDatasetConfig, tmp_path / "cache", blend, blend_schedule=schedule)
    with caplog.at_level(logging.INFO, logger="tokenloom.training.mixture"):
        train = BlendedMegatronDatasetBuilder(
            GPTDataset, [new_samples, 0, 0], lambda: True, config
        ).build()[0]
    assert isinstance(train, ContinuedTrainSplit)
    old_blend = _native(tmp_path, ([corpora[0], corpora[1]], [1.0, 1.0]), old_samples)
    new_blend = _native(tmp_path, blend, new_samples, blend_schedule=schedule)  # c2's order
    streams = Streams()
    streams.datasets = {corpora[0]: old_blend.datasets[0], corpora[2]: new_blend.datasets[1]}
    streams.next = {corpora[0]: int((old_blend.dataset_index[:CONSUMED] == 0).sum()), corpora[2]: 0}
    order = ramp_tail(schedule, CONSUMED, len(train) - CONSUMED)
    for j, which in enumerate(order):
        want = streams.pop(blend[0][which])
        assert numpy.array_equal(train[CONSUMED + j]["tokens"].numpy(), want), j
    assert streams.next[corpora[0]] > len(old_blend.datasets[0])  # a further round
    assert f"{corpora[0]} runs past its dataset of {len(old_blend.datasets[0])}" in caplog.text


def test_moved_pairs_continue_under_their_new_paths(tmp_path, corpora, monkeypatch):
    """Pairs moved between the runs: the change file's old data_path names them where
    they are now. A source's order does not depend on its path, so the continued split
    is the one the unmoved pairs give."""
    import shutil

    moved = []
    for i in range(3):
        (tmp_path / "moved").mkdir(exist_ok=True)
        target = str(tmp_path / "moved" / f"c{i}")
        for suffix in (".bin", ".idx"):
            shutil.copy2(corpora[i] + suffix, target + suffix)
        moved.append(target)
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(_change(tmp_path, corpora)))
    train = _build_new(tmp_path, corpora)[0]
    old = {"data_path": ["1", moved[0], "1", moved[1]], "train_samples": OLD_SAMPLES}
    (tmp_path / "m").mkdir()
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(_change(tmp_path / "m", moved, old=old)))
    there = _build_new(tmp_path / "m", moved)[0]
    assert len(there) == len(train)
    for idx in range(CONSUMED, len(train)):
        assert numpy.array_equal(there[idx]["tokens"].numpy(), train[idx]["tokens"].numpy())
    assert there.position(CONSUMED)[0] in moved


def test_without_the_variable_the_train_split_is_the_new_blend(tmp_path, corpora, monkeypatch):
    monkeypatch.delenv(ENVIRONMENT_VARIABLE, raising=False)
    train = _build_new(tmp_path, corpora)[0]
    assert not isinstance(train, ContinuedTrainSplit)
    new = _native(tmp_path, ([corpora[0], corpora[2]], [1.0, 3.0]), NEW_SAMPLES)
    assert numpy.array_equal(train[CONSUMED]["tokens"].numpy(), new[CONSUMED]["tokens"])


BAD = [
    ({"allow_mixture_change": None}, "allow_mixture_change=None: a resume with a changed"),
    ({"allow_mixture_change": "yes"}, "allow_mixture_change='yes'"),
    ({"consumed_samples": -1}, "consumed_samples=-1: must be an integer >= 0"),
    ({"consumed_samples": "50"}, "consumed_samples='50': must be an integer"),
    ({"consumed_samples": 9999}, "consumed_samples=9999: past the old train blend's"),
    ({"old": {"data_path": ["a"], "train_samples": 0}}, "old.train_samples=0: must be"),
    ({"old": {"data_path": ["a"], "tokens": 3}}, "old.tokens=3: unknown setting"),
    ({"old": {"train_samples": 5}}, "old.blend=None: give the old run's data_path"),
    ({"old": {"data_path": ["a"]}}, "old.train_samples=None: give it"),
    ({"extra": 1}, "extra=1: unknown setting"),
]


@pytest.mark.parametrize(("top", "needle"), BAD)
def test_bad_change_files_are_config_errors_naming_field_and_value(
    tmp_path, corpora, monkeypatch, top, needle
):
    path = _change(tmp_path, corpora, **top)
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(path))
    with pytest.raises(AssertionError) as caught:  # the compat layer's flavour
        _build_new(tmp_path, corpora)
    assert isinstance(caught.value, errors.ConfigError)
    assert needle in str(caught.value) and str(path) in str(caught.value)


def test_an_unreadable_file_and_an_unsupported_new_config(tmp_path, corpora, monkeypatch):
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(tmp_path / "missing.json"))
    with pytest.raises(errors.ConfigError, match="missing.json: cannot read it"):
        _build_new(tmp_path, corpora)
    (tmp_path / "bad.json").write_text("{not json")
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(tmp_path / "bad.json"))
    with pytest.raises(errors.ConfigError, match="bad.json"):
        _build_new(tmp_path, corpora)
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(_change(tmp_path, corpora)))
    config = _config(GPTDatasetConfig, tmp_path / "cache", ([corpora[0], corpora[2]], None))
    with pytest.raises(errors.ConfigError, match="needs weights"):
        BlendedMegatronDatasetBuilder(GPTDataset, [NEW_SAMPLES, 8, 0], lambda: True, config).build()


@pytest.mark.megatron
@pytest.mark.timeout(600)
def test_an_unchanged_script_under_the_launcher(tmp_path, corpora):
    """``python -m tokenloom.megatron --mixture-change FILE script.py``: megatron's names."""
    require_megatron()
    script = tmp_path / "script.py"
    script.write_text(
        "import json, sys, types\n"
        "from megatron.core.datasets.blended_megatron_dataset_builder import "
        "BlendedMegatronDatasetBuilder\n"
        "from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig\n"
        "tok = types.SimpleNamespace(vocab_size=32000, eod=2, unique_identifiers={'t': 1})\n"
        "c0, c2, cache = sys.argv[1:4]\n"
        "config = GPTDatasetConfig(random_seed=1234, sequence_length=32,\n"
        "    blend=([c0, c2], [1.0, 3.0]), split='90,10,0', tokenizer=tok,\n"
        "    path_to_cache=cache, reset_position_ids=False, reset_attention_mask=False,\n"
        "    eod_mask_loss=False)\n"
        f"train = BlendedMegatronDatasetBuilder(GPTDataset, [{NEW_SAMPLES}, 8, 0],\n"
        "    lambda: True, config).build()[0]\n"
        f"print(json.dumps([train[i]['tokens'].tolist() for i in range({CONSUMED}, len(train))]))\n"
    )
    change = _change(tmp_path, corpora)
    launcher = (
        "import sys; from tokenloom.megatron.__main__ import main; sys.exit(main(sys.argv[1:]))"
    )
    got = run_json(
        launcher, "--mixture-change", str(change), str(script),
        corpora[0], corpora[2], str(tmp_path / "cache"), timeout=600,
    )  # fmt: skip
    old = _native(tmp_path, ([corpora[0], corpora[1]], [1.0, 1.0]), OLD_SAMPLES)
    new = _native(tmp_path, ([corpora[0], corpora[2]], [1.0, 3.0]), NEW_SAMPLES)
    want = continue_blend(
        old, CONSUMED, {corpora[0]: 1.0, corpora[2]: 3.0}, len(new) - CONSUMED,
        added={corpora[2]: new.datasets[1]},
    )  # fmt: skip
    assert len(got) == len(want)
    assert all(g == want[j]["tokens"].tolist() for j, g in enumerate(got))


def test_the_launcher_checks_the_file_before_the_script(tmp_path, capsys, monkeypatch):
    from tokenloom.megatron.__main__ import main

    monkeypatch.delenv(ENVIRONMENT_VARIABLE, raising=False)
    path = tmp_path / "change.json"
    path.write_text(json.dumps({"consumed_samples": 1}))
    assert main(["--mixture-change", str(path), str(tmp_path / "never_run.py")]) == 2
    assert "allow_mixture_change=None: a resume with a changed mixture" in capsys.readouterr().err
    assert main(["--mixture-change"]) == 2


def _saved_state(tmp_path: Path, corpora: list[str]) -> dict:
    """A real loader state: tokenloom's loader over the old blend, 5 batches of 10 read."""
    from tokenloom.training import build_pretraining_data_loader

    old = _native(tmp_path, ([corpora[0], corpora[1]], [1.0, 1.0]), OLD_SAMPLES)
    loader = build_pretraining_data_loader(old, 0, micro_batch_size=10)
    batches = iter(loader)
    for _ in range(CONSUMED // 10):
        next(batches)
    state = loader.state_dict()
    assert state["consumed_samples"] == CONSUMED
    return state


def test_a_loader_state_file_gives_the_consumed_count(tmp_path, corpora, monkeypatch):
    state = _saved_state(tmp_path, corpora)
    (tmp_path / "state.json").write_text(json.dumps(state))
    change = _change(tmp_path, corpora, consumed_samples=None, state=str(tmp_path / "state.json"))
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(change))
    train = _build_new(tmp_path, corpora)[0]
    assert train.consumed == CONSUMED
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(_change(tmp_path, corpora)))
    by_count = _build_new(tmp_path, corpora)[0]
    for idx in (CONSUMED, CONSUMED + 1, len(train) - 1):
        assert numpy.array_equal(train[idx]["tokens"], by_count[idx]["tokens"])


def test_a_state_file_follows_moved_pairs(tmp_path, corpora, monkeypatch, caplog):
    """The state was saved over the pairs where they were; they moved (``cp -p``: same
    identity), and the change file's old data_path names them where they are now. The
    state's files and per-source counts follow the move; a copy with a new mtime is no
    move, so its state is refused as other files."""
    import shutil

    state = _saved_state(tmp_path, corpora)
    (tmp_path / "state.json").write_text(json.dumps(state))
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(_change(tmp_path, corpora)))
    by_count = _build_new(tmp_path, corpora)[0]
    for name, copy in (("moved", shutil.copy2), ("copied", shutil.copy)):
        (tmp_path / name).mkdir()
        there = [str(tmp_path / name / f"c{i}") for i in range(3)]
        for i in range(3):
            for suffix in (".bin", ".idx"):
                copy(corpora[i] + suffix, there[i] + suffix)
        old = {"data_path": ["1", there[0], "1", there[1]], "train_samples": OLD_SAMPLES}
        change = _change(
            tmp_path / name, there, consumed_samples=None, state=str(tmp_path / "state.json"),
            old=old,
        )  # fmt: skip
        monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(change))
        if name == "copied":
            with pytest.raises(errors.ConfigError, match="read other data files"):
                _build_new(tmp_path / name, there)
            continue
        with caplog.at_level(logging.INFO, logger="tokenloom.training.saved_run"):
            train = _build_new(tmp_path / name, there)[0]
        assert f"{there[1]} is the saved run's {corpora[1]}, moved" in caplog.text
        assert train.consumed == CONSUMED
        for idx in range(CONSUMED, len(train)):
            assert numpy.array_equal(train[idx]["tokens"], by_count[idx]["tokens"])


def test_a_state_of_other_settings_or_files_is_refused(tmp_path, corpora, monkeypatch):
    state = _saved_state(tmp_path, corpora)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    old = {"data_path": ["1", corpora[0], "1", corpora[1]], "train_samples": OLD_SAMPLES + 8}
    change = _change(tmp_path, corpora, consumed_samples=None, state=str(path), old=old)
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(change))
    with pytest.raises(errors.ConfigError, match="the 'old' settings are not the saved run's"):
        _build_new(tmp_path, corpora)
    prefix = corpora[1]
    state["dataset"]["files"][prefix]["bin"]["size"] += 1  # as if c1.bin were regenerated
    path.write_text(json.dumps(state))
    change = _change(tmp_path, corpora, consumed_samples=None, state=str(path))
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(change))
    with pytest.raises(errors.ConfigError, match=f"read other data files: {prefix}: .bin: size"):
        _build_new(tmp_path, corpora)
    change = _change(
        tmp_path, corpora, consumed_samples=None, state=str(path), allow_data_change=True
    )
    assert _build_new(tmp_path, corpora)[0].consumed == CONSUMED
    change = _change(tmp_path, corpora, state=str(path))  # both given
    with pytest.raises(
        errors.ConfigError,
        match="consumed_samples=50: give exactly one of consumed_samples and state",
    ):
        _build_new(tmp_path, corpora)


def test_a_state_s_own_counts_and_continuations_are_checked(tmp_path, corpora, monkeypatch):
    state = _saved_state(tmp_path, corpora)
    assert sum(s["consumed"] for s in state["sources"].values()) == CONSUMED  # a /4 state
    path = tmp_path / "state.json"
    change = _change(tmp_path, corpora, consumed_samples=None, state=str(path))
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(change))
    edited = json.loads(json.dumps(state))
    edited["sources"][corpora[0]]["consumed"] += 1
    path.write_text(json.dumps(edited))
    with pytest.raises(errors.ConfigError, match=f"counts .* consumed samples of '{corpora[0]}'"):
        _build_new(tmp_path, corpora)
    edited = json.loads(json.dumps(state))
    edited["mixture"] = {"resume_at": 10, "start": {corpora[0]: 5}}
    path.write_text(json.dumps(edited))
    with pytest.raises(errors.ConfigError, match="state.mixture=.*itself continued"):
        _build_new(tmp_path, corpora)


class _Args:
    """What Megatron-LM's ``megatron.training.get_args()`` holds after a resume."""

    consumed_train_samples = CONSUMED


def _megatron_training(monkeypatch) -> None:
    """A stand-in for Megatron-LM's training package (not part of megatron-core)."""
    import sys
    import types

    module = types.ModuleType("megatron.training")
    module.get_args = lambda: _Args()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "megatron.training", module)


def test_consumed_samples_from_the_checkpoint(tmp_path, corpora, monkeypatch):
    change = _change(tmp_path, corpora, consumed_samples="checkpoint")
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(change))
    with pytest.raises(errors.ConfigError, match="consumed_samples='checkpoint': needs Megatron"):
        _build_new(tmp_path, corpora)
    _megatron_training(monkeypatch)
    assert _build_new(tmp_path, corpora)[0].consumed == CONSUMED
    change = _change(tmp_path, corpora, consumed_samples=CONSUMED + 10)
    with pytest.raises(errors.ConfigError, match=f"resumed from consumed {CONSUMED} samples"):
        _build_new(tmp_path, corpora)


def test_a_random_sampler_in_the_megatron_run_is_refused(tmp_path, corpora, monkeypatch):
    _megatron_training(monkeypatch)
    monkeypatch.setattr(_Args, "dataloader_type", "cyclic", raising=False)
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(_change(tmp_path, corpora)))
    with pytest.raises(errors.ConfigError, match="--dataloader-type 'cyclic': a mixture change"):
        _build_new(tmp_path, corpora)


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_every_rank_of_a_gloo_group_gets_the_same_continuation(tmp_path, corpora):
    """DP 2: rank 0 builds the old and new caches, rank 1 loads them; both serve
    continue_blend's samples from consumed_samples on."""
    from tests.support import distributed_harness as harness

    change = _change(tmp_path, corpora)
    env = {
        ENVIRONMENT_VARIABLE: str(change),
        "MIXTURE_C0": corpora[0],
        "MIXTURE_C2": corpora[2],
        "MIXTURE_CACHE": str(tmp_path / "cache"),
        "MIXTURE_SAMPLES": str(NEW_SAMPLES),
    }
    script = str(Path(__file__).with_name("_mixture_worker.py"))
    results = harness.launch(script, "continue", tmp_path / "ranks", 2, timeout=200, env_extra=env)
    old = _native(tmp_path, ([corpora[0], corpora[1]], [1.0, 1.0]), OLD_SAMPLES)
    new = _native(tmp_path, ([corpora[0], corpora[2]], [1.0, 3.0]), NEW_SAMPLES)
    want = continue_blend(
        old, CONSUMED, {corpora[0]: 1.0, corpora[2]: 3.0}, len(new) - CONSUMED,
        added={corpora[2]: new.datasets[1]},
    )  # fmt: skip
    expected = [want[j]["tokens"].tolist() for j in range(len(want))]
    for result in results:
        assert result is not None and result["consumed"] == CONSUMED
        assert result["tokens"] == expected

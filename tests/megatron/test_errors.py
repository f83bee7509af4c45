"""Under the compat layer, tokenloom's errors are caught as megatron-core's are.

megatron-core asserts, so code written for it catches ``AssertionError``; from a
Megatron-named entry point a tokenloom error is also one (same object, message and
traceback). tokenloom's own API is unchanged.
"""

from __future__ import annotations

import pytest

from tokenloom import errors
from tokenloom.datasets.config import GPTDatasetConfig as NativeConfig
from tokenloom.megatron.datasets.blended_megatron_dataset_builder import (
    BlendedMegatronDatasetBuilder,
)
from tokenloom.megatron.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from tokenloom.megatron.errors import FLAVOURED, megatron_flavour, raises_like_megatron

BASE = dict(
    random_seed=1,
    sequence_length=8,
    reset_position_ids=False,
    reset_attention_mask=False,
    eod_mask_loss=False,
    tokenizer={"vocab_size": 100, "eod": 0},
)


def test_a_config_error_is_also_an_assertion_error_with_tokenloom_s_message():
    with pytest.raises(AssertionError) as caught:
        GPTDatasetConfig(blend=(["a"], None), split="90,a,5", **BASE)
    assert isinstance(caught.value, errors.ConfigError)
    assert isinstance(caught.value, ValueError)
    assert "split" in str(caught.value)
    assert caught.value.__traceback__ is not None


def test_tokenloom_s_own_api_keeps_its_errors():
    with pytest.raises(errors.ConfigError) as caught:
        NativeConfig(blend=(["a"], None), split="90,a,5", **BASE)
    assert not isinstance(caught.value, AssertionError)


def test_builder_errors_are_assertion_errors(tmp_path):
    config = GPTDatasetConfig(blend=([str(tmp_path / "missing")], None), split="1,0,0", **BASE)
    with pytest.raises(AssertionError) as caught:
        BlendedMegatronDatasetBuilder(GPTDataset, [1, None, None], lambda: True, config).build()
    assert isinstance(caught.value, errors.TokenloomError)
    assert "missing" in str(caught.value)
    with pytest.raises(AssertionError):
        BlendedMegatronDatasetBuilder(GPTDataset, [1, 2], lambda: True, config)


def test_every_tokenloom_error_class_has_a_flavour():
    classes = [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, errors.TokenloomError)
    ]
    assert set(classes) <= set(FLAVOURED)
    for cls, flavoured in FLAVOURED.items():
        assert issubclass(flavoured, cls) and issubclass(flavoured, AssertionError)
        assert flavoured.__name__ == cls.__name__


def test_other_errors_pass_through_unchanged():
    error = KeyError("x")
    assert type(megatron_flavour(error)) is KeyError

    @raises_like_megatron
    def fails():
        raise errors.SampleIndexError("sample 9 out of range")

    with pytest.raises(IndexError) as caught:
        fails()
    assert isinstance(caught.value, AssertionError)
    assert raises_like_megatron(fails) is fails  # wrapping twice changes nothing

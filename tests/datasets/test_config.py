"""BlendedMegatronDatasetConfig / GPTDatasetConfig: derived fields and every ConfigError."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tokenloom.datasets import BlendedMegatronDatasetConfig, GPTDatasetConfig, SimpleTokenizer
from tokenloom.errors import ConfigError

TOK = {"vocab_size": 32000, "eod": 2}
FLAGS = dict(reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)


def gpt(**fields):
    base = dict(
        random_seed=1,
        sequence_length=8,
        blend=(["data/a"], None),
        split="98,2,0",
        tokenizer=TOK,
        **FLAGS,
    )
    base.update(fields)
    return GPTDatasetConfig(**base)


def test_megatron_field_names_and_order():
    def positional(cls):  # megatron-core's fields, in order; tokenloom's own are keyword-only
        return [f.name for f in dataclasses.fields(cls) if not f.kw_only]

    base = positional(BlendedMegatronDatasetConfig)
    assert base == [
        "random_seed",
        "sequence_length",
        "blend",
        "blend_per_split",
        "multiple_validation_sets",
        "full_validation",
        "split",
        "split_matrix",
        "num_dataset_builder_threads",
        "path_to_cache",
        "mmap_bin_files",
        "mock",
        "tokenizer",
        "mid_level_dataset_surplus",
        "allow_ambiguous_pad_tokens",
        "fast_cache_load",
        "defer_npy_index_mmap",
    ]
    assert [f.name for f in dataclasses.fields(BlendedMegatronDatasetConfig) if f.kw_only] == [
        "build_on_all_ranks",
        "blend_schedule",
        "max_epochs_per_source",
    ]
    extra = positional(GPTDatasetConfig)[len(base) :]
    assert extra == [
        "reset_position_ids",
        "reset_attention_mask",
        "eod_mask_loss",
        "create_attention_mask",
        "drop_last_partial_validation_sequence",
        "add_extra_token_to_sequence",
        "object_storage_cache_path",
        "data_parallel_size",
        "sequence_parallel_size",
        "hybrid_context_parallel",
        "sequences_per_dataset",
        "token_dtype_code",
        "context_parallel_size",
    ]
    own = [f.name for f in dataclasses.fields(GPTDatasetConfig) if f.kw_only]
    assert (
        own
        == [
            "build_on_all_ranks",
            "blend_schedule",
            "max_epochs_per_source",
            "inter_document_masking",  # Megatron-LM main's; keyword only, so 0.16.1's subclasses keep their positions
            "return_cu_seqlens",
            "return_document_ranges",
            "object_storage_config",
            "max_open_bin_files",
            "shuffle_mode",
        ]
    )
    derived = {f.name for f in dataclasses.fields(GPTDatasetConfig) if not f.init}
    assert derived == {"split_matrix", "mock", "token_dtype_code"}


def test_derived_fields():
    config = gpt()
    assert config.mock is False
    assert config.split_matrix == [(0, 0.98), (0.98, 1.0), None]
    assert config.token_dtype_code == 8
    assert isinstance(config.tokenizer, SimpleTokenizer) and config.tokenizer.eod == 2
    assert gpt(tokenizer={"vocab_size": 65536, "eod": 0}).token_dtype_code == 8
    assert gpt(tokenizer={"vocab_size": 65537, "eod": 0}).token_dtype_code == 4
    assert gpt(tokenizer={"vocab_size": None, "eod": 0}).token_dtype_code is None


def test_mock_when_no_blend():
    config = gpt(blend=None, split="99,1,0")
    assert config.mock and config.split == "1,1,1"
    assert config.split_matrix[2] == (2 / 3, 1.0)
    assert gpt(blend=None, split=None, blend_per_split=[None, None, None]).mock


def test_blend_per_split_accepted():
    config = gpt(
        blend=None, split=None, blend_per_split=[(["a", "b"], [1, 3]), None, [["c"], None]]
    )
    assert not config.mock and config.split_matrix is None
    assert config.blend_per_split[2] == (["c"], None)
    assert config.prefixes() == ["a", "b", "c"]


def test_base_config_needs_no_tokenizer():
    config = BlendedMegatronDatasetConfig(
        random_seed=0, sequence_length=4, blend=(["a"], None), split="1"
    )
    assert config.tokenizer is None and config.split_matrix == [(0, 1.0), None, None]


def test_tokenizer_object_is_kept():
    class Tok:
        vocab_size, eod, unique_identifiers = 100, 0, {"name": "tok"}

        @property
        def pad(self):
            raise NotImplementedError

    tokenizer = Tok()
    assert gpt(tokenizer=tokenizer).tokenizer is tokenizer


def test_sequences_per_dataset_and_object_storage_ok(tmp_path):
    config = gpt(sequences_per_dataset={"data/a": [5, 5]})
    assert config.sequences_for("data/a") == (5, 5) and config.sequences_for("x") is None
    config = gpt(
        blend=(["s3://bucket/a"], None),
        object_storage_cache_path=str(tmp_path),
        mmap_bin_files=False,
    )
    assert config.prefixes() == ["s3://bucket/a"]


@pytest.mark.parametrize("value", [None, False, 0, 0.0, "", {}, [], ()])
def test_any_false_sequences_per_dataset_means_none(tmp_path, value):
    """megatron-core tests ``if config.sequences_per_dataset:``: any false value is none."""
    from tests.support.dataset_files import write_corpus

    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.datasets import GPTDataset

    prefix = write_corpus(tmp_path / "c", [30] * 8)
    config = gpt(
        blend=([prefix], None), split="1", sequences_per_dataset=value, path_to_cache=tmp_path
    )
    assert config.sequences_per_dataset is None and config.sequences_for(prefix) is None
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [5, 0, 0], lambda: True, config).build()
    assert len(train) >= 5
    # even without a vocab_size, which a real sequences_per_dataset needs
    assert gpt(tokenizer={"vocab_size": None, "eod": 1}, sequences_per_dataset=value).mock is False


class NoEod:
    vocab_size = 10


CASES = {
    "seed negative": (dict(random_seed=-1), "random_seed"),
    "seed too big": (dict(random_seed=2**32), "random_seed"),
    "seed float": (dict(random_seed=1.5), "random_seed"),
    "sequence_length 0": (dict(sequence_length=0), "sequence_length"),
    "threads 0": (dict(num_dataset_builder_threads=0), "num_dataset_builder_threads"),
    "surplus negative": (dict(mid_level_dataset_surplus=-0.1), "mid_level_dataset_surplus"),
    "surplus nan": (dict(mid_level_dataset_surplus=math.nan), "mid_level_dataset_surplus"),
    "mmap not bool": (dict(mmap_bin_files="yes"), "mmap_bin_files"),
    "fast cache no path": (dict(fast_cache_load=True), "needs path_to_cache"),
    "fast cache with blend": (
        dict(fast_cache_load=True, path_to_cache="c"),
        "cannot be used with blend",
    ),
    "defer no path": (dict(defer_npy_index_mmap=True), "needs path_to_cache"),
    "per split with blend": (dict(blend_per_split=[(["a"], None), None, None]), "incompatible"),
    "per split with split": (
        dict(blend=None, blend_per_split=[(["a"], None), None, None]),
        "split and blend_per_split",
    ),
    "per split length": (
        dict(blend=None, split=None, blend_per_split=[(["a"], None)]),
        "exactly 3",
    ),
    "per split weights": (
        dict(blend=None, split=None, blend_per_split=[(["a", "b"], [1.0]), None, None]),
        "equal in number",
    ),
    "blend weights": (dict(blend=(["a", "b"], [1.0])), "equal in number"),
    "blend no split": (dict(split=None), "split must be given"),
    "blend flat list": (dict(blend=["30", "a", "70", "b"]), "get_blend_from_list"),
    "blend zero weight": (dict(blend=(["a", "b"], [1.0, 0.0])), "> 0"),
    "blend nan weight": (dict(blend=(["a"], [math.nan])), "> 0"),
    "blend empty": (dict(blend=([], None)), "non-empty"),
    "blend bad prefix": (dict(blend=([3], None)), "path string"),
    "bad split": (dict(split="98,-2"), "non-negative"),
    "no tokenizer": (dict(tokenizer=None), "needs a tokenizer"),
    "tokenizer no eod": (dict(tokenizer=NoEod()), "eod"),
    "tokenizer bad vocab": (dict(tokenizer={"vocab_size": 0, "eod": 1}), "vocab_size"),
    "tokenizer bad eod": (dict(tokenizer={"vocab_size": 5, "eod": -1}), "eod"),
    "tokenizer bad pad": (dict(tokenizer={"vocab_size": 5, "eod": 1, "pad": "x"}), "pad"),
    "tokenizer keys": (dict(tokenizer={"vocab": 5, "eod": 1}), "expected keys"),
    "reset_position_ids None": (dict(reset_position_ids=None), "reset_position_ids"),
    "reset_attention_mask None": (dict(reset_attention_mask=None), "reset_attention_mask"),
    "eod_mask_loss None": (dict(eod_mask_loss=None), "eod_mask_loss"),
    "create_attention_mask": (dict(create_attention_mask=1), "create_attention_mask"),
    "extra token": (dict(add_extra_token_to_sequence="no"), "add_extra_token_to_sequence"),
    "dp size": (dict(data_parallel_size=0), "data_parallel_size"),
    "sp size": (dict(sequence_parallel_size=-1), "sequence_parallel_size"),
    "cp size": (dict(context_parallel_size=0), "context_parallel_size"),
    "spd no vocab": (
        dict(tokenizer={"vocab_size": None, "eod": 1}, sequences_per_dataset={"data/a": [1, 1]}),
        "vocab_size",
    ),
    "spd missing prefix": (dict(sequences_per_dataset={"other": [1, 1]}), "no entry"),
    "spd bad file": (dict(sequences_per_dataset="/nonexistent/spd.json"), "not found"),
    "shuffle mode": (dict(shuffle_mode="feistel"), r"shuffle_mode='feistel' is not one of"),
    "shuffle mode type": (dict(shuffle_mode=None), "shuffle_mode=None"),
    "object storage no cache": (
        dict(blend=(["s3://b/a"], None), mmap_bin_files=False),
        "object_storage_cache_path",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_errors(name):
    fields, message = CASES[name]
    with pytest.raises(ConfigError, match=message):
        gpt(**fields)


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        gpt(sequence_length=-5)


def test_build_on_all_ranks_is_on_by_default_and_a_bool():
    assert (
        gpt().build_on_all_ranks is True
        and gpt(build_on_all_ranks=False).build_on_all_ranks is False
    )
    with pytest.raises(ConfigError, match="build_on_all_ranks='yes': must be True or False"):
        gpt(build_on_all_ranks="yes")


def test_max_open_bin_files_is_keyword_only_with_a_low_default_and_validated():
    from tokenloom.format.bin_pool import DEFAULT_MAX_OPEN_BIN_FILES

    field = {f.name: f for f in dataclasses.fields(GPTDatasetConfig)}["max_open_bin_files"]
    assert field.kw_only and gpt().max_open_bin_files == DEFAULT_MAX_OPEN_BIN_FILES == 256
    assert gpt(max_open_bin_files=3).max_open_bin_files == 3
    for bad in (0, -1, 2.5, "8", None, True):
        with pytest.raises(ConfigError, match=r"max_open_bin_files=.*must be an integer >= 1"):
            gpt(max_open_bin_files=bad)

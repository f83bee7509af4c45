"""Build a golden ``datasets`` case with tokenloom and compare it array by array."""

from __future__ import annotations

import numpy

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, MockGPTDataset, SimpleTokenizer
from tokenloom.datasets.blended import BlendedDataset

DEFAULTS = dict(
    random_seed=1234,
    sequence_length=64,
    reset_position_ids=False,
    reset_attention_mask=False,
    eod_mask_loss=False,
    create_attention_mask=True,
    add_extra_token_to_sequence=True,
    drop_last_partial_validation_sequence=True,
    mid_level_dataset_surplus=0.005,
)
SPLITS = ("train", "valid", "test")


def _prefixes(blend, golden_dir):
    return None if blend is None else ([str(golden_dir / p) for p in blend[0]], blend[1])


def make_config(case, golden_dir, path_to_cache, **overrides) -> GPTDatasetConfig:
    fields = dict(DEFAULTS)
    fields.update(case["config"])
    if "blend" in fields:
        fields["blend"] = _prefixes(fields["blend"], golden_dir)
    if "blend_per_split" in fields:
        fields["blend_per_split"] = [_prefixes(b, golden_dir) for b in fields["blend_per_split"]]
    tok = case["tokenizer"]
    fields.update(overrides)
    return GPTDatasetConfig(
        tokenizer=SimpleTokenizer(tok["vocab_size"], tok["eod"], tok["pad"]),
        path_to_cache=str(path_to_cache),
        **fields,
    )


def build(case, golden_dir, path_to_cache, **overrides):
    cls = {"GPTDataset": GPTDataset, "MockGPTDataset": MockGPTDataset}[case["class"]]
    config = make_config(case, golden_dir, path_to_cache, **overrides)
    return BlendedMegatronDatasetBuilder(cls, case["sizes"], lambda: True, config).build()


def lookup(datasets, name: str):
    """The array named ``name`` (golden naming) computed from the built datasets."""
    split, rest = name.split(".", 1)
    dataset = datasets[SPLITS.index(split)]
    if rest.startswith("sub") and isinstance(dataset, BlendedDataset):
        j, rest = rest[3:].split(".", 1)
        dataset = dataset.datasets[int(j)]
    if rest == "len":
        return numpy.asarray(len(dataset), dtype=numpy.int64)
    if rest.startswith("sample") and rest != "sample_index":
        k, field = rest[len("sample") :].split(".")
        return numpy.asarray(dataset[int(k)][field])
    return numpy.asarray(getattr(dataset, rest))


def assert_matches_golden(datasets, golden):
    for name in golden.files:
        got, want = lookup(datasets, name), golden[name]
        assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != golden {want.dtype}"
        assert got.shape == want.shape, f"{name}: shape {got.shape} != golden {want.shape}"
        assert numpy.array_equal(got, want), f"{name}: values differ from megatron-core"
    present = {name.split(".")[0] for name in golden.files}
    for split, dataset in zip(SPLITS, datasets):
        assert (dataset is not None) == (split in present), f"{split}: presence differs"

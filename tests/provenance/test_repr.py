"""repr() of every dataset says what it is: prefix, split, samples, epochs."""

from __future__ import annotations

import re

from tokenloom import BlendedMegatronDatasetBuilder, GPTDataset, GPTDatasetConfig
from tokenloom.datasets import SimpleTokenizer
from tokenloom.format import IndexedDataset


def _config(tmp_path, **kwargs) -> GPTDatasetConfig:
    return GPTDatasetConfig(
        tokenizer=SimpleTokenizer(600, 0),
        sequence_length=64,
        random_seed=1234,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        path_to_cache=str(tmp_path / "cache"),
        **kwargs,
    )


def test_gpt_and_blended_repr(tmp_path, hf_prefix, spm_prefix):
    config = _config(tmp_path, blend=([hf_prefix, spm_prefix], [0.5, 0.5]), split="100,0,0")
    blend, _, _ = BlendedMegatronDatasetBuilder(
        GPTDataset, [3000, 0, 0], lambda: True, config
    ).build()
    text = repr(blend)
    assert text.startswith("BlendedDataset(split=train, samples=3000, weights=[0.5, 0.5], ")
    for part in blend.datasets:
        epochs = part.document_index.shape[0] // part.indices.shape[0]
        assert epochs > 1  # 1500 samples of 64 tokens need several passes of the small corpora
        assert repr(part) == (
            f"GPTDataset(prefix={part.dataset_path!r}, split=train, "
            f"samples={len(part)}, epochs={epochs}, "
            f"documents={part.indices.shape[0]}, sequence_length=64)"
        )
        assert repr(part) in text


def test_repr_before_the_indices_are_loaded_matches_after(tmp_path, hf_prefix):
    config = _config(tmp_path, blend=([hf_prefix], None), split="100,0,0")
    dataset, _, _ = BlendedMegatronDatasetBuilder(
        GPTDataset, [500, 0, 0], lambda: True, config
    ).build()
    loaded = repr(dataset)
    assert re.search(r"epochs=\d+,", loaded) and "prefix=" in loaded
    low = IndexedDataset(hf_prefix)
    fresh = GPTDataset(low, hf_prefix, dataset.indices, 500, dataset.index_split, config)
    assert repr(fresh) == loaded  # the cached one, opened again: same description
    low.close()


def test_mock_and_low_level_repr(tmp_path, hf_prefix):
    config = _config(tmp_path)
    train, _, _ = BlendedMegatronDatasetBuilder(
        GPTDataset, [100, 0, 0], lambda: True, config
    ).build()
    assert re.fullmatch(
        r"MockGPTDataset\(prefix=None, split=train, samples=\d+, epochs=\d+, "
        r"documents=\d+, sequence_length=64\)",
        repr(train),
    )
    with IndexedDataset(hf_prefix) as low:
        assert repr(low).startswith(f"IndexedDataset({hf_prefix!r}, dtype=uint16, sequences=")

"""A weighted four-prefix blend, built the way the start-up tests build it."""

from __future__ import annotations

from tests.support.random_corpora import EOD

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer


def build(corpora, cache, **fields):
    base = dict(
        random_seed=3,
        sequence_length=24,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        split="100,0,0",
        tokenizer=SimpleTokenizer(32000, EOD),
        path_to_cache=str(cache),
        blend=(list(corpora), [4.0, 3.0, 2.0, 1.0]),
        mid_level_dataset_surplus=0.05,
    )
    base.update(fields)
    config = GPTDatasetConfig(**base)
    return BlendedMegatronDatasetBuilder(GPTDataset, [200, 0, 0], lambda: True, config).build()[0]

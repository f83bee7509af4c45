"""One gloo rank of test_mixture_change.py's DP test (run as a script): the compat
builder under TOKENLOOM_MIXTURE_CHANGE, every rank calling build() as Megatron does."""

from __future__ import annotations

import os
import sys

from tests.support import distributed_harness as harness

from tokenloom.megatron.datasets.blended_megatron_dataset_builder import (
    BlendedMegatronDatasetBuilder,
)
from tokenloom.megatron.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig


def main(out_dir: str) -> None:
    """Build the new run's splits with the change in force; report the continued part."""
    rank, _ = harness.init_worker()
    c0, c2 = os.environ["MIXTURE_C0"], os.environ["MIXTURE_C2"]
    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=32,
        blend=([c0, c2], [1.0, 3.0]),
        split="90,10,0",
        tokenizer={"vocab_size": 32000, "eod": 2},
        path_to_cache=os.environ["MIXTURE_CACHE"],
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    sizes = [int(os.environ["MIXTURE_SAMPLES"]), 8, 0]
    train = BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()[0]
    tokens = [train[i]["tokens"].tolist() for i in range(train.consumed, len(train))]
    harness.write_result(out_dir, rank, {"consumed": train.consumed, "tokens": tokens})


if __name__ == "__main__":
    main(sys.argv[2])

"""Read remote datasets with megatron-core 0.16.1's own S3 / MSC readers (a subprocess).

``python _megatron_storage_runner.py SPEC.json OUT.npz``: SPEC is
``{"prefixes": [...], "idx_cache": DIR, "chunk": N, "gpt": {...} or null}``.  For each
prefix every document is read through megatron-core's ``IndexedDataset`` (its
``_S3BinReader`` or ``_MultiStorageClientBinReader``) and saved; with ``gpt``, the
listed samples of a blended GPT dataset built by megatron-core's builder are saved.
Observed quirks are recorded too (``exists()`` on s3://, zero-length MSC reads).
"""

from __future__ import annotations

import json
import sys

import numpy


class Tokenizer:
    def __init__(self, vocab_size: int, eod: int) -> None:
        self.vocab_size, self.eod = vocab_size, eod
        self.unique_identifiers = {"class": "Tokenizer", "vocab_size": vocab_size, "eod": eod}

    @property
    def pad(self):
        raise AttributeError("no pad token")


def _documents(out: dict, name: str, prefix: str, config) -> None:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(prefix, mmap=False, object_storage_config=config)
    pieces = [dataset[i] for i in range(len(dataset))]
    out[f"{name}.lengths"] = numpy.asarray([len(p) for p in pieces], numpy.int64)
    out[f"{name}.tokens"] = numpy.concatenate(pieces) if pieces else numpy.empty(0)
    if prefix.startswith("msc://") and len(dataset):
        out[f"{name}.zero_length_read"] = numpy.asarray(len(dataset.get(0, 1, 0)))
    try:
        out[f"{name}.exists"] = numpy.asarray(str(IndexedDataset.exists(prefix)))
    except Exception as error:  # noqa: BLE001 - recorded, it is the point
        out[f"{name}.exists"] = numpy.asarray(type(error).__name__)


def _gpt(out: dict, spec: dict) -> None:
    import os

    import torch.distributed as dist
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    os.makedirs(spec["idx_cache"], exist_ok=True)
    if not dist.is_initialized():
        dist.init_process_group(
            "gloo", init_method=f"file://{spec['idx_cache']}/rdzv", rank=0, world_size=1
        )
    gpt = spec["gpt"]
    config = GPTDatasetConfig(
        random_seed=gpt["seed"],
        sequence_length=gpt["sequence_length"],
        blend=(gpt["prefixes"], gpt["weights"]),
        split="100,0,0",
        path_to_cache=gpt["path_to_cache"],
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        tokenizer=Tokenizer(32000, 2),
        mmap_bin_files=False,
        object_storage_cache_path=spec["idx_cache"],
    )
    train = BlendedMegatronDatasetBuilder(
        GPTDataset, [gpt["size"], 0, 0], lambda: True, config
    ).build()[0]
    for k in gpt["samples"]:
        out[f"gpt.sample{k}"] = train[k]["tokens"].numpy()


def main() -> None:
    from megatron.core.datasets.object_storage_utils import ObjectStorageConfig

    spec = json.loads(open(sys.argv[1]).read())
    config = ObjectStorageConfig(
        path_to_idx_cache=spec["idx_cache"], bin_chunk_nbytes=spec["chunk"]
    )
    out: dict = {}
    for j, prefix in enumerate(spec["prefixes"]):
        _documents(out, f"p{j}", prefix, config)
    if spec.get("gpt"):
        _gpt(out, spec)
    numpy.savez(sys.argv[2], **out)


if __name__ == "__main__":
    main()

"""Subprocess side of the compat-layer tests: build Megatron-style datasets, print samples.

Usage: ``python _runner.py MODE CASES_JSON`` where MODE is ``megatron`` (megatron-core's
own datasets code) or ``tokenloom`` (``tokenloom.megatron.install()`` first) and
CASES_JSON maps case names to cases. The code below imports ``megatron.core.datasets.*``
by megatron's names in both modes, as a Megatron-LM script does, in a gloo group of one
(megatron-core's blends need one), and prints one JSON document: per case, every
sample's fields as ``[dtype, shape, values]``.
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from dataclasses import dataclass

import numpy

MODE, CASES = sys.argv[1], json.loads(sys.argv[2])
if MODE == "tokenloom":
    import tokenloom.megatron

    tokenloom.megatron.install()

import torch  # noqa: E402
from megatron.core.datasets.blended_megatron_dataset_builder import (  # noqa: E402
    BlendedMegatronDatasetBuilder,
)
from megatron.core.datasets.gpt_dataset import (  # noqa: E402
    GPTDataset,
    GPTDatasetConfig,
    MockGPTDataset,
)
from megatron.core.datasets.megatron_dataset import MegatronDataset  # noqa: E402


class Tokenizer:
    """The ids the datasets use (a legacy-style tokenizer whose pad raises)."""

    def __init__(self, vocab_size: int, eod: int) -> None:
        self.vocab_size, self.eod = vocab_size, eod
        self.unique_identifiers = OrderedDict(class_="Tokenizer", vocab_size=vocab_size)

    @property
    def pad(self):
        raise NotImplementedError("no pad")


@dataclass
class InfillConfig(GPTDatasetConfig):
    """A config subclass with its own fields (they join the cache key)."""

    infill_rate: float = 0.5
    infill_marker: int = 5


class InfillDataset(GPTDataset):
    """FIM-like: rewrites each sample with a stateful RNG (the hook megatron-LM's
    GPTFIMDataset overrides), so a skipped or repeated call changes every later sample."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.rng = numpy.random.RandomState(self.config.random_seed)

    @staticmethod
    def _key_config_attributes():
        return GPTDataset._key_config_attributes() + ["infill_rate", "infill_marker"]

    def _query_document_sample_shuffle_indices(self, idx):
        tokens, documents = super()._query_document_sample_shuffle_indices(idx)
        if self.rng.binomial(1, self.config.infill_rate):
            cut = self.rng.randint(1, len(tokens) - 1)
            middle = tokens[cut:].copy()
            tokens = numpy.concatenate([[self.config.infill_marker], middle, tokens[:cut]])
            tokens = tokens[: len(middle) + cut]
        return numpy.asarray(tokens, dtype=numpy.int64), documents


class LinesLowLevel:
    """A low-level dataset that is no IndexedDataset: one JSON list of ids per line."""

    def __init__(self, path: str) -> None:
        with open(path) as handle:
            self.rows = [json.loads(line) for line in handle if line.strip()]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, idx: int) -> list:
        return self.rows[idx]


class SFTLikeDataset(MegatronDataset):
    """SFT-style: its own low-level dataset, element count and samples."""

    def __init__(self, dataset, dataset_path, indices, num_samples, index_split, config) -> None:
        super().__init__(dataset, dataset_path, indices, num_samples, index_split, config)

    @staticmethod
    def numel_low_level_dataset(low_level_dataset) -> int:
        return len(low_level_dataset)

    @staticmethod
    def build_low_level_dataset(dataset_path, config):
        return LinesLowLevel(dataset_path)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, idx):
        row = self.dataset[int(self.indices[idx % len(self.indices)])]
        seq = self.config.sequence_length
        ids = (row + [self.config.tokenizer.eod] * seq)[:seq]
        return {"tokens": torch.tensor(ids, dtype=torch.int64), "index": int(idx)}


CLASSES = {
    "GPTDataset": GPTDataset,
    "MockGPTDataset": MockGPTDataset,
    "InfillDataset": InfillDataset,
    "SFTLikeDataset": SFTLikeDataset,
}


def encode(value):
    if isinstance(value, torch.Tensor):
        return [str(value.dtype), list(value.shape), value.tolist()]
    if isinstance(value, numpy.ndarray):
        return ["numpy " + str(value.dtype), list(value.shape), value.tolist()]
    if isinstance(value, numpy.generic):
        return ["numpy " + str(value.dtype), [], value.item()]
    return [type(value).__name__, [], value]


def build(case: dict) -> dict:
    config_class = InfillConfig if case["class"] == "InfillDataset" else GPTDatasetConfig
    config = config_class(tokenizer=Tokenizer(case["vocab_size"], case["eod"]), **case["config"])
    built = BlendedMegatronDatasetBuilder(
        CLASSES[case["class"]], case["sizes"], lambda: True, config
    ).build()
    out = {}
    for split, dataset in zip(("train", "valid", "test"), built):
        if dataset is None:
            out[split] = None
            continue
        blended = not isinstance(dataset, GPTDataset)  # only GPT datasets take None
        samples = [
            None if i == "pad" else i for i in case["samples"] if not (blended and i == "pad")
        ]
        out[split] = {
            "type": type(dataset).__name__,
            "len": len(dataset),
            "samples": [
                {key: encode(value) for key, value in dataset[i].items()}
                for i in samples
                if i is None or i < len(dataset)
            ],
        }
    return out


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        torch.distributed.init_process_group(
            "gloo", init_method=f"file://{folder}/rendezvous", rank=0, world_size=1
        )
        print(json.dumps({name: build(case) for name, case in CASES.items()}))
        torch.distributed.destroy_process_group()


main()

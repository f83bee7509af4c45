"""Build the same dataset configuration for tokenloom and for megatron-core.

One plain dict (``describe(...)``) describes a config; ``config_for(side, desc)``
turns it into each library's ``GPTDatasetConfig``. Both sides get the same stand-in
tokenizer: megatron-core only reads ``vocab_size``, ``eod``, ``pad`` (absent here,
so the pad id is -1 on both sides) and ``unique_identifiers`` (hashed into its cache
key); it does not require a ``MegatronTokenizer`` subclass (the type hint is not
enforced by the dataclass).
"""

from __future__ import annotations

from typing import Any, Optional

from data import EOD, VOCAB_SIZE

MEGATRON = "megatron"
TOKENLOOM = "tokenloom"


class BenchTokenizer:
    """The smallest tokenizer both libraries accept: vocabulary size and EOD id."""

    def __init__(self, vocab_size: int = VOCAB_SIZE, eod: int = EOD) -> None:
        self.vocab_size = vocab_size
        self.eod = eod
        self.unique_identifiers = {"class": "BenchTokenizer", "vocab_size": vocab_size, "eod": eod}


def describe(
    *,
    seed: int = 1234,
    sequence_length: int = 4096,
    split: str = "100,0,0",
    blend: Optional[list] = None,
    path_to_cache: Optional[str] = None,
    **extra: Any,
) -> dict[str, Any]:
    """The one description both sides are built from (GPT defaults, no attention mask)."""
    desc = dict(
        random_seed=seed,
        sequence_length=sequence_length,
        split=split,
        blend=blend,
        path_to_cache=path_to_cache,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        add_extra_token_to_sequence=True,
    )
    desc.update(extra)
    return desc


def config_for(side: str, desc: dict[str, Any]):
    """``GPTDatasetConfig`` of ``side`` ("megatron" or "tokenloom") for ``desc``."""
    kwargs = dict(desc)
    if kwargs.get("blend") is not None:
        prefixes, weights = kwargs["blend"]
        kwargs["blend"] = (list(prefixes), None if weights is None else list(weights))
    kwargs["tokenizer"] = BenchTokenizer()
    return gpt_classes(side)["GPTDatasetConfig"](**kwargs)


def gpt_classes(side: str, builder: bool = False) -> dict[str, Any]:
    """The classes a benchmark needs from one side, imported lazily (the builder on request)."""
    if side == MEGATRON:
        from megatron.core.datasets.blended_megatron_dataset_builder import (
            BlendedMegatronDatasetBuilder,
        )
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
        from megatron.core.datasets.utils import Split
    else:
        from tokenloom.datasets import GPTDataset, GPTDatasetConfig, Split

        BlendedMegatronDatasetBuilder = _tokenloom_builder() if builder else None
    return dict(
        GPTDataset=GPTDataset,
        GPTDatasetConfig=GPTDatasetConfig,
        Split=Split,
        BlendedMegatronDatasetBuilder=BlendedMegatronDatasetBuilder,
    )


def _tokenloom_builder():
    """The builder lives in ``tokenloom.builder`` (brief) or ``tokenloom.datasets.builder``."""
    import importlib

    errors = []
    for name in ("tokenloom.builder", "tokenloom.datasets.builder", "tokenloom"):
        try:
            return importlib.import_module(name).BlendedMegatronDatasetBuilder
        except (ImportError, AttributeError) as error:
            errors.append(f"{name}: {error}")
    raise ImportError("BlendedMegatronDatasetBuilder not found (" + "; ".join(errors) + ")")


def build_gpt_dataset(side: str, prefix: str, num_samples: Optional[int], desc: dict[str, Any]):
    """A train-split GPTDataset over every document of ``prefix``, built like the builder does."""
    import numpy

    classes = gpt_classes(side)
    config = config_for(side, desc)
    gpt = classes["GPTDataset"]
    low = gpt.build_low_level_dataset(prefix, config)
    n = gpt.numel_low_level_dataset(low)
    indices = numpy.arange(n, dtype=numpy.int32)
    return gpt(low, prefix, indices, num_samples, classes["Split"].train, config)


def sample_to_numpy(sample: dict[str, Any]) -> dict[str, Any]:
    """A sample dict with torch tensors (megatron) or ndarrays (tokenloom) -> ndarrays."""
    out = {}
    for key, value in sample.items():
        if value is None:
            continue
        out[key] = value.numpy() if hasattr(value, "numpy") else value
    return out

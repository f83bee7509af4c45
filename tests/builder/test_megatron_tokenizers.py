"""Building with megatron-core's own tokenizer classes (and tokenizers as rude as theirs).

Every Megatron legacy tokenizer raises ``NotImplementedError`` from ``pad`` (and ``bos``,
``mask``, ...) when it has none; megatron-core treats such a read as "absent". The rank
fingerprint once read them with ``getattr(x, name, None)`` and crashed every build.
"""

from __future__ import annotations

import json

import numpy
import pytest
from tests.support.megatron_core import require_megatron, run_json
from tests.support.random_corpora import write_corpus

from tokenloom import BlendedMegatronDatasetBuilder, GPTDataset, GPTDatasetConfig
from tokenloom.builder.agreement import sample_fingerprint


class RaisingTokenizer:
    """Like Megatron's ``_GPT2BPETokenizer``: no pad, no bos, and reads that raise."""

    vocab_size = 32000
    eod = 2

    @property
    def pad(self):
        raise NotImplementedError("RaisingTokenizer has no attribute 'pad'")

    @property
    def bos(self):
        raise NotImplementedError("RaisingTokenizer has no attribute 'bos'")

    @property
    def unique_identifiers(self):
        raise RuntimeError("not a property anyone should need")

    def __eq__(self, other):
        return isinstance(other, RaisingTokenizer)

    __hash__ = object.__hash__


def _config(prefix, tmp_path, tokenizer) -> GPTDatasetConfig:
    return GPTDatasetConfig(
        random_seed=5,
        sequence_length=16,
        blend=([str(prefix)], None),
        split="90,5,5",
        tokenizer=tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        path_to_cache=str(tmp_path / "cache"),
    )


def test_a_tokenizer_whose_reads_raise_builds(tmp_path):
    prefix = write_corpus(tmp_path / "c", 40, seed=3)
    config = _config(prefix, tmp_path, RaisingTokenizer())
    fingerprint = dict(sample_fingerprint(config, [10, 2, 2], GPTDataset))
    assert fingerprint["tokenizer"] == {"class": "RaisingTokenizer", "vocab_size": 32000, "eod": 2}
    train, valid, test = BlendedMegatronDatasetBuilder(
        GPTDataset, [10, 2, 2], lambda: True, config
    ).build()
    assert len(train) >= 10 and train[0]["tokens"].shape == (16,)
    assert train[0]["loss_mask"].dtype == numpy.float32


BUILD_WITH_MEGATRON_TOKENIZERS = r"""
import json, sys
import numpy
from megatron.core.datasets.megatron_tokenizer import MegatronLegacyTokenizer
from megatron.core.tokenizers import MegatronTokenizer
from tokenloom import BlendedMegatronDatasetBuilder, GPTDataset, GPTDatasetConfig

class LegacyNull(MegatronLegacyTokenizer):
    # Megatron-LM's _NullTokenizer in shape: ids only, pad/bos/mask raise
    def __init__(self, vocab_size):
        super().__init__(None, vocab_size=vocab_size)
        self._size = vocab_size
    def tokenize(self, text):
        return [int(x) for x in text.split()]
    def detokenize(self, ids):
        return " ".join(map(str, ids))
    @property
    def vocab(self):
        raise NotImplementedError
    @property
    def inv_vocab(self):
        raise NotImplementedError
    @property
    def vocab_size(self):
        return self._size
    @property
    def eod(self):
        return self._size - 1

prefix, cache = sys.argv[1], sys.argv[2]
out = {}
for name, tokenizer in (
    ("legacy", LegacyNull(32000)),
    ("null", MegatronTokenizer.from_pretrained(metadata_path={"library": "null"}, vocab_size=32000)),
):
    config = GPTDatasetConfig(
        random_seed=5, sequence_length=16, blend=([prefix], None), split="90,5,5",
        tokenizer=tokenizer, reset_position_ids=False, reset_attention_mask=False,
        eod_mask_loss=False, path_to_cache=cache + "/" + name,
    )
    train, valid, test = BlendedMegatronDatasetBuilder(
        GPTDataset, [10, 2, 2], lambda: True, config).build()
    out[name] = [train[i]["tokens"].tolist() for i in range(3)]
print(json.dumps(out))
"""


@pytest.mark.megatron
def test_megatron_cores_own_tokenizers_build(tmp_path):
    require_megatron()
    prefix = write_corpus(tmp_path / "c", 40, seed=3)
    out = run_json(BUILD_WITH_MEGATRON_TOKENIZERS, str(prefix), str(tmp_path / "cache"))
    reference = _config(prefix, tmp_path, RaisingTokenizer())
    train = BlendedMegatronDatasetBuilder(GPTDataset, [10, 2, 2], lambda: True, reference).build()[
        0
    ]
    expected = [train[i]["tokens"].tolist() for i in range(3)]
    assert out["legacy"] == expected, json.dumps(out)[:300]
    assert out["null"] == expected

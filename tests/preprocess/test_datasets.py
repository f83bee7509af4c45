"""Preprocessed files and tokenizer objects work as GPT dataset inputs."""

from __future__ import annotations

import numpy
import pytest
from tests.preprocess._preprocess_helpers import write_jsonl

from tokenloom.preprocess import preprocess
from tokenloom.tokenizers import load_tokenizer

datasets = pytest.importorskip("tokenloom.datasets")
builder = pytest.importorskip("tokenloom.builder")


@pytest.mark.parametrize("kind", ["bytes", "hf", "sentencepiece"])
def test_gpt_dataset_over_preprocessed_text(
    tmp_path, kind, hf_path, sentencepiece_path, corpus_records
):
    spec = {
        "bytes": "bytes",
        "hf": f"hf:{hf_path}",
        "sentencepiece": f"sentencepiece:{sentencepiece_path}",
    }[kind]
    tokenizer = load_tokenizer(spec)
    path = write_jsonl(tmp_path / "in.jsonl", corpus_records)
    summary = preprocess(str(path), str(tmp_path / "c"), tokenizer, append_eod=True)
    prefix = summary.outputs["text"].path_prefix
    config = datasets.GPTDatasetConfig(
        random_seed=7,
        sequence_length=32,
        blend=([prefix], None),
        split="100,0,0",
        path_to_cache=str(tmp_path / "cache"),
        tokenizer=tokenizer,
        reset_position_ids=True,
        reset_attention_mask=False,
        eod_mask_loss=True,
        create_attention_mask=False,
    )
    train, valid, test = builder.BlendedMegatronDatasetBuilder(
        datasets.GPTDataset, [50, None, None], lambda: True, config
    ).build()
    assert valid is None and test is None and len(train) >= 50
    eod_seen = False
    for index in range(len(train)):
        sample = train[index]
        tokens, mask = numpy.asarray(sample["tokens"]), numpy.asarray(sample["loss_mask"])
        assert tokens.max() < tokenizer.vocab_size
        assert numpy.array_equal(mask == 0, tokens == tokenizer.eod)  # eod_mask_loss uses .eod
        eod_seen |= bool((tokens == tokenizer.eod).any())
    assert eod_seen
    assert (tmp_path / "cache").is_dir()

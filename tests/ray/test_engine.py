"""The Ray engine on a real local Ray cluster: the same bytes as the local engine, always.

Every check compares with the local engine run at test time on the same input.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from tests.ray.ray_helpers import CueTokenizer, documents, local_run, same_bytes, write_corpus

from tokenloom.errors import ConfigError, PreprocessError
from tokenloom.preprocess import Policy
from tokenloom.preprocess.pipeline import output_prefix_for
from tokenloom.preprocess.ray_engine import preprocess_ray, read_prefix_list
from tokenloom.provenance import read_sidecar

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]
KEYS = ("text", "title")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, real_texts: list) -> list:
    """About 1 MB of real text in two plain files and one gzip file (cannot be cut)."""
    texts = (real_texts * 3)[: 3 * len(real_texts)]
    return write_corpus(tmp_path_factory.mktemp("corpus"), texts, files=3)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, corpus: list, hf_tokenizer: Any) -> Any:
    prefix = str(tmp_path_factory.mktemp("local") / "local")
    summary = local_run(corpus, prefix, hf_tokenizer, json_keys=KEYS, append_eod=True)
    return prefix, summary


@pytest.mark.parametrize("num_shards", [1, 2, 7, 64])
def test_any_shard_count_gives_the_local_bytes(
    ray_local: Any, tmp_path: Path, corpus: list, reference: Any, hf_tokenizer: Any, num_shards: int
) -> None:
    local_prefix, local_summary = reference
    summary = preprocess_ray(
        corpus,
        str(tmp_path / "out"),
        hf_tokenizer,
        json_keys=KEYS,
        append_eod=True,
        num_shards=num_shards,
        show_progress=False,
    )
    assert same_bytes(local_prefix, str(tmp_path / "out"), KEYS)
    assert len(summary.shards) >= min(num_shards, 3) and summary.reused == 0
    assert summary.documents == local_summary.documents
    assert summary.tokens == local_summary.tokens
    assert summary.blank_lines == local_summary.blank_lines > 0
    assert not (tmp_path / "out_shards").exists()  # merged: the shards are gone
    published = [f"out_{key}_document{ext}" for key in KEYS for ext in (".bin", ".idx", ".json")]
    assert sorted(os.listdir(tmp_path)) == published  # no publish lock or journal left
    assert f"0 of {len(summary.shards)} shards reused" in "\n".join(summary.lines())
    for key in KEYS:  # the merged pair has its provenance sidecar, with the local run's tokenizer
        merged = read_sidecar(output_prefix_for(str(tmp_path / "out"), key))
        local = read_sidecar(output_prefix_for(local_prefix, key))
        assert merged is not None and local is not None
        assert merged["tokenizer"] == local["tokenizer"]


def test_skip_policies_count_like_the_local_engine(
    ray_local: Any, tmp_path: Path, hf_tokenizer: Any, real_texts: list
) -> None:
    lines = []
    for i, text in enumerate(real_texts * 2):
        lines.append(json.dumps({"text": text}))
        if i % 5 == 1:
            lines.append("{broken json")
        if i % 7 == 3:
            lines.append(json.dumps({"other": 1}))
        if i % 11 == 4:
            lines.append(json.dumps({"text": 42}))
    source = tmp_path / "dirty.jsonl"
    source.write_text("\n".join(lines) + "\n")
    policy = Policy(on_bad_json="skip", on_missing_key="skip", on_bad_type="skip")
    local = local_run([str(source)], str(tmp_path / "local"), hf_tokenizer, policy=policy)
    summary = preprocess_ray(
        [str(source)],
        str(tmp_path / "ray"),
        hf_tokenizer,
        policy=policy,
        num_shards=5,
        show_progress=False,
    )
    assert same_bytes(str(tmp_path / "local"), str(tmp_path / "ray"))
    assert summary.skipped == local.skipped and sum(summary.skipped.values()) > 10
    assert summary.skipped_text() == local.skipped_text()


def test_fail_policy_names_the_file_and_the_real_line(
    ray_local: Any, tmp_path: Path, hf_tokenizer: Any
) -> None:
    lines = [json.dumps({"text": f"line {i} " * 20}) for i in range(3000)]
    lines[2399] = "{not json"
    source = tmp_path / "bad.jsonl"
    source.write_text("\n".join(lines) + "\n")
    with pytest.raises(PreprocessError, match=rf"{source}:2400: malformed JSON") as error:
        preprocess_ray(
            [str(source)], str(tmp_path / "out"), hf_tokenizer, num_shards=6, show_progress=False
        )
    assert "ray" not in type(error.value).__module__
    assert not (tmp_path / "out_text_document.bin").exists()
    assert not (tmp_path / "out_text_document.idx").exists()


def test_no_merge_writes_a_prefix_list_the_datasets_load(
    ray_local: Any, tmp_path: Path, corpus: list, reference: Any, hf_tokenizer: Any
) -> None:
    local_prefix, _ = reference
    summary = preprocess_ray(
        corpus,
        str(tmp_path / "out"),
        hf_tokenizer,
        json_keys=KEYS,
        append_eod=True,
        num_shards=4,
        merge=False,
        show_progress=False,
    )
    assert not (tmp_path / "out_text_document.bin").exists()
    for key in KEYS:
        prefixes, weights = read_prefix_list(summary.prefix_lists[key])
        assert len(prefixes) == len(summary.shards)
        assert sum(weights) == summary.outputs[key].tokens
        joined = [doc for prefix in prefixes for doc in documents(prefix)]
        assert joined == documents(f"{local_prefix}_{key}_document")
    _check_blend_builds(summary.prefix_lists["text"], hf_tokenizer, tmp_path)


def _check_blend_builds(prefix_list: str, tokenizer: Any, tmp_path: Path) -> None:
    """The prefix list is a blend the dataset builder takes as it is."""
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.datasets import GPTDataset, GPTDatasetConfig

    config = GPTDatasetConfig(
        random_seed=3,
        sequence_length=32,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        split="100,0,0",
        tokenizer=tokenizer,
        blend=read_prefix_list(prefix_list),
        path_to_cache=str(tmp_path / "cache"),
    )
    train, _, _ = BlendedMegatronDatasetBuilder(
        GPTDataset, [50, 0, 0], lambda: True, config
    ).build()
    assert len(train) >= 50 and len(train[49]["tokens"]) == 32  # Megatron rounds up per shard


def test_a_changed_input_reruns_only_its_shards(
    ray_local: Any, tmp_path: Path, hf_tokenizer: Any, real_texts: list
) -> None:
    paths = write_corpus(tmp_path / "in", real_texts, files=3, gzip_last=False)
    out = str(tmp_path / "out")
    first = preprocess_ray(paths, out, hf_tokenizer, num_shards=6, merge=False, show_progress=False)
    again = preprocess_ray(paths, out, hf_tokenizer, num_shards=6, merge=False, show_progress=False)
    assert again.reused == len(again.shards) == len(first.shards)
    assert f"{len(again.shards)} of {len(again.shards)} shards reused" in "\n".join(again.lines())
    with open(paths[1], "a") as handle:
        handle.write(json.dumps({"text": "an appended document"}) + "\n")
    changed = preprocess_ray(paths, out, hf_tokenizer, num_shards=6, show_progress=False)
    rerun = [s for s in changed.shards if not s.reused]
    assert rerun and all(s.source.startswith("part-1") for s in rerun)
    local_run(paths, str(tmp_path / "local"), hf_tokenizer)
    assert same_bytes(str(tmp_path / "local"), out)


def test_other_settings_rerun_every_shard(
    ray_local: Any, tmp_path: Path, hf_tokenizer: Any, real_texts: list
) -> None:
    paths = write_corpus(tmp_path / "in", real_texts, files=2, gzip_last=False)
    out = str(tmp_path / "out")
    preprocess_ray(paths, out, hf_tokenizer, num_shards=3, keep_shards=True, show_progress=False)
    eod = preprocess_ray(
        paths, out, hf_tokenizer, num_shards=3, append_eod=True, show_progress=False
    )
    assert eod.reused == 0
    local_run(paths, str(tmp_path / "local"), hf_tokenizer, append_eod=True)
    assert same_bytes(str(tmp_path / "local"), out)


def test_killed_worker_is_retried_without_losing_or_duplicating(
    ray_local: Any, tmp_path: Path, hf_tokenizer: Any, real_texts: list
) -> None:
    paths = write_corpus(
        tmp_path / "in", real_texts * 2, files=2, gzip_last=False, sentinel_at=len(real_texts) // 2
    )
    tokenizer = CueTokenizer(hf_tokenizer, str(tmp_path / "fired"), action="kill")
    summary = preprocess_ray(
        paths, str(tmp_path / "out"), tokenizer, num_shards=4, chunk_bytes=8192, show_progress=False
    )
    assert (tmp_path / "fired").exists()  # the worker really was SIGKILLed mid-shard
    assert summary.retries == 1
    local_run(paths, str(tmp_path / "local"), tokenizer, chunk_bytes=8192)
    assert same_bytes(str(tmp_path / "local"), str(tmp_path / "out"))
    assert sum(1 for text in documents(str(tmp_path / "out_text_document"))) == summary.documents


def test_io_errors_are_retried_other_exceptions_are_not(
    ray_local: Any, tmp_path: Path, hf_tokenizer: Any, real_texts: list
) -> None:
    paths = write_corpus(tmp_path / "in", real_texts, files=1, gzip_last=False, sentinel_at=3)
    flaky = CueTokenizer(hf_tokenizer, str(tmp_path / "io"), action="oserror")
    summary = preprocess_ray(paths, str(tmp_path / "a"), flaky, num_shards=2, show_progress=False)
    assert summary.retries == 1 and (tmp_path / "io").exists()
    broken = CueTokenizer(hf_tokenizer, str(tmp_path / "value"), action="valueerror")
    with pytest.raises(PreprocessError, match="injected application error"):
        preprocess_ray(paths, str(tmp_path / "b"), broken, num_shards=2, show_progress=False)
    attempts = os.listdir(tmp_path / "b_shards" / "attempts")
    assert len([a for a in attempts if a.startswith("shard-00000")]) == 1  # not retried


def test_partitions_that_reorder_are_refused(tmp_path: Path, hf_tokenizer: Any) -> None:
    with pytest.raises(ConfigError, match="--keep-sequential-samples"):
        preprocess_ray([str(tmp_path / "x.jsonl")], str(tmp_path / "o"), hf_tokenizer, partitions=2)

"""End to end: JSONL -> preprocess -> IndexedDataset -> decode gives the input text back."""

from __future__ import annotations

import filecmp
import os
import re

import numpy
import pytest
from tests.preprocess._preprocess_helpers import write_jsonl

from tokenloom.errors import PreprocessError, TokenizerError
from tokenloom.format import IndexedDataset, IndexedDatasetBuilder, get_bin_path, get_idx_path
from tokenloom.preprocess import Policy, preprocess
from tokenloom.tokenizers import ByteTokenizer, load_tokenizer

KINDS = ["bytes", "hf", "tiktoken", "sentencepiece"]


@pytest.fixture
def spec(request, hf_path, tiktoken_path, sentencepiece_path) -> str:
    return {
        "bytes": "bytes",
        "hf": f"hf:{hf_path}",
        "tiktoken": f"tiktoken:{tiktoken_path}",
        "sentencepiece": f"sentencepiece:{sentencepiece_path}",
    }[request.param]


def _listing(folder) -> list:
    """The folder's files, without the writer's publish lock (format/writer.py)."""
    return [name for name in os.listdir(folder) if not name.startswith(".tokenloom-")]


def read_documents(prefix: str) -> list:
    with IndexedDataset(prefix) as dataset:
        assert numpy.array_equal(dataset.document_indices, numpy.arange(len(dataset) + 1))
        return [numpy.array(dataset[i]) for i in range(len(dataset))]


@pytest.mark.parametrize("spec", KINDS, indirect=True)
def test_round_trip_every_tokenizer(tmp_path, spec, corpus_records, real_texts):
    path = write_jsonl(tmp_path / "in.jsonl", corpus_records)
    summary = preprocess(
        str(path), str(tmp_path / "out"), spec, append_eod=True, chunk_bytes=20_000
    )
    tokenizer = load_tokenizer(spec)
    documents = read_documents(str(tmp_path / "out_text_document"))
    assert len(documents) == len(real_texts) == summary.documents
    for text, doc in zip(real_texts, documents):
        assert doc[-1] == tokenizer.eod
        assert tokenizer.decode(doc[:-1]) == text
    assert summary.tokens == sum(len(doc) for doc in documents)


@pytest.mark.parametrize("compression", ["none", "gzip", "zstd", "bzip2", "xz"])
def test_every_compression_gives_the_same_output(tmp_path, corpus_records, compression):
    plain = write_jsonl(tmp_path / "plain.jsonl", corpus_records)
    packed = write_jsonl(tmp_path / f"packed.{compression}", corpus_records, compression)
    preprocess(str(plain), str(tmp_path / "a"), "bytes", append_eod=True)
    summary = preprocess(str(packed), str(tmp_path / "b"), "bytes", append_eod=True)
    assert summary.disk_bytes == os.path.getsize(packed)
    for ext in (".bin", ".idx"):
        assert filecmp.cmp(
            tmp_path / f"a_text_document{ext}", tmp_path / f"b_text_document{ext}", shallow=False
        )


def test_globs_and_several_inputs_keep_their_order(tmp_path, corpus_records, real_texts):
    write_jsonl(tmp_path / "part-b.jsonl.gz", corpus_records[3:], "gzip")
    write_jsonl(tmp_path / "part-a.jsonl", corpus_records[:3])
    extra = write_jsonl(tmp_path / "extra.jsonl", corpus_records[:1])
    summary = preprocess([str(tmp_path / "part-*"), str(extra)], str(tmp_path / "o"), "bytes")
    assert summary.files == 3
    tokenizer = ByteTokenizer()
    got = [tokenizer.decode(doc) for doc in read_documents(str(tmp_path / "o_text_document"))]
    assert got == real_texts + real_texts[:1]


def test_one_output_per_key(tmp_path, hf_path, corpus_records, real_texts):
    path = write_jsonl(tmp_path / "in.jsonl", corpus_records)
    summary = preprocess(
        str(path), str(tmp_path / "multi"), f"hf:{hf_path}", json_keys=["text", "title"]
    )
    tokenizer = load_tokenizer(hf_path)
    assert set(summary.outputs) == {"text", "title"}
    titles = [tokenizer.decode(d) for d in read_documents(str(tmp_path / "multi_title_document"))]
    texts = [tokenizer.decode(d) for d in read_documents(str(tmp_path / "multi_text_document"))]
    assert titles == [record["title"] for record in corpus_records]
    assert texts == real_texts
    assert summary.outputs["title"].path_prefix == str(tmp_path / "multi_title_document")


@pytest.mark.parametrize("spec", ["hf", "tiktoken"], indirect=True)
def test_two_workers_write_the_same_bytes_as_one(tmp_path, spec, corpus_records):
    path = write_jsonl(tmp_path / "in.jsonl", corpus_records * 3)
    one = preprocess(
        str(path),
        str(tmp_path / "w1"),
        spec,
        json_keys=["text", "title"],
        append_eod=True,
        workers=1,
        chunk_bytes=3000,
    )
    two = preprocess(
        str(path),
        str(tmp_path / "w2"),
        spec,
        json_keys=["text", "title"],
        append_eod=True,
        workers=2,
        chunk_bytes=3000,
    )
    assert (one.documents, one.tokens) == (two.documents, two.tokens)
    assert two.worker_cpu_seconds > 0
    for key in ("text", "title"):
        for ext in (".bin", ".idx"):
            assert filecmp.cmp(
                tmp_path / f"w1_{key}_document{ext}",
                tmp_path / f"w2_{key}_document{ext}",
                shallow=False,
            )


def test_dtype_follows_the_vocabulary(tmp_path, corpus_records):
    from tokenloom.tokenizers.train import write_tiktoken_file

    # 256 single bytes + 65280 byte pairs: 65536 ranks, eod 65536 -> needs int32
    ranks = {bytes([b]): b for b in range(256)}
    pairs = [bytes([a, b]) for a in range(256) for b in range(256) if a != b]
    ranks.update({pair: 256 + i for i, pair in enumerate(pairs)})
    write_tiktoken_file(ranks, str(tmp_path / "big.tiktoken"))
    path = write_jsonl(tmp_path / "in.jsonl", corpus_records[:4])
    big = preprocess(
        str(path), str(tmp_path / "big"), f"tiktoken:{tmp_path / 'big.tiktoken'}", append_eod=True
    )
    small = preprocess(str(path), str(tmp_path / "small"), "bytes", append_eod=True)
    assert (big.dtype, small.dtype) == ("int32", "uint16")
    with IndexedDataset(str(tmp_path / "big_text_document")) as dataset:
        assert dataset.dtype == numpy.int32 and dataset[0][-1] == 65536
    with IndexedDataset(str(tmp_path / "small_text_document")) as dataset:
        assert dataset.dtype == numpy.uint16


def test_empty_documents_policy(tmp_path):
    records = [{"text": "a"}, {"text": ""}, {"text": "b"}]
    path = write_jsonl(tmp_path / "in.jsonl", records)
    kept = preprocess(str(path), str(tmp_path / "k"), "bytes", append_eod=True)  # the default
    with IndexedDataset(str(tmp_path / "k_text_document")) as dataset:
        # Megatron's rule: the empty document stays, with no sequence and no EOD
        assert dataset.document_indices.tolist() == [0, 1, 1, 2]
        assert [dataset[i].tolist() for i in range(len(dataset))] == [[97, 256], [98, 256]]
    assert kept.documents == 3 and kept.skipped_total == 0
    assert kept.outputs["text"].empty_documents == 1
    skipped = preprocess(
        str(path), str(tmp_path / "s"), "bytes", append_eod=True, policy=Policy(on_empty="skip")
    )
    assert skipped.documents == 2 and skipped.skipped == {("empty", "text"): 1}
    with pytest.raises(
        PreprocessError,
        match=r"in.jsonl:2: the document under key 'text' is "
        r"empty.*--on-empty keep",
    ):
        preprocess(str(path), str(tmp_path / "f"), "bytes", policy=Policy(on_empty="fail"))


def test_failure_publishes_nothing_and_keeps_old_outputs(tmp_path, corpus_records):
    good = write_jsonl(tmp_path / "good.jsonl", corpus_records[:2])
    preprocess(str(good), str(tmp_path / "out"), "bytes")
    before = {ext: (tmp_path / f"out_text_document{ext}").read_bytes() for ext in (".bin", ".idx")}
    bad = write_jsonl(tmp_path / "bad.jsonl", corpus_records * 3 + ['{"text": "cut'])
    bad_line = len(corpus_records) * 3 + 1  # the last line, many chunks in
    for workers in (1, 2):
        for prefix in ("out", "new"):
            with pytest.raises(PreprocessError, match=rf"bad.jsonl:{bad_line}: malformed JSON"):
                preprocess(
                    str(bad), str(tmp_path / prefix), "bytes", workers=workers, chunk_bytes=2000
                )
    after = {ext: (tmp_path / f"out_text_document{ext}").read_bytes() for ext in (".bin", ".idx")}
    assert after == before
    sidecar = ["out_text_document.json"] if (tmp_path / "out_text_document.json").exists() else []
    assert sorted(_listing(tmp_path)) == sorted(
        ["bad.jsonl", "good.jsonl", "out_text_document.bin", "out_text_document.idx"] + sidecar
    )


def test_skip_policies_are_reported(tmp_path):
    lines = ['{"text": "ok"}', "{broken", '{"other": 1}', '{"text": 5}', "", '{"text": "fine"}']
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    policy = Policy(on_bad_json="skip", on_missing_key="skip", on_bad_type="skip")
    summary = preprocess(str(path), str(tmp_path / "o"), "bytes", policy=policy, workers=2)
    assert summary.documents == 2 and summary.line_count == 6 and summary.blank_lines == 1
    report = "\n".join(summary.lines())
    assert (
        "skipped: 1 malformed JSON line, 1 record without key 'text', "
        "1 non-string value of 'text', 1 blank line"
    ) in report
    assert report.splitlines()[-1].startswith("done: 2 documents, 6 tokens from 6 lines in 1 file")
    rate = re.search(r"\((\d+(?:\.\d+)?) (B|kB|MB)/s, [\d,]+ tokens/s", report)
    assert rate and float(rate[1]) >= 1, report  # about 70 bytes: not "0.0 MB/s"


def test_ids_outside_the_vocabulary_are_refused(tmp_path):
    class Undersized(ByteTokenizer):
        def __init__(self):
            super().__init__()
            self.vocab_size = 100  # but 'z' is byte 122

    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "abc"}, {"text": "xyz"}])
    with pytest.raises(TokenizerError, match="produced id 122, outside its vocabulary 0..99"):
        preprocess(str(path), str(tmp_path / "o"), Undersized())
    assert not os.path.exists(get_bin_path(str(tmp_path / "o_text_document")))


def test_append_eod_needs_an_eod(tmp_path, real_texts):
    from tokenloom.tokenizers.train import train_byte_level_bpe

    plain = train_byte_level_bpe(real_texts[:2], 300, str(tmp_path / "t.json"), special_tokens=())
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "abc"}])
    with pytest.raises(TokenizerError, match="--append-eod needs an end-of-document token"):
        preprocess(str(path), str(tmp_path / "o"), plain, append_eod=True)
    assert preprocess(str(path), str(tmp_path / "o"), plain).documents == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"json_keys": []}, "no --json-keys"),
        ({"json_keys": ["text", "text"]}, "distinct"),
        ({"workers": 0}, "--workers 0"),
    ],
)
def test_argument_errors(tmp_path, kwargs, message):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "a"}])
    with pytest.raises(PreprocessError, match=message):
        preprocess(str(path), str(tmp_path / "o"), "bytes", **kwargs)


def test_output_is_readable_by_megatron_layout(tmp_path, corpus_records):
    """The pair is what IndexedDatasetBuilder writes for the same documents."""
    path = write_jsonl(tmp_path / "in.jsonl", corpus_records)
    preprocess(str(path), str(tmp_path / "p"), "bytes", append_eod=True)
    tokenizer = ByteTokenizer()
    builder = IndexedDatasetBuilder(get_bin_path(str(tmp_path / "ref")), dtype=numpy.uint16)
    for record in corpus_records:
        builder.add_item(numpy.append(tokenizer.encode(record["text"]), 256))
        builder.end_document()
    builder.finalize(get_idx_path(str(tmp_path / "ref")))
    for ext in (".bin", ".idx"):
        assert filecmp.cmp(
            tmp_path / f"p_text_document{ext}", tmp_path / f"ref{ext}", shallow=False
        )


@pytest.mark.parametrize("workers", [1, 2])
def test_the_first_error_in_input_order_is_reported(tmp_path, workers):
    # line 2 is empty (an error under on_empty=fail, found after encoding, which with one
    # worker happens in the writer thread); line 3, the next chunk, is malformed JSON, which
    # the reader thread finds first
    records = [{"text": "a"}, {"text": ""}, '{"text": "cut']
    path = write_jsonl(tmp_path / "in.jsonl", records)
    for _ in range(5):
        with pytest.raises(
            PreprocessError,
            match=r"in.jsonl:2: the document under key 'text' "
            r"is empty",
        ):
            preprocess(
                str(path),
                str(tmp_path / "o"),
                "bytes",
                workers=workers,
                chunk_bytes=4,
                policy=Policy(on_empty="fail"),
            )
    assert sorted(_listing(tmp_path)) == ["in.jsonl"]


@pytest.mark.parametrize("spec", KINDS, indirect=True)
def test_chunking_does_not_change_the_output(tmp_path, spec, corpus_records):
    """Batches of a few lines or of the whole file: the same bytes (encoding is per document)."""
    path = write_jsonl(tmp_path / "in.jsonl", corpus_records)
    for name, chunk_bytes in (("small", 500), ("whole", 1 << 26)):
        preprocess(str(path), str(tmp_path / name), spec, append_eod=True, chunk_bytes=chunk_bytes)
    for ext in (".bin", ".idx"):
        assert filecmp.cmp(
            tmp_path / f"small_text_document{ext}",
            tmp_path / f"whole_text_document{ext}",
            shallow=False,
        )


def test_chunks_are_balanced_over_workers():
    from tokenloom.preprocess.pipeline import balanced_chunk_bytes

    mib = 1 << 20
    assert balanced_chunk_bytes(4 * mib, mib, 2) == mib // 4  # 16 chunks, 8 per worker
    assert balanced_chunk_bytes(1 << 40, mib, 8) == mib  # big inputs: the chunk size asked for
    assert balanced_chunk_bytes(100, mib, 2) == 64 << 10  # tiny inputs: not below 64 KiB
    assert balanced_chunk_bytes(4 * mib, 3000, 2) == 3000  # a smaller size asked for is kept


def test_a_plain_protocol_tokenizer_works_too(tmp_path, corpus_records):
    """An object with only the protocol's encode_batch (no flat/deferred forms) is enough."""
    from tests.preprocess._preprocess_helpers import PlainTokenizer

    path = write_jsonl(tmp_path / "in.jsonl", corpus_records[:30])
    for workers in (1, 2):
        preprocess(
            str(path),
            str(tmp_path / f"p{workers}"),
            PlainTokenizer(),
            append_eod=True,
            workers=workers,
            chunk_bytes=2000,
        )
    preprocess(str(path), str(tmp_path / "b"), "bytes", append_eod=True)
    for name in ("p1", "p2"):
        for ext in (".bin", ".idx"):
            assert filecmp.cmp(
                tmp_path / f"{name}_text_document{ext}",
                tmp_path / f"b_text_document{ext}",
                shallow=False,
            )

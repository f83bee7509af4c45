"""tiktoken encodings from local .tiktoken files (built here from real mergeable ranks)."""

from __future__ import annotations

import base64
import pickle

import numpy
import pytest

from tokenloom.errors import TokenizerError
from tokenloom.tokenizers import TiktokenTokenizer, Tokenizer, load_tokenizer
from tokenloom.tokenizers.tiktoken_bpe import GPT2_PATTERN, read_tiktoken_ranks
from tokenloom.tokenizers.train import write_tiktoken_file


@pytest.fixture(scope="module")
def educational_path(tmp_path_factory, real_texts) -> str:
    """Ranks from tiktoken's own (reference) BPE trainer, written as a .tiktoken file."""
    from tiktoken._educational import bpe_train

    ranks = bpe_train(real_texts[0][:4000], 300, GPT2_PATTERN.replace("++", "+"), visualise=None)
    path = tmp_path_factory.mktemp("edu") / "edu.tiktoken"
    write_tiktoken_file(ranks, str(path))
    return str(path)


def test_round_trip_on_real_text(tiktoken_path, real_texts):
    tokenizer = load_tokenizer(tiktoken_path)  # detected by the .tiktoken extension
    assert isinstance(tokenizer, TiktokenTokenizer) and isinstance(tokenizer, Tokenizer)
    for text, ids in zip(real_texts, tokenizer.encode_batch(real_texts)):
        assert ids.dtype == numpy.int32
        assert tokenizer.decode(ids) == text


def test_flat_encoding_equals_encode_ordinary(tiktoken_path, real_texts):
    tokenizer = TiktokenTokenizer(tiktoken_path)
    texts = real_texts + ["special text <|endoftext|> stays ordinary", ""]
    expected = [tokenizer.backend.encode_ordinary(text) for text in texts]
    flat, lengths = tokenizer.encode_batch_flat(texts)
    assert lengths.tolist() == [len(ids) for ids in expected]
    assert flat.tolist() == [i for ids in expected for i in ids]
    threaded = TiktokenTokenizer(tiktoken_path, num_threads=2).encode_batch_flat(texts)
    assert threaded[0].tolist() == flat.tolist()


def test_same_tokens_as_the_bpe_it_was_converted_from(tiktoken_path, hf_path, real_texts):
    from tokenloom.tokenizers import HFTokenizer

    hf, tiktoken = HFTokenizer(hf_path), TiktokenTokenizer(tiktoken_path)
    for text in real_texts[:4]:
        pieces_hf = [hf.decode([i]) for i in hf.encode(text)]
        pieces_tt = [
            tiktoken.backend.decode_single_token_bytes(int(i)).decode("utf-8", "replace")
            for i in tiktoken.encode(text)
        ]
        assert pieces_hf == pieces_tt


def test_eod_follows_the_ranks(educational_path, real_texts):
    tokenizer = TiktokenTokenizer(educational_path)
    assert tokenizer.vocab_size == 301 and tokenizer.eod == 300 and tokenizer.pad is None
    assert tokenizer.decode(tokenizer.encode(real_texts[0][:500])) == real_texts[0][:500]
    assert tokenizer.decode([tokenizer.eod]) == "<|endoftext|>"
    custom = TiktokenTokenizer(educational_path, eod="<|doc_end|>")
    assert custom.eod == 300 and custom.decode([300]) == "<|doc_end|>"


def test_pattern_can_be_borrowed_by_name(educational_path):
    tokenizer = load_tokenizer(f"tiktoken:{educational_path}", pattern="r50k_base")
    assert tokenizer.unique_identifiers["pattern"] == GPT2_PATTERN
    regex = TiktokenTokenizer(educational_path, pattern=r"\S+|\s+")
    assert regex.unique_identifiers["pattern"] == r"\S+|\s+"
    with pytest.raises(TokenizerError, match="cannot build a tiktoken encoding"):
        TiktokenTokenizer(educational_path, pattern="(unclosed")


def test_file_named_like_a_builtin_must_match_it(educational_path, tmp_path):
    named = tmp_path / "r50k_base.tiktoken"
    named.write_bytes(open(educational_path, "rb").read())
    with pytest.raises(TokenizerError, match="r50k_base.tiktoken: cannot build"):
        TiktokenTokenizer(str(named))  # r50k_base has 50257 ids, the file 300


def test_bad_tiktoken_files(tmp_path):
    bad = tmp_path / "bad.tiktoken"
    bad.write_text(base64.b64encode(b"a").decode() + " 0\nnot-a-line\n")
    with pytest.raises(TokenizerError, match=r"bad.tiktoken:2: not a '.tiktoken' line"):
        read_tiktoken_ranks(str(bad))
    empty = tmp_path / "empty.tiktoken"
    empty.write_text("\n")
    with pytest.raises(TokenizerError, match="holds no ranks"):
        TiktokenTokenizer(str(empty))
    with pytest.raises(TokenizerError, match="does not exist"):
        TiktokenTokenizer(str(tmp_path / "missing.tiktoken"))


def test_builtin_encoding_never_downloads(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    with pytest.raises(TokenizerError, match="not in tiktoken's cache.*tiktoken:/path/to/gpt2"):
        load_tokenizer("tiktoken:gpt2")
    with pytest.raises(TokenizerError, match="unknown tiktoken encoding"):
        TiktokenTokenizer("no_such_encoding")


def test_a_changed_file_is_read_again(educational_path, tmp_path):
    path = tmp_path / "changing.tiktoken"
    ranks = read_tiktoken_ranks(educational_path)
    write_tiktoken_file(ranks, str(path))
    before = TiktokenTokenizer(str(path))
    del ranks[max(ranks, key=ranks.get)]
    write_tiktoken_file(ranks, str(path))
    after = TiktokenTokenizer(str(path))
    assert after.vocab_size == before.vocab_size - 1
    assert after.unique_identifiers["sha256"] != before.unique_identifiers["sha256"]


def test_pickles(tiktoken_path, real_texts):
    tokenizer = TiktokenTokenizer(tiktoken_path)
    clone = pickle.loads(pickle.dumps(tokenizer))
    assert clone.encode(real_texts[1]).tolist() == tokenizer.encode(real_texts[1]).tolist()

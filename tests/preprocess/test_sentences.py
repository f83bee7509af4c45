"""tokenloom's rule-based sentence splitter on real text, and punkt's missing-data error."""

from __future__ import annotations

import pickle

import pytest

from tokenloom.errors import ConfigError
from tokenloom.preprocess.sentences import RuleSentenceSplitter, punkt_splitter
from tokenloom.preprocess.stdlib_corpus import docstrings, stdlib_root


@pytest.fixture(scope="module")
def prose() -> list:
    """Docstrings of the standard library: real English with abbreviations and code."""
    texts = []
    for name in ("textwrap.py", "argparse.py", "difflib.py", "email/message.py"):
        texts += [doc for _, doc in docstrings((stdlib_root() / name).read_text("utf-8"))]
    return [text for text in texts if len(text) > 200]


def test_known_sentences():
    split = RuleSentenceSplitter()
    text = (
        "Dr. Smith met Mr. J. R. Ewing, e.g. at 5 p.m. in the U.S. office! Was it fun? "
        '"Yes," he said.\n\n1. First item\nThen more.'
    )
    assert split(text) == [
        "Dr. Smith met Mr. J. R. Ewing, e.g. at 5 p.m. in the U.S. office!",
        "Was it fun?",
        '"Yes," he said.',
        "1. First item\nThen more.",
    ]


def test_real_text_keeps_every_character(prose):
    keep = RuleSentenceSplitter(keep_newlines=True)
    strip = RuleSentenceSplitter()
    total = 0
    for text in prose:
        pieces = keep(text)
        assert "".join(pieces) == text
        stripped = strip(text)
        assert [piece.strip() for piece in pieces if piece.strip()] == stripped
        total += len(stripped)
        for sentence in stripped:  # never cut after an abbreviation
            assert not sentence.lower().endswith((" e.g.", " i.e.", " etc.", " mr.", " dr."))
    assert total > 2 * len(prose)  # real splitting happened


def test_splitter_pickles_for_workers():
    split = RuleSentenceSplitter(keep_newlines=True)
    assert pickle.loads(pickle.dumps(split))("Alpha beta. Gamma delta.") == [
        "Alpha beta. ",
        "Gamma delta.",
    ]


def test_punkt_without_data_says_how_to_provide_it(tmp_path):
    with pytest.raises(ConfigError, match=r"punkt.*--punkt-path DIR.*--split-sentences-rules"):
        punkt_splitter("english", str(tmp_path))

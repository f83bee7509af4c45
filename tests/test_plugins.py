"""Plugins found by discovery: real installed distributions (a ``.dist-info`` with its
``entry_points.txt`` on ``sys.path``, as pip leaves them), read by importlib.metadata.

Nothing is registered by importing: the plugin's module is imported only when its name
is asked for, and a distribution removed from the path is gone at the next call.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy
import pytest

from tokenloom import plugins
from tokenloom.errors import ConfigError, TokenizerError
from tokenloom.tokenizers import load_tokenizer, parse_tokenizer_spec
from tokenloom.tokenizers.spec import plugin_kinds

_TOKENIZER = '''
from tokenloom.tokenizers.base import BaseTokenizer


class WordTokenizer(BaseTokenizer):
    """One id per whitespace-separated word of a vocabulary file; unknown words are 0."""

    def __init__(self, location, eod=None, num_threads=1):
        words = open(location, encoding="utf-8").read().split()
        self.ids = {word: i + 1 for i, word in enumerate(words)}
        self.vocab_size = len(words) + 2
        self.eod = self.vocab_size - 1 if eod is None else int(eod)
        self.pad = None
        self._finish_init({"location": location, "eod": eod}, {"class": "WordTokenizer"})

    def _encode_lists(self, texts):
        return [[self.ids.get(word, 0) for word in text.split()] for text in texts]

    def decode(self, ids):
        names = {i: w for w, i in self.ids.items()}
        return " ".join(names.get(int(i), "?") for i in ids)


def not_a_tokenizer(location, **options):
    return "nope"
'''

_SCHEDULER = """
from tokenloom.packing.schedulers import DpBalancedScheduler


class PluginScheduler(DpBalancedScheduler):
    pass
"""


def install(site: Path, name: str, module: str, source: str, entry_points: str) -> None:
    """A distribution as pip installs it: its module and its ``.dist-info``."""
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    install(
        folder,
        "tl_words",
        "tl_words_plugin",
        _TOKENIZER,
        """
        [tokenloom.tokenizers]
        words = tl_words_plugin:WordTokenizer
        broken = tl_words_plugin:missing_name
        wrong = tl_words_plugin:not_a_tokenizer
        hf = tl_words_plugin:WordTokenizer

        [tokenloom.packing_schedulers]
        plugin_fill = tl_words_plugin_sched:PluginScheduler
        """,
    )
    (folder / "tl_words_plugin_sched.py").write_text(_SCHEDULER)
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name in ("tl_words_plugin", "tl_words_plugin_sched"):
        sys.modules.pop(name, None)


def test_a_tokenizer_plugin_is_found_and_tokenizes(site: Path, tmp_path: Path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("the cat sat")
    assert "tl_words_plugin" not in sys.modules  # discovery imports nothing
    assert plugin_kinds() == ["broken", "words", "wrong"]  # "hf" is shadowed by the built-in
    assert parse_tokenizer_spec(f"words:{vocab}") == ("words", str(vocab))
    tokenizer = load_tokenizer(f"words:{vocab}")
    assert [list(ids) for ids in tokenizer.encode_batch(["the cat", "sat dog"])] == [[1, 2], [3, 0]]
    assert tokenizer.eod == 4 and tokenizer.encode("cat").dtype == numpy.int32
    assert load_tokenizer(f"words:{vocab}", eod=7).eod == 7


def test_loading_a_plugin_tokenizer_scans_the_entry_points_once(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The spec's parse finds the plugin, and the load uses it: one scan, not two."""
    import tokenloom.plugins as plugins

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("the cat sat")
    scans = []
    discover = plugins.discover
    monkeypatch.setattr(plugins, "discover", lambda group: scans.append(group) or discover(group))
    assert load_tokenizer(f"words:{vocab}").eod == 4
    assert scans == ["tokenloom.tokenizers"]


def test_a_built_in_kind_wins_over_a_plugin_of_its_name(site: Path):
    assert parse_tokenizer_spec("hf:tokenizer.json") == ("hf", "tokenizer.json")


def test_a_bad_plugin_is_a_clear_error(site: Path, tmp_path: Path):
    with pytest.raises(
        ConfigError,
        match=r"'broken' \(tl_words_plugin:missing_name, from tl_words 1.0\) failed to load",
    ):
        load_tokenizer("broken:x")
    with pytest.raises(
        TokenizerError, match=r"returned str, not a tokenloom.tokenizers.BaseTokenizer"
    ):
        load_tokenizer("wrong:x")
    with pytest.raises(TokenizerError, match="apply to built-in kinds"):
        load_tokenizer("words:x", merges="merges.txt")


def test_two_distributions_offering_one_name_are_refused(site: Path):
    install(
        site,
        "tl_other",
        "tl_other_plugin",
        "X = 1\n",
        "[tokenloom.tokenizers]\nwords = tl_other_plugin:X\n",
    )
    with pytest.raises(
        ConfigError,
        match=r"2 installed distributions offer .* 'words': tl_other 1.0 .*; tl_words 1.0",
    ):
        load_tokenizer("words:x")


def test_without_the_distribution_the_kind_is_unknown():
    assert plugins.find("tokenloom.tokenizers", "words", ()) is None
    with pytest.raises(TokenizerError, match="cannot tell what kind of tokenizer"):
        parse_tokenizer_spec("words:vocab")


def test_a_packing_scheduler_plugin_is_found(site: Path):
    from tokenloom.packing.schedulers import DpBalancedScheduler
    from tokenloom.packing.wrap import scheduler_class

    cls = scheduler_class("plugin_fill")
    assert issubclass(cls, DpBalancedScheduler) and cls.__name__ == "PluginScheduler"
    assert scheduler_class("dp_balanced") is DpBalancedScheduler
    with pytest.raises(
        ConfigError, match=r"'nope' is not one of \['cost_balanced', 'dp_balanced', 'plugin_fill'\]"
    ):
        scheduler_class("nope")


def test_an_unknown_group_is_refused():
    with pytest.raises(ConfigError, match="not a tokenloom plugin group"):
        plugins.discover("tokenloom.nothing")

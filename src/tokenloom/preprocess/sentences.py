"""Sentence splitting: tokenloom's rule-based splitter, and NLTK punkt where its data exists.

Megatron's ``--split-sentences`` uses NLTK's punkt model, whose data no installable
package ships (``nltk.download`` fetches it at run time; tokenloom never downloads).
:func:`punkt_splitter` loads it from a folder you provide (``--punkt-path``, or
``NLTK_DATA``) and says exactly that when it is missing.

:class:`RuleSentenceSplitter` (``--split-sentences-rules``) needs no data.  Its rules:

* a sentence ends after ``.``, ``!``, ``?`` or ``…`` (runs such as ``?!`` or ``...``
  included), optionally followed by closing quotes or brackets, when whitespace
  follows and the next word starts with an upper-case letter, a digit, or an opening
  quote or bracket;
* not after a known abbreviation (``Mr.``, ``Dr.``, ``e.g.``, ``etc.``, ``vs.``, ...),
  a single letter (initials such as ``J. R.``), or a number (``No. 5``, ``3. Then``
  is kept together only when the number is a list marker at the start of a line);
* a blank line (two newlines) always ends a sentence (paragraphs).

Without ``keep_newlines`` every sentence is stripped of surrounding whitespace, as
punkt does; with it, the whitespace after a sentence stays at its end, so the
sentences joined give back the text exactly.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any, Optional

from tokenloom.errors import ConfigError

ABBREVIATIONS = frozenset(
    """
mr mrs ms dr prof sr jr st mt vs etc e.g i.e cf al approx dept est fig figs inc ltd co corp
no nos vol vols pp p ed eds rev gen col lt sgt capt jan feb mar apr jun jul aug sep sept oct
nov dec mon tue wed thu fri sat sun u.s u.k a.m p.m ph.d b.sc m.sc
""".split()
)

_BOUNDARY = re.compile(
    r"""(?P<end>(?:[.!?\u2026]+)["'\u2019\u201d)\]]*)(?P<space>\s+)(?=["'\u2018\u201c(\[]?[A-Z0-9\u00c0-\u024f])"""
    r"""|(?P<para>\n[ \t]*\n\s*)"""
)
_WORD_BEFORE = re.compile(r"(\S+)$")


def _is_abbreviation(text: str, end: int) -> bool:
    match = _WORD_BEFORE.search(text, 0, end)
    if match is None:
        return False
    word = match.group(1).rstrip(".").lstrip("([\"'").lower()
    if word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
        return True
    return (
        word.isdigit()
        and len(word) <= 3
        and text[end - 1 : end] == "."
        and (match.start() == 0 or text[match.start() - 1] == "\n")
    )


class RuleSentenceSplitter:
    """Split text into sentences by rules (see the module docstring); picklable."""

    def __init__(self, keep_newlines: bool = False) -> None:
        self.keep_newlines = bool(keep_newlines)

    def _cuts(self, text: str) -> list[int]:
        cuts = []
        for match in _BOUNDARY.finditer(text):
            if match.group("para") is not None:
                cuts.append(match.end("para"))
                continue
            end = match.end("end")
            terminator = text[match.start("end")]
            if terminator == "." and _is_abbreviation(text, match.start("end") + 1):
                continue
            cuts.append(match.end("space") if self.keep_newlines else end)
        return cuts

    def __call__(self, text: str) -> list[str]:
        """``text`` split into sentences."""
        pieces, start = [], 0
        for cut in self._cuts(text) + [len(text)]:
            if cut > start:
                pieces.append(text[start:cut])
            start = cut
        if self.keep_newlines:
            return [piece for piece in pieces if piece]
        return [piece.strip() for piece in pieces if piece.strip()]

    def __repr__(self) -> str:
        return f"RuleSentenceSplitter(keep_newlines={self.keep_newlines})"


PUNKT_HELP = (
    "Megatron's --split-sentences needs NLTK (pip install nltk) and its punkt sentence model, "
    "which no installable package ships and tokenloom does not download: on a machine with "
    "network run python -c \"import nltk; nltk.download('punkt_tab', download_dir='DIR')\", "
    "copy DIR here and pass --punkt-path DIR (or set NLTK_DATA=DIR); or use "
    "--split-sentences-rules, tokenloom's rule-based splitter, which needs no data"
)


class PunktSplitter:
    """NLTK punkt loaded from ``data_dir`` (picklable: reloads in worker processes)."""

    def __init__(self, lang: str, data_dir: Optional[str], keep_newlines: bool) -> None:
        self.lang, self.data_dir, self.keep_newlines = lang, data_dir, keep_newlines
        self._split = _load_punkt(lang, data_dir, keep_newlines)

    def __getstate__(self) -> dict:
        return {"lang": self.lang, "data_dir": self.data_dir, "keep_newlines": self.keep_newlines}

    def __setstate__(self, state: dict) -> None:
        self.lang, self.data_dir = state["lang"], state["data_dir"]
        self.keep_newlines = state["keep_newlines"]
        self._split = _load_punkt(self.lang, self.data_dir, self.keep_newlines)

    def __call__(self, text: str) -> list[str]:
        """``text`` split into sentences."""
        return list(self._split(text))


def _load_punkt(lang: str, data_dir: Optional[str], keep_newlines: bool) -> Callable[[str], Any]:
    try:
        import nltk
        from nltk.tokenize.punkt import PunktLanguageVars, PunktSentenceTokenizer
    except ImportError:
        raise ConfigError(f"NLTK is not installed. {PUNKT_HELP}") from None
    if data_dir:
        nltk.data.path.insert(0, os.path.abspath(data_dir))
    try:
        splitter = nltk.tokenize.PunktTokenizer(lang)
    except (LookupError, OSError, ValueError) as error:
        where = data_dir or os.environ.get("NLTK_DATA") or "NLTK's default folders"
        raise ConfigError(
            f"no punkt data for {lang!r} in {where} ({type(error).__name__}). {PUNKT_HELP}"
        ) from None
    if not keep_newlines:
        return splitter.tokenize

    class _KeepNewlines(PunktLanguageVars):  # Megatron's variant: whitespace stays with a sentence
        _period_context_fmt = r"""
            \S*%(SentEndChars)s\s*(?=(?P<after_tok>%(NonWord)s|(?P<next_tok>\S+)))"""

    return PunktSentenceTokenizer(
        train_text=splitter._params,  # noqa: SLF001 (NLTK's API)
        lang_vars=_KeepNewlines(),
    ).tokenize


def punkt_splitter(
    lang: str = "english", data_dir: Optional[str] = None, keep_newlines: bool = False
) -> PunktSplitter:
    """Megatron's ``--split-sentences`` splitter, or a :class:`ConfigError` saying how to get it."""
    return PunktSplitter(lang, data_dir, keep_newlines)


__all__ = ["RuleSentenceSplitter", "PunktSplitter", "punkt_splitter", "ABBREVIATIONS", "PUNKT_HELP"]

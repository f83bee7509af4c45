"""Megatron-LM's ``TikTokenizer``: a JSON vocabulary of ranks, shifted by special ids.

The vocabulary file is a JSON list of ``{"rank", "token_bytes" (base64), "token_str"}``
objects, rank ``i`` at position ``i`` and the 256 single bytes first.  Ids are the
ranks plus ``num_special_tokens`` (1000 by default); ids ``0..num_special_tokens-1``
are ``<unk> <s> </s> <mask> <pad> <cls> <sep>`` followed by ``<SPECIAL_7>``... fillers.
Text is encoded with every special token allowed, so ``<s>`` inside a document
becomes id 1, as Megatron does.  ``vocab_size`` (Megatron's ``--vocab-size``, default
131,072) cuts the ranks at ``vocab_size - num_special_tokens`` and must not exceed
the ids the file provides.  The end-of-document id is ``</s>`` (2).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from typing import Any, Optional

from tokenloom.errors import TokenizerError
from tokenloom.tokenizers.base import BaseTokenizer, check_model_file, file_sha256
from tokenloom.untrusted_json import read_json_file

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>")
DEFAULT_VOCAB_SIZE = 1 << 17
_MAX_VOCAB_BYTES = 1 << 30  # a 128k-rank vocabulary is ~15 MB
PATTERNS = {
    "v1": r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    "v2": (
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
        r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
        r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
}


def read_rank_list(path: str, count: int, shift: int) -> dict[bytes, int]:
    """The first ``count`` ranks of a Megatron TikTokenizer vocabulary, each plus ``shift``."""
    try:  # UntrustedFileError (a ValueError): too large, too deep, not JSON
        entries = read_json_file(
            path, what="TikTokenizer vocabulary", max_bytes=_MAX_VOCAB_BYTES, max_depth=8
        )
    except (OSError, ValueError) as error:
        raise TokenizerError(f"{path}: cannot read the TikTokenizer vocabulary: {error}") from None
    if not isinstance(entries, list):
        raise TokenizerError(
            f"{path}: a TikTokenizer vocabulary is a JSON list of "
            "{rank, token_bytes, token_str} objects; got "
            f"{type(entries).__name__}"
        )
    ranks: dict[bytes, int] = {}
    for position, entry in enumerate(entries[:count]):
        if not isinstance(entry, dict) or entry.get("rank") != position:
            raise TokenizerError(
                f'{path}: entry {position} is not {{"rank": {position}, '
                f'"token_bytes": ...}}: {str(entry)[:80]}'
            )
        try:
            token = base64.b64decode(entry["token_bytes"], validate=True)
        except (KeyError, TypeError, ValueError) as error:
            raise TokenizerError(f"{path}: entry {position}: bad token_bytes ({error})") from error
        if position < 256 and token != bytes([position]):
            raise TokenizerError(f"{path}: entry {position} must be the single byte {position}")
        ranks[token] = position + shift
    if len(ranks) != min(len(entries), count):
        raise TokenizerError(f"{path}: the vocabulary repeats a token")
    return ranks


class MegatronTikTokenizer(BaseTokenizer):
    """Megatron's ``TikTokenizer`` (see the module docstring).

    Args:
        path: the JSON vocabulary file.
        vocab_size: total ids, special ids included (Megatron's ``--vocab-size``).
        num_special_tokens: ids reserved before the ranks (``--tiktoken-num-special-tokens``).
        pattern: ``v1`` or ``v2`` (``--tiktoken-pattern``).
    """

    def __init__(
        self,
        path: str,
        vocab_size: Optional[int] = None,
        num_special_tokens: int = 1000,
        pattern: str = "v2",
    ) -> None:
        tiktoken = _import_tiktoken()
        self.path = check_model_file(path, "TikTokenizer", "pass the JSON vocabulary file")
        vocab_size = DEFAULT_VOCAB_SIZE if vocab_size is None else int(vocab_size)
        specials = self._special_names(int(num_special_tokens), vocab_size)
        if pattern not in PATTERNS:
            raise TokenizerError(f"--tiktoken-pattern {pattern!r}: use v1 or v2")
        ranks = self._ranks(self.path, vocab_size, len(specials))
        self._specials = {name: number for number, name in enumerate(specials)}
        self._encoding = tiktoken.Encoding(
            name=os.path.basename(os.path.dirname(self.path)),
            pat_str=PATTERNS[pattern],
            mergeable_ranks=ranks,
            special_tokens=self._specials,
        )
        self.vocab_size, self.eod, self.pad = (
            vocab_size,
            self._specials["</s>"],
            self._specials["<pad>"],
        )
        self._finish_init(
            {
                "path": self.path,
                "vocab_size": vocab_size,
                "num_special_tokens": num_special_tokens,
                "pattern": pattern,
            },
            {
                "class": type(self).__name__,
                "tokenizer_path": [self.path],
                "sha256": file_sha256(self.path),
                "num_special_tokens": len(specials),
                "pattern": pattern,
            },
        )

    @staticmethod
    def _ranks(path: str, vocab_size: int, specials: int) -> dict[bytes, int]:
        """The ranks of the vocabulary file ``path``, enough of them for ``vocab_size``."""
        ranks = read_rank_list(path, vocab_size - specials, specials)
        if len(ranks) + specials < vocab_size:
            raise TokenizerError(
                f"{path}: --vocab-size {vocab_size} needs {vocab_size - specials} ranks "
                f"but the file has {len(ranks)}; pass --vocab-size {len(ranks) + specials}"
            )
        return ranks

    @staticmethod
    def _special_names(count: int, vocab_size: int) -> list[str]:
        if not len(SPECIAL_TOKENS) <= count < vocab_size:
            raise TokenizerError(
                f"--tiktoken-num-special-tokens {count} must lie in "
                f"{len(SPECIAL_TOKENS)}..{vocab_size - 1} (below --vocab-size)"
            )
        return list(SPECIAL_TOKENS) + [f"<SPECIAL_{i}>" for i in range(len(SPECIAL_TOKENS), count)]

    def _encode_lists(self, texts: Sequence[str]) -> list[list[int]]:
        encode = self._encoding.encode
        return [encode(text, allowed_special="all") for text in texts]

    def special_tokens(self) -> dict[str, int]:
        """The named special tokens (the fillers left out) and their ids."""
        return {name: self._specials[name] for name in SPECIAL_TOKENS}

    def decode(self, ids) -> str:
        """Text of ``ids`` (special ids shown as their names)."""
        try:
            return self._encoding.decode(self._id_list(ids))
        except (KeyError, ValueError) as error:
            raise TokenizerError(f"{self.path}: cannot decode: {error}") from error

    @property
    def backend(self):
        """The underlying ``tiktoken.Encoding``."""
        return self._encoding


__all__ = [
    "MegatronTikTokenizer",
    "read_rank_list",
    "PATTERNS",
    "SPECIAL_TOKENS",
    "DEFAULT_VOCAB_SIZE",
]


def _import_tiktoken() -> Any:
    """The ``tiktoken`` module, or a TokenizerError naming the extra to install."""
    try:
        import tiktoken
    except ImportError as error:
        raise TokenizerError(
            "Megatron's TikTokenizer needs the 'tiktoken' package: "
            "pip install 'tokenloom[tokenizers]'"
        ) from error
    return tiktoken

"""SentencePiece models (a ``.model`` file from ``SentencePieceTrainer``).

Batches are encoded by one ``SentencePieceProcessor.encode(list_of_texts)`` call, which
runs in C++ over the whole list.  BOS/EOS are not added (as Megatron's
``SentencePieceTokenizer`` and ``Llama2Tokenizer`` on main); ``add_bos`` prepends the
model's BOS to every text, as core_v0.16.1's legacy Llama 2 tokenizer
(``--legacy-tokenizer``) did.  The end-of-document id is the model's ``eos_id`` (or
``eod``), the padding id its ``pad_id`` (None when disabled).

``ignore_extra_whitespaces=False`` (Megatron's
``--no-tokenizer-sentencepiece-ignore-extra-whitespaces``) keeps runs of spaces that the
model would drop, the way Megatron does it: a marker character is spliced between
spaces, each marker-terminated part is encoded alone and its last id dropped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Optional, Union

from tokenloom.errors import TokenizerError
from tokenloom.tokenizers.base import BaseTokenizer, check_model_file, file_sha256


def _import_sentencepiece():
    try:
        import sentencepiece
    except ImportError as error:
        raise TokenizerError(
            "SentencePiece models need the 'sentencepiece' package: "
            "pip install 'tokenloom[tokenizers]'"
        ) from error
    return sentencepiece


# Megatron's marker for kept spaces: a character no model is likely to hold
_MARKER = "\u262f"
_EXTRA_SPACE = re.compile(r"(?<= )(?= )|^ | $")


class SentencePieceTokenizer(BaseTokenizer):
    """A SentencePiece model loaded from ``path``.

    Args:
        path: the ``.model`` file.
        eod: end-of-document piece or id; default the model's EOS.
        num_threads: threads of the batch encode (1: parallelism comes from preprocess
            workers instead).
        add_bos: prepend the model's BOS id to every text (legacy Llama 2).
        ignore_extra_whitespaces: False keeps runs of spaces (see the module docstring).
    """

    def __init__(
        self,
        path: str,
        eod: Union[str, int, None] = None,
        num_threads: int = 1,
        add_bos: bool = False,
        ignore_extra_whitespaces: bool = True,
    ) -> None:
        sentencepiece = _import_sentencepiece()
        self.path = check_model_file(
            path, "SentencePiece", "pass the .model file written by SentencePieceTrainer"
        )
        self.num_threads = max(int(num_threads), 1)
        self._processor = sentencepiece.SentencePieceProcessor()
        try:
            self._processor.Load(self.path)
        except (OSError, RuntimeError) as error:
            raise TokenizerError(f"{self.path}: not a SentencePiece model: {error}") from error
        self.vocab_size = int(self._processor.get_piece_size())
        self.eod = self._resolve(eod, self._processor.eos_id(), "eod")
        self.pad = self._resolve(None, self._processor.pad_id(), "pad")
        self.add_bos = bool(add_bos)
        if self.add_bos and self._processor.bos_id() < 0:
            raise TokenizerError(f"{self.path}: the model has no BOS piece to prepend")
        self.keep_extra_whitespaces = not ignore_extra_whitespaces and (
            self._processor.encode_as_pieces("x  y") == self._processor.encode_as_pieces("x y")
        )
        self._finish_init(
            {
                "path": self.path,
                "eod": eod,
                "num_threads": num_threads,
                "add_bos": self.add_bos,
                "ignore_extra_whitespaces": ignore_extra_whitespaces,
            },
            {
                "class": type(self).__name__,
                "tokenizer_path": [self.path],
                "sha256": file_sha256(self.path),
                "add_bos": self.add_bos,
                "keep_extra_whitespaces": self.keep_extra_whitespaces,
            },
        )

    def _resolve(self, explicit, default: int, what: str) -> Optional[int]:
        if explicit is None:
            return int(default) if default >= 0 else None
        if isinstance(explicit, int) or str(explicit).isdigit():
            value = int(explicit)
        else:
            value = int(self._processor.piece_to_id(explicit))
            if value == self._processor.unk_id() and explicit != self._processor.id_to_piece(value):
                raise TokenizerError(f"{self.path}: {what} piece {explicit!r} is not in the model")
        if not 0 <= value < self.vocab_size:
            raise TokenizerError(
                f"{self.path}: {what} id {value} is outside 0..{self.vocab_size - 1}"
            )
        return value

    def _encode_plain(self, texts: list[str]) -> list[list[int]]:
        try:
            return self._processor.encode(
                texts,
                out_type=int,
                add_bos=self.add_bos,
                add_eos=False,
                num_threads=self.num_threads,
            )
        except TypeError as error:
            raise TokenizerError(f"{self.path}: every document must be a str: {error}") from error

    def _encode_lists(self, texts: Sequence[str]) -> list[list[int]]:
        if not self.keep_extra_whitespaces:
            return self._encode_plain(list(texts))
        parts, owners = [], []
        for number, text in enumerate(texts):
            marked = _EXTRA_SPACE.sub(f" {_MARKER} ", text).rstrip()
            for part in marked.split(_MARKER):
                if part:
                    parts.append(part + _MARKER)
                    owners.append(number)
        saved, self.add_bos = self.add_bos, False
        try:
            encoded = self._encode_plain(parts)
        finally:
            self.add_bos = saved
        bos = [int(self._processor.bos_id())] if self.add_bos else []
        out: list[list[int]] = [list(bos) for _ in texts]
        for owner, ids in zip(owners, encoded):
            out[owner].extend(ids[:-1])
        return out

    @property
    def bos(self) -> Optional[int]:
        """The model's BOS id (None when it has none)."""
        value = int(self._processor.bos_id())
        return value if value >= 0 else None

    def special_tokens(self) -> dict[str, int]:
        """The model's control pieces (unk, bos, eos, pad) and their ids."""
        ids = (
            self._processor.unk_id(),
            self._processor.bos_id(),
            self._processor.eos_id(),
            self._processor.pad_id(),
        )
        return {self._processor.id_to_piece(i): int(i) for i in ids if i >= 0}

    def decode(self, ids) -> str:
        """Text of ``ids`` (control ids such as EOS decode to nothing)."""
        ids = self._id_list(ids)
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise TokenizerError(f"{self.path}: id {bad[0]} is outside 0..{self.vocab_size - 1}")
        return self._processor.decode(ids)

    @property
    def backend(self):
        """The underlying ``sentencepiece.SentencePieceProcessor``."""
        return self._processor


__all__ = ["SentencePieceTokenizer"]

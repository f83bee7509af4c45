"""Hugging Face ``tokenizers`` models (a ``tokenizer.json`` file or a folder holding one).

Encoding goes through ``Tokenizer.encode_batch_fast`` (no offsets), which runs in
Rust with the GIL released.  Post-processor special tokens (BOS/CLS/...) are not
added: documents are separated by the end-of-document token (``--append-eod``).

The end-of-document and padding ids are taken, in order, from the ``eod``/``pad``
arguments, from ``tokenizer_config.json`` beside the file (``eos_token``,
``pad_token``), then from the first well-known special token in the vocabulary.
"""

from __future__ import annotations

import json
import os
from typing import Any, List, Optional, Sequence, Union

from tokenloom.errors import TokenizerError
from tokenloom.tokenizers.base import BaseTokenizer, file_sha256, lists_to_flat

EOD_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "<|im_end|>")
PAD_CANDIDATES = ("<pad>", "[PAD]", "<|pad|>", "<|padding|>", "<|finetune_right_pad_id|>")


def _import_tokenizers():
    try:
        import tokenizers
    except ImportError as error:
        raise TokenizerError("Hugging Face tokenizers need the 'tokenizers' package: "
                             "pip install 'tokenloom[tokenizers]'") from error
    return tokenizers


def resolve_tokenizer_json(path: str) -> str:
    """The ``tokenizer.json`` for ``path`` (the file itself, or ``path/tokenizer.json``)."""
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(path):
        raise TokenizerError(f"Hugging Face tokenizer file {path} does not exist; pass the path "
                             "of a tokenizer.json (or of a folder that contains one)")
    return path


def _config_token(config: dict, field: str) -> Optional[str]:
    value = config.get(field)
    if isinstance(value, dict):  # {"content": "</s>", ...}
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_config(json_path: str) -> dict:
    config_path = os.path.join(os.path.dirname(json_path), "tokenizer_config.json")
    if not os.path.isfile(config_path):
        return {}
    try:
        with open(config_path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError) as error:
        raise TokenizerError(f"{config_path}: cannot read tokenizer config: {error}") from error
    return config if isinstance(config, dict) else {}


class HFTokenizer(BaseTokenizer):
    """A ``tokenizers.Tokenizer`` loaded from ``path``.

    Args:
        path: a ``tokenizer.json`` or a folder containing one.
        eod: end-of-document token (its text or its id); auto-detected when None.
        pad: padding token (text or id); auto-detected when None, absent -> ``None``.
    """

    def __init__(self, path: str, eod: Union[str, int, None] = None,
                 pad: Union[str, int, None] = None) -> None:
        tokenizers = _import_tokenizers()
        json_path = resolve_tokenizer_json(path)
        try:
            self._tokenizer = tokenizers.Tokenizer.from_file(json_path)
        except Exception as error:  # the Rust loader raises plain Exception
            raise TokenizerError(f"{json_path}: not a valid Hugging Face tokenizer.json: "
                                 f"{error}") from error
        self.path = json_path
        self.vocab_size = int(self._tokenizer.get_vocab_size(with_added_tokens=True))
        config = _read_config(json_path)
        self.eod = self._pick(eod, _config_token(config, "eos_token"), EOD_CANDIDATES, "eod")
        self.pad = self._pick(pad, _config_token(config, "pad_token"), PAD_CANDIDATES, "pad")
        self._batch = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)
        self._finish_init({"path": json_path, "eod": eod, "pad": pad}, {
            "class": type(self).__name__, "tokenizer_path": [json_path],
            "sha256": file_sha256(json_path)})

    def _token_id(self, token: Union[str, int], what: str) -> int:
        if isinstance(token, int) or (isinstance(token, str) and token.isdigit()):
            value = int(token)
            if not 0 <= value < self.vocab_size:
                raise TokenizerError(f"{self.path}: {what} id {value} is outside the vocabulary "
                                     f"(0..{self.vocab_size - 1})")
            return value
        value = self._tokenizer.token_to_id(token)
        if value is None:
            raise TokenizerError(f"{self.path}: {what} token {token!r} is not in the vocabulary; "
                                 "pass a token that is (or its id)")
        return int(value)

    def _pick(self, explicit, configured, candidates, what: str) -> Optional[int]:
        if explicit is not None:
            return self._token_id(explicit, what)
        for token in ((configured,) if configured else ()) + candidates:
            value = self._tokenizer.token_to_id(token)
            if value is not None:
                return int(value)
        return None

    def _encode_native(self, texts: List[str]) -> list:
        try:
            return self._batch(texts, add_special_tokens=False)
        except TypeError as error:
            raise TokenizerError(f"{self.path}: every document must be a str: {error}") from error

    def _flat_from_native(self, native: list):
        return lists_to_flat([encoding.ids for encoding in native])

    def _encode_lists(self, texts: Sequence[str]) -> List[List[int]]:
        return [encoding.ids for encoding in self._encode_native(list(texts))]

    def decode(self, ids) -> str:
        """Text of ``ids``, special tokens included (so an appended eod shows up)."""
        return self._tokenizer.decode(self._id_list(ids), skip_special_tokens=False)

    @property
    def backend(self) -> Any:
        """The underlying ``tokenizers.Tokenizer``."""
        return self._tokenizer


__all__ = ["HFTokenizer", "resolve_tokenizer_json", "EOD_CANDIDATES", "PAD_CANDIDATES"]

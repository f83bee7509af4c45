"""Hugging Face ``tokenizers`` models (a ``tokenizer.json`` file or a folder holding one).

Encoding goes through ``Tokenizer.encode_batch_fast`` (no offsets), which runs in
Rust with the GIL released.  Whatever the tokenizer's post-processor adds (a Llama-style
BOS ``<s>``, ...) is written, as Megatron-LM main's ``HuggingFaceTokenizer`` does
(``add_special_tokens=False``, Megatron's ``--tokenizer-hf-no-include-special-tokens``
and core_v0.16.1's default, leaves it out).  Special-token *text* inside a document is
matched as the special token, as the ``tokenizers`` library always does.

A GPT-2 style pair ``vocab.json`` + ``merges.txt`` (Megatron's ``GPT2BPETokenizer``)
loads with ``merges=``: byte-level BPE, ``<|endoftext|>`` its only special token.

The end-of-document and padding ids are taken, in order, from the ``eod``/``pad``
arguments, from ``tokenizer_config.json`` beside the file (``eos_token``,
``pad_token``), then from the first well-known special token in the vocabulary.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Optional, Union

from tokenloom.attributes import read_attribute
from tokenloom.errors import TokenizerError, UntrustedFileError
from tokenloom.tokenizers.base import BaseTokenizer, check_model_file, file_sha256, lists_to_flat
from tokenloom.untrusted_json import read_bounded, read_json_file

MAX_TOKENIZER_BYTES = 1 << 30
"""The largest ``tokenizer.json`` read (the largest public ones are tens of megabytes)."""
_MAX_CONFIG_BYTES = 64 << 20  # tokenizer_config.json: chat templates included, kilobytes

EOD_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "<|im_end|>")
PAD_CANDIDATES = ("<pad>", "[PAD]", "<|pad|>", "<|padding|>", "<|finetune_right_pad_id|>")


def _import_tokenizers():
    try:
        import tokenizers
    except ImportError as error:
        raise TokenizerError(
            "Hugging Face tokenizers need the 'tokenizers' package: "
            "pip install 'tokenloom[tokenizers]'"
        ) from error
    return tokenizers


def resolve_tokenizer_json(path: str) -> str:
    """The ``tokenizer.json`` for ``path`` (the file itself, or ``path/tokenizer.json``)."""
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(path):
        raise TokenizerError(
            f"Hugging Face tokenizer file {path} does not exist; pass the path "
            "of a tokenizer.json (or of a folder that contains one)"
        )
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
        config = read_json_file(config_path, what="tokenizer config", max_bytes=_MAX_CONFIG_BYTES)
    except (OSError, ValueError) as error:  # UntrustedFileError is a ValueError
        raise TokenizerError(f"{config_path}: cannot read tokenizer config: {error}") from None
    return config if isinstance(config, dict) else {}


def _load_tokenizer_json(tokenizers, json_path: str):
    try:  # read bounded here: the Rust loader reads any size (its nesting limit is 128)
        text = read_bounded(json_path, what="tokenizer.json", max_bytes=MAX_TOKENIZER_BYTES)
    except (OSError, UntrustedFileError) as error:
        raise TokenizerError(f"{json_path}: cannot read the tokenizer: {error}") from None
    try:
        return tokenizers.Tokenizer.from_str(text.decode("utf-8"))
    except Exception as error:  # the Rust loader raises plain Exception
        hint = ""
        if _looks_like_gpt2_vocab(json_path):
            hint = (
                "; this looks like a GPT-2 vocab.json (token -> id): pass its merges.txt "
                "too, e.g. --tokenizer-type GPT2BPETokenizer --vocab-file vocab.json "
                "--merge-file merges.txt, or --tokenizer hf:vocab.json --merge-file "
                "merges.txt"
            )
        raise TokenizerError(
            f"{json_path}: not a valid Hugging Face tokenizer.json: {error}{hint}"
        ) from error


def _looks_like_gpt2_vocab(path: str) -> bool:
    try:
        data = read_json_file(path, what="vocab.json", max_bytes=MAX_TOKENIZER_BYTES)
    except (OSError, ValueError):  # UntrustedFileError is a ValueError: too big or too deep
        return False
    return (
        isinstance(data, dict)
        and "model" not in data
        and bool(data)
        and all(isinstance(value, int) for value in list(data.values())[:100])
    )


def gpt2_bpe_from_files(tokenizers, vocab_path: str, merges_path: str):
    """A byte-level BPE ``tokenizers.Tokenizer`` from GPT-2's ``vocab.json`` + ``merges.txt``.

    What ``transformers``' GPT-2 tokenizer builds from the two files: no prefix space,
    nothing added by the post-processor, ``<|endoftext|>`` the one special token.
    """
    from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors

    merges_path = check_model_file(merges_path, "GPT-2 merges", "pass the merges.txt")
    try:
        model = models.BPE.from_file(vocab_path, merges_path)
    except Exception as error:
        raise TokenizerError(
            f"{vocab_path} + {merges_path}: not a GPT-2 vocab.json and merges.txt pair: {error}"
        ) from error
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    return tokenizer


class HFTokenizer(BaseTokenizer):
    """A ``tokenizers.Tokenizer`` loaded from ``path``.

    Args:
        path: a ``tokenizer.json`` or a folder containing one; with ``merges``, a GPT-2
            ``vocab.json``.
        eod: end-of-document token (its text or its id); auto-detected when None.
        pad: padding token (text or id); auto-detected when None, absent -> ``None``.
        add_special_tokens: write what the post-processor adds (BOS, ...); Megatron-LM
            main's default.
        merges: the ``merges.txt`` of a GPT-2 ``vocab.json`` given as ``path``.
    """

    def __init__(
        self,
        path: str,
        eod: Union[str, int, None] = None,
        pad: Union[str, int, None] = None,
        add_special_tokens: bool = True,
        merges: Optional[str] = None,
    ) -> None:
        tokenizers = _import_tokenizers()
        if merges is not None:
            json_path = check_model_file(path, "GPT-2 vocab", "pass the vocab.json")
            self._tokenizer = gpt2_bpe_from_files(tokenizers, json_path, merges)
        else:
            json_path = resolve_tokenizer_json(path)
            self._tokenizer = _load_tokenizer_json(tokenizers, json_path)
        self.path = json_path
        self.add_special_tokens = bool(add_special_tokens)
        self.vocab_size = int(self._tokenizer.get_vocab_size(with_added_tokens=True))
        config = _read_config(json_path)
        self.eod = self._pick(eod, _config_token(config, "eos_token"), EOD_CANDIDATES, "eod")
        self.pad = self._pick(pad, _config_token(config, "pad_token"), PAD_CANDIDATES, "pad")
        self._batch = read_attribute(
            self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch
        )
        files = [json_path] + ([os.path.abspath(merges)] if merges is not None else [])
        self._finish_init(
            {
                "path": json_path,
                "eod": eod,
                "pad": pad,
                "add_special_tokens": self.add_special_tokens,
                "merges": merges,
            },
            {
                "class": type(self).__name__,
                "tokenizer_path": files,
                "sha256": "+".join(file_sha256(name) for name in files),
                "add_special_tokens": self.add_special_tokens,
            },
        )

    def _token_id(self, token: Union[str, int], what: str) -> int:
        if isinstance(token, int) or (isinstance(token, str) and token.isdigit()):
            value = int(token)
            if not 0 <= value < self.vocab_size:
                raise TokenizerError(
                    f"{self.path}: {what} id {value} is outside the vocabulary "
                    f"(0..{self.vocab_size - 1})"
                )
            return value
        value = self._tokenizer.token_to_id(token)
        if value is None:
            raise TokenizerError(
                f"{self.path}: {what} token {token!r} is not in the vocabulary; "
                "pass a token that is (or its id)"
            )
        return int(value)

    def _pick(self, explicit, configured, candidates, what: str) -> Optional[int]:
        if explicit is not None:
            return self._token_id(explicit, what)
        for token in ((configured,) if configured else ()) + candidates:
            value = self._tokenizer.token_to_id(token)
            if value is not None:
                return int(value)
        return None

    def _encode_native(self, texts: list[str]) -> list:
        try:
            return self._batch(texts, add_special_tokens=self.add_special_tokens)
        except TypeError as error:
            raise TokenizerError(f"{self.path}: every document must be a str: {error}") from error

    def _flat_from_native(self, native: list):
        return lists_to_flat([encoding.ids for encoding in native])

    def _encode_lists(self, texts: Sequence[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self._encode_native(list(texts))]

    def special_tokens(self) -> dict[str, int]:
        """The added tokens marked special (``<s>``, ``</s>``, ...) and their ids."""
        decoder = self._tokenizer.get_added_tokens_decoder()
        return {token.content: int(i) for i, token in sorted(decoder.items()) if token.special}

    def added_by_post_processor(self) -> list[int]:
        """Ids the post-processor adds to an empty text (``[1]`` for a Llama-style BOS)."""
        if not self.add_special_tokens:
            return []
        return list(self._tokenizer.encode("", add_special_tokens=True).ids)

    def decode(self, ids) -> str:
        """Text of ``ids``, special tokens included (so an appended eod shows up)."""
        return self._tokenizer.decode(self._id_list(ids), skip_special_tokens=False)

    @property
    def backend(self) -> Any:
        """The underlying ``tokenizers.Tokenizer``."""
        return self._tokenizer


__all__ = ["HFTokenizer", "resolve_tokenizer_json", "EOD_CANDIDATES", "PAD_CANDIDATES"]

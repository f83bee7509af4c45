"""Train a small byte-level BPE with Hugging Face ``tokenizers`` (used by the demo and tests).

Byte-level BPE (GPT-2 style) decodes exactly back to its input, so round trips
through ``.bin``/``.idx`` files can be checked character for character.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable, Sequence

from tokenloom.atomic import atomic_write_bytes
from tokenloom.attributes import has_attribute
from tokenloom.errors import TokenizerError
from tokenloom.tokenizers.huggingface import HFTokenizer, _import_tokenizers

DEFAULT_SPECIAL_TOKENS = ("<|endoftext|>", "<|pad|>")


def train_byte_level_bpe(
    texts: Iterable[str],
    vocab_size: int,
    output_path: str,
    special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS,
) -> HFTokenizer:
    """Train a byte-level BPE on ``texts``, save it as ``output_path`` (tokenizer.json), load it.

    The first special token becomes the end-of-document token, ``<|pad|>`` the pad token.
    ``vocab_size`` counts the 256 byte tokens and the special tokens.
    """
    tokenizers = _import_tokenizers()
    minimum = 256 + len(special_tokens)
    if int(vocab_size) < minimum:
        raise TokenizerError(
            f"vocab_size {vocab_size} is too small for a byte-level BPE: it "
            f"needs at least {minimum} (256 bytes + special tokens)"
        )
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=int(vocab_size),
        special_tokens=list(special_tokens),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    output_path = os.fspath(output_path)
    atomic_write_bytes(output_path, tokenizer.to_str(pretty=False).encode("utf-8"))
    eod = special_tokens[0] if special_tokens else None
    pad = "<|pad|>" if "<|pad|>" in special_tokens else None
    return HFTokenizer(output_path, eod=eod, pad=pad)


def _unicode_to_byte() -> dict[str, int]:
    """Inverse of the byte-level alphabet: printable Latin-1 bytes stand for themselves,
    the other bytes for the characters from U+0100 on, in byte order."""
    printable = (
        set(range(ord("!"), ord("~") + 1))
        | set(range(ord("\u00a1"), ord("\u00ac") + 1))
        | set(range(ord("\u00ae"), ord("\u00ff") + 1))
    )
    mapping, shifted = {}, 0
    for byte in range(256):
        if byte in printable:
            mapping[chr(byte)] = byte
        else:
            mapping[chr(256 + shifted)] = byte
            shifted += 1
    return mapping


def byte_level_bpe_ranks(tokenizer: HFTokenizer) -> dict[bytes, int]:
    """tiktoken mergeable ranks equivalent to a byte-level BPE from :func:`train_byte_level_bpe`.

    Tokens keep their training order (the merge order), special tokens are left out.
    """
    to_byte = _unicode_to_byte()
    backend = tokenizer.backend
    special = (
        set(backend.get_added_tokens_decoder())
        if has_attribute(backend, "get_added_tokens_decoder")
        else set()
    )
    vocab = sorted(backend.get_vocab(with_added_tokens=False).items(), key=lambda item: item[1])
    ranks: dict[bytes, int] = {}
    for token, token_id in vocab:
        if token_id in special:
            continue
        try:
            ranks[bytes(to_byte[char] for char in token)] = len(ranks)
        except KeyError as error:
            raise TokenizerError(f"{tokenizer.path}: token {token!r} is not byte-level") from error
    return ranks


def write_tiktoken_file(ranks: dict[bytes, int], path: str) -> None:
    """Write mergeable ranks as a ``.tiktoken`` file (``base64(token) rank`` per line)."""
    lines = (
        f"{base64.b64encode(token).decode('ascii')} {rank}\n"
        for token, rank in sorted(ranks.items(), key=lambda item: item[1])
    )
    atomic_write_bytes(os.fspath(path), "".join(lines).encode("ascii"))


def train_sentencepiece(
    texts: Iterable[str],
    vocab_size: int,
    model_prefix: str,
    model_type: str = "bpe",
    pad: bool = False,
):
    """Train a SentencePiece model that decodes exactly back to its input; return it loaded.

    Identity normalisation, no whitespace cleanup and byte fallback make every text
    round-trip.  Writes ``{model_prefix}.model`` (and ``.vocab``).  ``pad`` reserves id 3
    for ``<pad>``.
    """
    try:
        import sentencepiece
    except ImportError as error:
        raise TokenizerError(
            "training a SentencePiece model needs the 'sentencepiece' package: "
            "pip install 'tokenloom[tokenizers]'"
        ) from error
    from tokenloom.tokenizers.sentencepiece_model import SentencePieceTokenizer

    model_prefix = os.fspath(model_prefix)
    os.makedirs(os.path.dirname(os.path.abspath(model_prefix)), exist_ok=True)
    sentences = (line for text in texts for line in text.splitlines() if line.strip())
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=sentences,
            model_prefix=model_prefix,
            vocab_size=int(vocab_size),
            model_type=model_type,
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,
            allow_whitespace_only_pieces=True,
            split_digits=False,
            byte_fallback=True,
            character_coverage=1.0,
            max_sentence_length=1 << 16,
            pad_id=3 if pad else -1,
            minloglevel=2,
        )
    except RuntimeError as error:
        raise TokenizerError(f"SentencePiece training failed: {error}") from error
    return SentencePieceTokenizer(model_prefix + ".model")


__all__ = [
    "train_byte_level_bpe",
    "byte_level_bpe_ranks",
    "write_tiktoken_file",
    "train_sentencepiece",
    "DEFAULT_SPECIAL_TOKENS",
]

"""Megatron-LM's tokenizer flags (``--tokenizer-type`` ...) to a tokenloom tokenizer.

:func:`build_megatron_tokenizer` gives, for every ``--tokenizer-type`` that
``tools/preprocess_data.py`` can write GPT data with, a tokenizer producing the ids
Megatron-LM main writes (see ``docs/preprocessing.md`` for the rules per type):

* ``HuggingFaceTokenizer``: ``--tokenizer-model`` (a folder with ``tokenizer.json``, or
  the file); what the post-processor adds is written unless
  ``--tokenizer-hf-no-include-special-tokens`` (core_v0.16.1's default).
* ``GPT2BPETokenizer``: ``--vocab-file`` + ``--merge-file``.
* ``SentencePieceTokenizer``, ``GPTSentencePieceTokenizer``, ``Llama2Tokenizer``:
  ``--tokenizer-model``; no BOS/EOS, except ``Llama2Tokenizer --legacy-tokenizer``
  (core_v0.16.1's legacy Llama 2 tokenizer: BOS on every document).
* ``TikTokenizer``: ``--tokenizer-model`` (JSON rank list), ``--vocab-size``,
  ``--tiktoken-num-special-tokens``, ``--tiktoken-pattern``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tokenloom.errors import TokenizerError
from tokenloom.tokenizers.base import BaseTokenizer

HF_TYPES = ("HuggingFaceTokenizer",)
SP_TYPES = ("SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer")
TYPES = HF_TYPES + ("GPT2BPETokenizer",) + SP_TYPES + ("TikTokenizer",)
NOT_FOR_TEXT = (
    "BertWordPieceLowerCase",
    "BertWordPieceCase",
    "MultimodalTokenizer",
    "NullTokenizer",
    "NullMultimodalTokenizer",
    "SFTTokenizer",
)


@dataclass(frozen=True)
class MegatronTokenizerArgs:
    """Megatron-LM's tokenizer arguments, as ``tools/preprocess_data.py`` takes them."""

    tokenizer_type: str
    """``--tokenizer-type``: one of :data:`TYPES`."""
    tokenizer_model: Optional[str] = None
    """``--tokenizer-model``: the model file or folder."""
    vocab_file: Optional[str] = None
    """``--vocab-file`` (GPT2BPETokenizer)."""
    merge_file: Optional[str] = None
    """``--merge-file`` (GPT2BPETokenizer)."""
    vocab_size: Optional[int] = None
    """``--vocab-size`` (TikTokenizer; default 131,072)."""
    hf_include_special_tokens: Optional[bool] = None
    """``--tokenizer-hf-(no-)include-special-tokens``; None: Megatron main's default (include)."""
    legacy_tokenizer: bool = False
    """``--legacy-tokenizer`` (core_v0.16.1): the old tokenizer classes' behaviour."""
    sentencepiece_ignore_extra_whitespaces: bool = True
    """False: ``--no-tokenizer-sentencepiece-ignore-extra-whitespaces``."""
    tiktoken_pattern: Optional[str] = None
    """``--tiktoken-pattern`` ``v1``/``v2`` (default ``v2``)."""
    tiktoken_num_special_tokens: int = 1000
    """``--tiktoken-num-special-tokens``."""


def _need(value: Optional[str], flag: str, kind: str) -> str:
    if not value:
        raise TokenizerError(f"--tokenizer-type {kind} needs {flag}")
    return value


def _hf(args: MegatronTokenizerArgs) -> BaseTokenizer:
    from tokenloom.tokenizers.huggingface import HFTokenizer

    model = _need(
        args.tokenizer_model,
        "--tokenizer-model (a folder with tokenizer.json)",
        args.tokenizer_type,
    )
    include = args.hf_include_special_tokens
    if include is None:  # main's default; core_v0.16.1 needed --legacy-tokenizer or the flag
        include = True
    if args.merge_file:
        return HFTokenizer(
            args.vocab_file or model, merges=args.merge_file, add_special_tokens=include
        )
    return HFTokenizer(model, add_special_tokens=include)


def _gpt2(args: MegatronTokenizerArgs) -> BaseTokenizer:
    from tokenloom.tokenizers.huggingface import HFTokenizer

    vocab = _need(args.vocab_file, "--vocab-file vocab.json", args.tokenizer_type)
    merges = _need(args.merge_file, "--merge-file merges.txt", args.tokenizer_type)
    return HFTokenizer(vocab, merges=merges, eod="<|endoftext|>")


def _sentencepiece(args: MegatronTokenizerArgs) -> BaseTokenizer:
    from tokenloom.tokenizers.sentencepiece_model import SentencePieceTokenizer

    model = _need(args.tokenizer_model, "--tokenizer-model spm.model", args.tokenizer_type)
    add_bos = args.legacy_tokenizer and args.tokenizer_type == "Llama2Tokenizer"
    return SentencePieceTokenizer(
        model, add_bos=add_bos, ignore_extra_whitespaces=args.sentencepiece_ignore_extra_whitespaces
    )


def _tiktoken(args: MegatronTokenizerArgs) -> BaseTokenizer:
    from tokenloom.tokenizers.megatron_tiktoken import MegatronTikTokenizer

    model = _need(args.tokenizer_model, "--tokenizer-model vocab.json", args.tokenizer_type)
    if model.endswith(".tiktoken"):
        raise TokenizerError(
            f"--tokenizer-model {model}: Megatron's TikTokenizer reads a JSON "
            "rank list; for a .tiktoken file use --tokenizer tiktoken:"
            f"{model}"
        )
    return MegatronTikTokenizer(
        model,
        vocab_size=args.vocab_size,
        num_special_tokens=args.tiktoken_num_special_tokens,
        pattern=args.tiktoken_pattern or "v2",
    )


def build_megatron_tokenizer(args: MegatronTokenizerArgs) -> BaseTokenizer:
    """The tokenizer that gives Megatron-LM's ids for ``args`` (see the module docstring)."""
    kind = args.tokenizer_type
    if kind in NOT_FOR_TEXT:
        raise TokenizerError(
            f"--tokenizer-type {kind} is not supported by tokenloom preprocess "
            f"(GPT text only); use one of {', '.join(TYPES)}"
        )
    if kind not in TYPES:
        import difflib

        close = difflib.get_close_matches(str(kind), TYPES, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise TokenizerError(
            f"--tokenizer-type {kind!r} is unknown{hint} (choose from {', '.join(TYPES)})"
        )
    if args.tiktoken_pattern is not None and kind != "TikTokenizer":
        raise TokenizerError("--tiktoken-pattern applies to --tokenizer-type TikTokenizer only")
    if kind in HF_TYPES:
        return _hf(args)
    if kind == "GPT2BPETokenizer":
        return _gpt2(args)
    if kind in SP_TYPES:
        return _sentencepiece(args)
    return _tiktoken(args)


__all__ = ["MegatronTokenizerArgs", "build_megatron_tokenizer", "TYPES", "HF_TYPES", "SP_TYPES"]

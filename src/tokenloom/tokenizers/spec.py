"""Turn a ``--tokenizer`` spec into a tokenizer object.

Accepted specs::

    bytes                        the built-in byte tokenizer (no files, no libraries)
    hf:PATH                      Hugging Face tokenizer.json (or a folder holding one)
    tiktoken:PATH                a .tiktoken BPE file
    tiktoken:NAME                a built-in tiktoken encoding already in tiktoken's cache
    sentencepiece:PATH           a SentencePiece .model (alias: spm:PATH)
    PATH                         detected: *.json or a folder with tokenizer.json -> hf,
                                 *.tiktoken -> tiktoken, *.model -> sentencepiece
    NAME                         a tiktoken encoding name (cl100k_base, o200k_base, ...)
    KIND:LOCATION                a plugin's kind: an installed distribution's entry point
                                 in the ``tokenloom.tokenizers`` group
                                 (:mod:`tokenloom.plugins`)
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

from tokenloom import plugins
from tokenloom.errors import TokenizerError
from tokenloom.tokenizers.base import BaseTokenizer

KINDS = ("bytes", "hf", "tiktoken", "sentencepiece")
"""The built-in kinds; installed plugins add theirs (:func:`plugin_kinds`)."""
PLUGIN_GROUP = "tokenloom.tokenizers"
_ALIASES = {
    "byte": "bytes",
    "bytes": "bytes",
    "hf": "hf",
    "huggingface": "hf",
    "tiktoken": "tiktoken",
    "sentencepiece": "sentencepiece",
    "spm": "sentencepiece",
}
SPEC_HELP = (
    "bytes | hf:tokenizer.json (or hf:vocab.json with --merge-file merges.txt) | "
    "tiktoken:file.tiktoken | tiktoken:cl100k_base | sentencepiece:file.model | a "
    "path whose extension says the kind | KIND:LOCATION of an installed plugin"
)


def plugin_kinds() -> list[str]:
    """The tokenizer kinds installed plugins add (entry points of ``tokenloom.tokenizers``)."""
    return plugins.names(PLUGIN_GROUP, _ALIASES)


def _detect(path: str) -> Optional[str]:
    lowered = path.lower()
    if lowered.endswith(".json") or os.path.isfile(os.path.join(path, "tokenizer.json")):
        return "hf"
    if lowered.endswith(".tiktoken"):
        return "tiktoken"
    if lowered.endswith(".model"):
        return "sentencepiece"
    return None


def _tiktoken_names() -> tuple[str, ...]:
    try:
        import tiktoken
    except ImportError:
        return ()
    return tuple(tiktoken.list_encoding_names())


def parse_tokenizer_spec(spec: str) -> tuple[str, str]:
    """Split ``spec`` into ``(kind, location)``; kind is one of :data:`KINDS` or a
    plugin's (:func:`plugin_kinds`)."""
    kind, location, _ = _parse(spec)
    return kind, location


def _parse(spec: str) -> tuple[str, str, Optional[plugins.Plugin]]:
    """:func:`parse_tokenizer_spec`, with the plugin a plugin kind names (found once:
    scanning the installed entry points costs milliseconds)."""
    spec = str(spec).strip()
    if not spec:
        raise TokenizerError(f"empty tokenizer spec; use one of: {SPEC_HELP}")
    if spec.lower() in ("bytes", "byte"):
        return "bytes", "", None
    prefix, sep, rest = spec.partition(":")
    if sep and prefix.lower() in _ALIASES and len(prefix) > 1:  # len>1: not a drive letter
        kind = _ALIASES[prefix.lower()]
        if kind != "bytes" and not rest:
            raise TokenizerError(f"tokenizer spec {spec!r} names no file after '{prefix}:'")
        return kind, rest, None
    plugin = plugins.find(PLUGIN_GROUP, prefix, _ALIASES) if sep and rest else None
    if plugin is not None:
        return prefix, rest, plugin
    detected = _detect(spec)
    if detected is not None:
        return detected, spec, None
    if spec in _tiktoken_names():
        return "tiktoken", spec, None
    hint = "" if os.path.exists(spec) else " (no such file)"
    raise TokenizerError(
        f"cannot tell what kind of tokenizer {spec!r} is{hint}; use one of: {SPEC_HELP}"
    )


def load_tokenizer(
    spec: str,
    *,
    eod: Union[str, int, None] = None,
    pattern: Optional[str] = None,
    num_threads: int = 1,
    add_special_tokens: Optional[bool] = None,
    merges: Optional[str] = None,
) -> BaseTokenizer:
    """Load the tokenizer a spec names (see the module docstring).

    Args:
        eod: end-of-document token (text or id) overriding the detected one.
        pattern: tiktoken only: split pattern (encoding name or regex) for custom files.
        num_threads: library threads per batch (tiktoken, sentencepiece; HF: its env).
        add_special_tokens: Hugging Face only: write what the post-processor adds (BOS,
            ...); None means yes, as Megatron-LM main.
        merges: Hugging Face only: the ``merges.txt`` of a GPT-2 ``vocab.json`` spec.
    """
    kind, location, plugin = _parse(spec)
    if plugin is not None:
        extras = (pattern, add_special_tokens, merges)
        return _load_plugin(plugin, location, extras, eod=eod, num_threads=num_threads)
    if pattern is not None and kind != "tiktoken":
        raise TokenizerError(f"a split pattern applies only to tiktoken files, not to {kind}")
    for name, value in (("add_special_tokens", add_special_tokens), ("merges", merges)):
        if value is not None and kind != "hf":
            raise TokenizerError(f"{name} applies only to Hugging Face tokenizers, not to {kind}")
    if kind == "bytes":
        if eod is not None:
            raise TokenizerError("the byte tokenizer's eod is fixed at 256; drop the eod option")
        from tokenloom.tokenizers.byte_level import ByteTokenizer

        return ByteTokenizer()
    if kind == "hf":
        from tokenloom.tokenizers.huggingface import HFTokenizer

        return HFTokenizer(
            location,
            eod=eod,
            merges=merges,
            add_special_tokens=True if add_special_tokens is None else add_special_tokens,
        )
    if kind == "tiktoken":
        from tokenloom.tokenizers.tiktoken_bpe import TiktokenTokenizer

        return TiktokenTokenizer(location, pattern=pattern, eod=eod, num_threads=num_threads)
    from tokenloom.tokenizers.sentencepiece_model import SentencePieceTokenizer

    return SentencePieceTokenizer(location, eod=eod, num_threads=num_threads)


def _load_plugin(
    plugin: plugins.Plugin, location: str, extras: tuple, **options: Any
) -> BaseTokenizer:
    """The tokenizer of the plugin kind ``plugin`` offers at ``location``, checked to be
    one; ``extras`` (pattern, add_special_tokens, merges) must all be None."""
    kind = plugin.name
    if any(extra is not None for extra in extras):
        raise TokenizerError(
            "pattern, add_special_tokens and merges apply to built-in kinds, not to "
            f"the plugin kind {kind!r}"
        )
    factory = plugins.load(plugin)
    given = {name: value for name, value in options.items() if value is not None}
    tokenizer = factory(location, **given)
    if not isinstance(tokenizer, BaseTokenizer):
        raise TokenizerError(
            f"tokenizer plugin {kind!r} ({plugin.value}, from {plugin.distribution}) returned "
            f"{type(tokenizer).__name__}, not a tokenloom.tokenizers.BaseTokenizer subclass"
        )
    return tokenizer


__all__ = ["load_tokenizer", "parse_tokenizer_spec", "plugin_kinds", "KINDS", "SPEC_HELP"]

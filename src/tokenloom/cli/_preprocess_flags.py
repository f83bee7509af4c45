"""Megatron-LM's ``tools/preprocess_data.py`` flags for ``tokenloom preprocess``.

Megatron's command lines run unchanged: :func:`add_megatron_flags` adds its tokenizer
and runtime flags, :func:`tokenizer_from_args` builds the tokenizer from either form
(``--tokenizer SPEC`` or ``--tokenizer-type ...``), :func:`policy_from_args` fills in
the defaults of each form (:mod:`tokenloom.cli._run_settings` says where a run
differs from Megatron-LM).
:class:`SuggestingParser` answers a mistyped flag with "did you mean".
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable, Mapping
from typing import Any, Optional, cast

from tokenloom.errors import ConfigError

TIKTOKEN_SPECIAL_TOKENS = 1000
"""Megatron's default ``--tiktoken-num-special-tokens``."""


class SuggestingParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose unknown flags get "did you mean --the-flag?".

    Made with :func:`suggesting`, which may also give the command's accepted forms
    (named in every such error) and a ``check`` of the parsed arguments: a message it
    returns is a usage error (exit 2), like a missing required argument.
    """

    accepted_forms: str = ""
    check: Optional[Callable[[argparse.Namespace], Optional[str]]] = None

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = super().parse_known_args(args, namespace)
        forms = f"; accepted forms: {self.accepted_forms}" if self.accepted_forms else ""
        for extra in extras:
            if extra.startswith("-"):
                flag = extra.split("=", 1)[0]
                known = [name for name in self._option_string_actions if name.startswith("--")]
                close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]}?" if close else "; see --help"
                self.error(f"unrecognized argument {flag}{hint}{forms}")
        problem = self.check(parsed) if self.check is not None else None
        if problem:
            self.error(f"{problem}{forms}")
        return parsed, extras


def suggesting(
    parser: argparse.ArgumentParser,
    forms: str = "",
    check: Optional[Callable[[argparse.Namespace], Optional[str]]] = None,
) -> SuggestingParser:
    """Turn a subcommand's parser into a :class:`SuggestingParser` (in place)."""
    parser.__class__ = SuggestingParser
    suggesting_parser = cast(SuggestingParser, parser)
    suggesting_parser.accepted_forms = forms
    suggesting_parser.check = check
    return suggesting_parser


def add_megatron_flags(parser: argparse.ArgumentParser) -> None:
    """Megatron-LM's tokenizer and runtime flags (its names, its meanings)."""
    add_megatron_tokenizer_flags(parser)
    group = parser.add_argument_group("Megatron-LM runtime flags (tools/preprocess_data.py)")
    group.add_argument(
        "--partitions",
        type=int,
        default=1,
        metavar="P",
        help="deal records round-robin into P parts (1..1024), concatenated in "
        "part order (Megatron's document order)",
    )
    group.add_argument(
        "--keep-sequential-samples",
        action="store_true",
        help="with --partitions: keep the input order",
    )
    group.add_argument(
        "--log-interval",
        type=int,
        default=None,
        metavar="N",
        help="print a progress line every N records (an integer >= 1; default: none)",
    )


def add_megatron_tokenizer_flags(
    parser: argparse.ArgumentParser, defaults: bool = True, spec_flag: bool = False
) -> None:
    """Megatron-LM's tokenizer flags, as ``tools/preprocess_data.py`` takes them.

    ``defaults=False`` leaves every default None (a command that merges the flags
    over a config file must see which were given; :func:`tokenizer_from_settings`
    fills the defaults in); ``spec_flag`` also adds tokenloom's ``--tokenizer SPEC``
    (dest ``tokenizer_spec``)."""
    group = parser.add_argument_group(
        "Megatron-LM tokenizer flags (tools/preprocess_data.py; instead of --tokenizer)"
    )
    if spec_flag:
        group.add_argument(
            "--tokenizer", dest="tokenizer_spec", metavar="SPEC", help="tokenloom's form"
        )
    _add_tokenizer_files(group)
    _add_special_token_flags(group, defaults)
    _add_sentencepiece_flags(group, defaults)
    group.add_argument(
        "--tiktoken-num-special-tokens",
        type=int,
        default=TIKTOKEN_SPECIAL_TOKENS if defaults else None,
        metavar="N",
        help=f"TikTokenizer: ids before the ranks (default {TIKTOKEN_SPECIAL_TOKENS})",
    )
    if not defaults:  # preprocess has its own, next to --tokenizer
        group.add_argument("--tiktoken-pattern", metavar="v1|v2", help="TikTokenizer pattern")


def _add_tokenizer_files(group: Any) -> None:
    """Which tokenizer: its type and the files (or folder) it is built from."""
    group.add_argument(
        "--tokenizer-type",
        metavar="TYPE",
        help="HuggingFaceTokenizer | GPT2BPETokenizer | SentencePieceTokenizer | "
        "GPTSentencePieceTokenizer | Llama2Tokenizer | TikTokenizer",
    )
    group.add_argument(
        "--tokenizer-model",
        metavar="PATH",
        help="model file or folder (HF folder, spm .model, TikTokenizer .json)",
    )
    group.add_argument("--vocab-file", metavar="PATH", help="GPT-2 vocab.json")
    group.add_argument(
        "--merge-file",
        metavar="PATH",
        help="GPT-2 merges.txt (also with --tokenizer hf:vocab.json)",
    )
    group.add_argument(
        "--vocab-size",
        type=int,
        metavar="N",
        help="TikTokenizer: total ids, special ids included (default 131072)",
    )


def _add_special_token_flags(group: Any, defaults: bool) -> None:
    """What is written besides the text: the HF post-processor's tokens, legacy BOS."""
    group.add_argument(
        "--tokenizer-hf-include-special-tokens",
        "--add-special-tokens",
        dest="special_tokens",
        action="store_const",
        const=True,
        default=None,
        help="write what the HF post-processor adds (BOS, ...): Megatron-LM "
        "main's default and tokenloom's",
    )
    group.add_argument(
        "--tokenizer-hf-no-include-special-tokens",
        "--no-add-special-tokens",
        dest="special_tokens",
        action="store_const",
        const=False,
        help="leave them out (Megatron core_v0.16.1's default)",
    )
    group.add_argument(
        "--legacy-tokenizer",
        action="store_const",
        const=True,
        default=False if defaults else None,
        help="core_v0.16.1's legacy tokenizers: HF includes special tokens, "
        "Llama2Tokenizer prepends BOS",
    )


def _add_sentencepiece_flags(group: Any, defaults: bool) -> None:
    """SentencePiece's whitespace handling and its legacy switch."""
    group.add_argument(
        "--no-tokenizer-sentencepiece-ignore-extra-whitespaces",
        dest="sp_ignore_spaces",
        action="store_false",
        default=True if defaults else None,
        help="SentencePiece: keep runs of spaces the model would drop",
    )
    group.add_argument(
        "--tokenizer-sentencepiece-ignore-extra-whitespaces",
        dest="sp_ignore_spaces",
        action="store_true",
        help=argparse.SUPPRESS,
    )
    group.add_argument(
        "--tokenizer-sentencepiece-legacy",
        action="store_const",
        const=True,
        default=False if defaults else None,
        help="accepted; without --tokenizer-special-tokens it changes nothing",
    )


def add_sentence_flags(parser: argparse.ArgumentParser) -> None:
    """Megatron's sentence flags and tokenloom's data-free splitter."""
    group = parser.add_argument_group("sentence splitting (outputs named *_sentence)")
    group.add_argument(
        "--split-sentences",
        action="store_true",
        help="Megatron's NLTK punkt splitter: needs nltk and punkt data "
        "(--punkt-path); nothing is downloaded",
    )
    group.add_argument(
        "--split-sentences-rules",
        action="store_true",
        help="tokenloom's rule-based splitter (no data needed; docs/preprocessing.md)",
    )
    group.add_argument(
        "--keep-newlines", action="store_true", help="keep the whitespace after each sentence"
    )
    group.add_argument("--lang", default="english", help="punkt language (default english)")
    group.add_argument(
        "--punkt-path", metavar="DIR", help="folder holding NLTK's tokenizers/punkt_tab data"
    )


def megatron_form(args: argparse.Namespace) -> bool:
    """Whether the tokenizer is given Megatron's way (``--tokenizer-type``)."""
    return args.tokenizer_type is not None


def tokenizer_from_args(args: argparse.Namespace) -> Any:
    """The tokenizer of either form; exactly one of ``--tokenizer``/``--tokenizer-type``."""
    from tokenloom.tokenizers import load_tokenizer
    from tokenloom.tokenizers.megatron import MegatronTokenizerArgs, build_megatron_tokenizer

    if (args.tokenizer is None) == (args.tokenizer_type is None):
        raise ConfigError(
            "give the tokenizer once: --tokenizer SPEC (tokenloom's form) or "
            "--tokenizer-type TYPE with --tokenizer-model/--vocab-file "
            "(Megatron's form)"
        )
    if megatron_form(args):
        if args.eod_token is not None:
            raise ConfigError(
                "--eod-token applies to the --tokenizer form; Megatron's types "
                "have a fixed end-of-document token"
            )
        pattern = args.tiktoken_pattern
        return build_megatron_tokenizer(
            MegatronTokenizerArgs(
                args.tokenizer_type,
                args.tokenizer_model,
                args.vocab_file,
                args.merge_file,
                args.vocab_size,
                True
                if args.legacy_tokenizer and args.special_tokens is None
                else args.special_tokens,
                args.legacy_tokenizer,
                args.sp_ignore_spaces,
                pattern,
                args.tiktoken_num_special_tokens,
            )
        )
    for flag, value in (
        ("--tokenizer-model", args.tokenizer_model),
        ("--vocab-file", args.vocab_file),
        ("--vocab-size", args.vocab_size),
    ):
        if value is not None:
            raise ConfigError(
                f"{flag} belongs to Megatron's form: pass --tokenizer-type too, or drop it"
            )
    return load_tokenizer(
        args.tokenizer,
        eod=args.eod_token,
        pattern=args.tiktoken_pattern,
        add_special_tokens=args.special_tokens,
        merges=args.merge_file,
    )


_TOKENIZER_DEFAULTS: dict[str, Any] = {
    "tokenizer_model": None,
    "vocab_file": None,
    "merge_file": None,
    "vocab_size": None,
    "special_tokens": None,
    "legacy_tokenizer": False,
    "sp_ignore_spaces": True,
    "tokenizer_sentencepiece_legacy": False,
    "tiktoken_pattern": None,
    "tiktoken_num_special_tokens": TIKTOKEN_SPECIAL_TOKENS,
}


def tokenizer_from_settings(settings: Mapping[str, Any]) -> Any:
    """:func:`tokenizer_from_args` over a mapping of settings (a config file merged with
    the flags of :func:`add_megatron_tokenizer_flags` given ``defaults=False``):
    ``tokenizer_spec`` is tokenloom's ``--tokenizer``, a missing or None value takes
    the flag's default."""
    fields = {
        key: default if settings.get(key) is None else settings[key]
        for key, default in _TOKENIZER_DEFAULTS.items()
    }
    namespace = argparse.Namespace(
        tokenizer=settings.get("tokenizer_spec"),
        tokenizer_type=settings.get("tokenizer_type"),
        eod_token=None,
        **fields,
    )
    return tokenizer_from_args(namespace)


def policy_from_args(args: argparse.Namespace) -> Any:
    """The bad-record policy; blank lines stop a run given Megatron's way (as Megatron)."""
    from tokenloom.preprocess import Policy

    blank = args.on_blank_line or ("fail" if megatron_form(args) else "skip")
    return Policy(
        on_bad_json=args.on_bad_json,
        on_missing_key=args.on_missing_key,
        on_bad_type=args.on_bad_type,
        on_empty=args.on_empty,
        on_blank_line=blank,
    )


def splitter_from_args(args: argparse.Namespace) -> Any:
    """The sentence splitter asked for, or None."""
    from tokenloom.preprocess.sentences import RuleSentenceSplitter, punkt_splitter

    if args.split_sentences and args.split_sentences_rules:
        raise ConfigError(
            "choose one of --split-sentences (NLTK punkt) and --split-sentences-rules"
        )
    if args.split_sentences:
        return punkt_splitter(args.lang, args.punkt_path, args.keep_newlines)
    if args.split_sentences_rules:
        return RuleSentenceSplitter(args.keep_newlines)
    if args.keep_newlines:
        raise ConfigError(
            "--keep-newlines only matters with --split-sentences or --split-sentences-rules"
        )
    return None


__all__ = [
    "SuggestingParser",
    "suggesting",
    "add_megatron_flags",
    "add_sentence_flags",
    "tokenizer_from_args",
    "tokenizer_from_settings",
    "add_megatron_tokenizer_flags",
    "policy_from_args",
    "splitter_from_args",
    "megatron_form",
]

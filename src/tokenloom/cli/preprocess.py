"""``tokenloom preprocess``: tokenize JSONL into Megatron ``.bin``/``.idx`` pairs."""

from __future__ import annotations

import argparse
import os

from tokenloom.tokenizers.spec import SPEC_HELP

DESCRIPTION = """\
Tokenize JSON-lines text into Megatron's indexed format, one .bin/.idx pair per JSON key:
  {OUTPUT_PREFIX}_{KEY}_document.bin / .idx
Each input line is a JSON object; the string under each --json-keys key is one document.
Inputs may be plain, gzip, zstd (needs the zstandard package), bzip2 or xz compressed
(recognised by their first bytes); globs are expanded (quote them).  The token dtype is
uint16 for vocabularies below 65500 ids, else int32 (as Megatron chooses).

Bad input (each policy is 'fail': stop and name FILE:LINE, or 'skip': drop it and count it
in the summary; nothing is dropped silently):
  --on-bad-json     a line that is not valid JSON/UTF-8 or not a JSON object   (default fail)
  --on-missing-key  the object lacks a --json-keys key; with several keys only
                    that key's document is skipped                             (default fail)
  --on-bad-type     the value is not a string (null, number, list, ...)        (default fail)
  --on-empty        the document encodes to zero tokens, e.g. ""  (skip|keep|fail, default skip;
                    keep writes an empty document, just the EOD with --append-eod)
Blank lines are ignored and counted.  The exit status is 0 when the outputs were written,
even if records were skipped (the summary says how many and why), 1 on an error (nothing
is written then; existing outputs are left untouched).

Speed: batches of lines go through the tokenizer library's batch encoder while reading,
parsing and writing run alongside.  --workers N runs N tokenizing processes (each on one
core; Hugging Face's own thread pool is turned off so --workers is the one knob), with
output identical to --workers 1.  Use about as many workers as cores.
"""

EPILOG = """\
examples:
  tokenloom preprocess --input 'data/*.jsonl.zst' --output-prefix out/web \\
      --tokenizer hf:tokenizer.json --json-keys text --append-eod --workers 8
  tokenloom preprocess --input a.jsonl b.jsonl.gz --output-prefix out/mix \\
      --tokenizer tiktoken:cl100k_base.tiktoken --append-eod
  tokenloom preprocess --input docs.jsonl --output-prefix out/doc --tokenizer bytes \\
      --json-keys title body --on-missing-key skip
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "preprocess", help="tokenize JSONL into .bin/.idx pairs", description=DESCRIPTION,
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", nargs="+", action="extend", required=True,
                        metavar="FILE_OR_GLOB", help="JSONL files or glob patterns (repeatable)")
    parser.add_argument("--output-prefix", required=True, metavar="P",
                        help="outputs are P_{key}_document.bin/.idx")
    parser.add_argument("--tokenizer", required=True, metavar="SPEC", help=SPEC_HELP)
    parser.add_argument("--json-keys", nargs="+", default=["text"], metavar="KEY",
                        help="keys holding the documents (default: text)")
    parser.add_argument("--append-eod", action="store_true",
                        help="append the end-of-document token to every document")
    parser.add_argument("--eod-token", default=None, metavar="TOKEN_OR_ID",
                        help="end-of-document token (text or id) when the detected one is wrong")
    parser.add_argument("--tiktoken-pattern", default=None, metavar="NAME_OR_REGEX",
                        help="split pattern for a .tiktoken file with a non-standard name")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="tokenizing processes (default 1: in-process threads)")
    parser.add_argument("--chunk-mb", type=float, default=1.0, metavar="MB",
                        help="input MiB per tokenizer batch at most (default 1; inputs of a "
                             "few MB are cut finer, so that the stages overlap)")
    _add_policies(parser)
    parser.add_argument("--progress", dest="show_progress", action="store_true", default=None,
                        help="always show the progress bar (default: only on a terminal)")
    parser.add_argument("--no-progress", dest="show_progress", action="store_false",
                        help="never show the progress bar")
    parser.set_defaults(func=run)


def _add_policies(parser) -> None:
    from tokenloom.preprocess.records import EMPTY_CHOICES, ERROR_CHOICES

    group = parser.add_argument_group("bad input (see above)")
    group.add_argument("--on-bad-json", choices=ERROR_CHOICES, default="fail")
    group.add_argument("--on-missing-key", choices=ERROR_CHOICES, default="fail")
    group.add_argument("--on-bad-type", choices=ERROR_CHOICES, default="fail")
    group.add_argument("--on-empty", choices=EMPTY_CHOICES, default="skip")


def run(args) -> int:
    from tokenloom.errors import ConfigError
    from tokenloom.preprocess import Policy, preprocess
    from tokenloom.tokenizers import load_tokenizer

    if args.chunk_mb <= 0:
        raise ConfigError(f"--chunk-mb {args.chunk_mb}: use a positive size")
    # --workers is the one parallelism knob: keep Hugging Face's thread pool out of it
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    tokenizer = load_tokenizer(args.tokenizer, eod=args.eod_token, pattern=args.tiktoken_pattern)
    policy = Policy(on_bad_json=args.on_bad_json, on_missing_key=args.on_missing_key,
                    on_bad_type=args.on_bad_type, on_empty=args.on_empty)
    print(f"tokenloom preprocess: {tokenizer!r}, {len(args.json_keys)} key(s), "
          f"{args.workers} worker(s)", flush=True)
    summary = preprocess(args.input, args.output_prefix, tokenizer, json_keys=args.json_keys,
                         append_eod=args.append_eod, workers=args.workers, policy=policy,
                         chunk_bytes=int(args.chunk_mb * (1 << 20)),
                         show_progress=args.show_progress)
    for line in summary.lines():
        print(line)
    return 0

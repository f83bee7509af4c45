"""``tokenloom preprocess``: tokenize JSONL, Parquet or HF datasets into ``.bin``/``.idx`` pairs.

Megatron-LM's ``tools/preprocess_data.py`` command lines run unchanged and write
Megatron's bytes (see :mod:`tokenloom.cli._preprocess_flags`).
"""

from __future__ import annotations

import argparse
import os

from tokenloom.attributes import read_attribute
from tokenloom.cli._numbers import Bound, check_numbers
from tokenloom.cli._preprocess_flags import (
    SuggestingParser,
    add_megatron_flags,
    add_sentence_flags,
    policy_from_args,
    splitter_from_args,
    tokenizer_from_args,
)
from tokenloom.cli._run_settings import run_line
from tokenloom.tokenizers.spec import SPEC_HELP

DESCRIPTION = """\
Tokenize text into Megatron's indexed format, one .bin/.idx pair per JSON key:
  {OUTPUT_PREFIX}_{KEY}_document.bin / .idx
Each input line is a JSON object; the string under each --json-keys key is one document
(a list of strings: its sentences, one sequence each, as Megatron).  Inputs may be plain,
gzip, zstd (needs the zstandard package), bzip2 or xz compressed JSONL, or Parquet files
(a column per key; needs pyarrow), recognised by their first bytes; globs are expanded
(quote them).  An input may be an object in s3:// or msc:// storage, named in full (no
globs there), streamed by ranged reads (local engine; docs/object-storage.md).
--hf-dataset reads a Hugging Face dataset saved with save_to_disk.  The token dtype is uint16 for vocabularies below 65500 ids, else int32 (as Megatron).

Megatron-LM's own command lines work unchanged (--tokenizer-type, --tokenizer-model,
--vocab-file, --merge-file, --partitions, ...) and write Megatron-LM main's bytes; the
table "Megatron flag -> tokenloom flag" in docs/preprocessing.md lists the differences.
An empty document (zero tokens) is kept as a document with no sequence, as Megatron.

Bad input (each policy is 'fail': stop and name FILE:LINE, or 'skip': drop it and count it
in the summary; nothing is dropped silently):
  --on-bad-json     a line that is not valid JSON/UTF-8 or not a JSON object   (default fail)
  --on-missing-key  the object lacks a --json-keys key; with several keys only
                    that key's document is skipped                             (default fail)
  --on-bad-type     the value is not a string or a list of strings             (default fail)
  --on-empty        the document encodes to zero tokens, e.g. ""  (keep|skip|fail, default keep:
                    Megatron's rule, a document with no sequence and no EOD)
  --on-blank-line   a line of only whitespace (default skip; fail with --tokenizer-type, as
                    Megatron stops there)
The first line printed names every setting that differs from Megatron.  The exit
status is 0 when the outputs were written, even if records were skipped (the summary says how many and why), 1 on an error (nothing
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
  tokenloom preprocess --input corpus.jsonl --output-prefix out/c --workers 4 \\
      --tokenizer-type HuggingFaceTokenizer --tokenizer-model ./llama-tokenizer --append-eod
  tokenloom preprocess --input 'data/*.parquet' --output-prefix out/pq --tokenizer hf:tok.json
"""


MAX_WORKERS = 1024
"""The most ``--workers``: each is a process (more than the cores only oversubscribe)."""
MAX_PARTITIONS = 1024
"""The most ``--partitions``: each keeps an output pair per key open until the end."""
MAX_CHUNK_MB = 4096
"""The largest ``--chunk-mb``: a batch is held in memory (several, with workers)."""

BOUNDS = (
    Bound("workers", "--workers", 1, MAX_WORKERS),
    Bound("chunk_mb", "--chunk-mb", 0, MAX_CHUNK_MB, integer=False, low_open=True),
    Bound("vocab_size", "--vocab-size", 1),
    Bound("tiktoken_num_special_tokens", "--tiktoken-num-special-tokens", 0),
    Bound("partitions", "--partitions", 1, MAX_PARTITIONS),
    Bound("log_interval", "--log-interval", 1),
)
"""Every numeric option of ``preprocess`` (the Ray engine checks its own)."""


def register(subparsers) -> None:
    """Add the ``preprocess`` subcommand and its flags to ``subparsers``."""
    parser = subparsers.add_parser(
        "preprocess",
        help="tokenize JSONL/Parquet/HF datasets into .bin/.idx pairs",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.__class__ = SuggestingParser  # unknown flags get "did you mean"
    _add_io_flags(parser)
    _add_tokenizing_flags(parser)
    add_megatron_flags(parser)
    add_sentence_flags(parser)
    _add_policies(parser)
    from tokenloom.preprocess.ray_engine.cli import add_engine_flags

    add_engine_flags(parser)  # --engine ray [--address] [--num-shards] [--no-merge] (docs/ray.md)
    _add_progress_flags(parser)
    parser.set_defaults(func=run)


def _add_io_flags(parser) -> None:
    """What is read and where the outputs go."""
    parser.add_argument(
        "--input",
        nargs="+",
        action="extend",
        default=None,
        metavar="FILE_OR_GLOB",
        help="JSONL or Parquet files or glob patterns (repeatable); also s3://BUCKET/KEY "
        "and msc://PROFILE/PATH objects, each named in full (local engine)",
    )
    parser.add_argument(
        "--hf-dataset",
        metavar="PATH",
        help="a Hugging Face dataset saved with save_to_disk (instead of --input)",
    )
    parser.add_argument(
        "--hf-split", metavar="NAME", help="the split of a --hf-dataset DatasetDict"
    )
    parser.add_argument(
        "--output-prefix",
        required=True,
        metavar="P",
        help="outputs are P_{key}_document.bin/.idx (P may be s3://... or msc://...: "
        "written locally, uploaded when done)",
    )


def _add_tokenizing_flags(parser) -> None:
    """tokenloom's tokenizer form, the keys, EOD and the parallelism."""
    parser.add_argument("--tokenizer", default=None, metavar="SPEC", help=SPEC_HELP)
    parser.add_argument(
        "--json-keys",
        nargs="+",
        default=["text"],
        metavar="KEY",
        help="keys holding the documents (default: text)",
    )
    parser.add_argument(
        "--append-eod",
        action="store_true",
        help="append the end-of-document token to every non-empty document",
    )
    parser.add_argument(
        "--eod-token",
        default=None,
        metavar="TOKEN_OR_ID",
        help="end-of-document token (text or id) when the detected one is wrong",
    )
    parser.add_argument(
        "--tiktoken-pattern",
        default=None,
        metavar="NAME_OR_REGEX",
        help="tiktoken split pattern: v1/v2 with --tokenizer-type TikTokenizer; "
        "an encoding name or regex for a .tiktoken file",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help=f"tokenizing processes, 1..{MAX_WORKERS} (default 1: in-process threads)",
    )
    parser.add_argument(
        "--chunk-mb",
        type=float,
        default=1.0,
        metavar="MB",
        help=f"input MiB per tokenizer batch at most, a number in (0, {MAX_CHUNK_MB}] "
        "(default 1; inputs of a few MB are cut finer, so that the stages overlap)",
    )


def _add_progress_flags(parser) -> None:
    parser.add_argument(
        "--progress",
        dest="show_progress",
        action="store_true",
        default=None,
        help="always show the progress bar (default: only on a terminal)",
    )
    parser.add_argument(
        "--no-progress",
        dest="show_progress",
        action="store_false",
        help="never show the progress bar",
    )


def _add_policies(parser) -> None:
    from tokenloom.preprocess.records import EMPTY_CHOICES, ERROR_CHOICES

    group = parser.add_argument_group("bad input (see above)")
    group.add_argument("--on-bad-json", choices=ERROR_CHOICES, default="fail")
    group.add_argument("--on-missing-key", choices=ERROR_CHOICES, default="fail")
    group.add_argument("--on-bad-type", choices=ERROR_CHOICES, default="fail")
    group.add_argument("--on-empty", choices=EMPTY_CHOICES, default="keep")
    group.add_argument("--on-blank-line", choices=ERROR_CHOICES, default=None)


def _inputs(args):
    from tokenloom.errors import ConfigError
    from tokenloom.preprocess.sources import HFDiskDataset

    if (args.input is None) == (args.hf_dataset is None):
        raise ConfigError("give the input once: --input FILE_OR_GLOB... or --hf-dataset PATH")
    if args.hf_dataset is not None:
        return HFDiskDataset(args.hf_dataset, args.hf_split)
    if args.hf_split is not None:
        raise ConfigError("--hf-split applies to --hf-dataset only")
    return args.input


def _published(summary, staged_prefix: str, output_prefix: str) -> None:
    """Name the outputs where they were published: a remote ``--output-prefix`` is
    written under a local staging prefix first, which is gone once uploaded."""
    if staged_prefix == output_prefix:
        return
    for stats in summary.outputs.values():
        if stats.path_prefix.startswith(staged_prefix):
            stats.path_prefix = output_prefix + stats.path_prefix[len(staged_prefix) :]


def _check_remote_output(args) -> None:
    from tokenloom.errors import ConfigError
    from tokenloom.storage.urls import is_remote

    if is_remote(args.output_prefix) and read_attribute(args, "no_merge", False):
        raise ConfigError(
            f"--no-merge keeps the shards in a folder and lists their paths, which "
            f"--output-prefix {args.output_prefix} (object storage) cannot hold; drop "
            "--no-merge, or write to a shared folder and upload the shards yourself"
        )


def run(args) -> int:
    """Run ``tokenloom preprocess`` with the parsed ``args``; the exit status."""
    from tokenloom.preprocess import preprocess
    from tokenloom.preprocess.ray_engine.cli import engine_from_args
    from tokenloom.storage.staging import staged_output

    check_numbers(args, BOUNDS)
    preprocess = engine_from_args(args, preprocess)  # the local engine, or --engine ray
    _check_remote_output(args)
    inputs = _inputs(args)
    # --workers is the one parallelism knob: keep Hugging Face's thread pool out of it
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    tokenizer = tokenizer_from_args(args)
    policy, splitter = policy_from_args(args), splitter_from_args(args)
    print(run_line(tokenizer, policy, args), flush=True)
    # s3:// / msc:// outputs: written and finalized locally, uploaded only on success
    with staged_output(args.output_prefix) as output_prefix:
        summary = preprocess(
            inputs,
            output_prefix,
            tokenizer,
            json_keys=args.json_keys,
            append_eod=args.append_eod,
            workers=args.workers,
            policy=policy,
            chunk_bytes=max(int(args.chunk_mb * (1 << 20)), 1),
            show_progress=args.show_progress,
            partitions=args.partitions,
            keep_sequential_samples=args.keep_sequential_samples,
            sentence_splitter=splitter,
            log_interval=args.log_interval,
        )
    _published(summary, output_prefix, args.output_prefix)
    for line in summary.lines():
        print(line)
    return 0

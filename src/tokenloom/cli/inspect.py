"""``tokenloom inspect``: header, counts, length statistics and an integrity check of a pair."""

from __future__ import annotations

import argparse
import json
import sys

from tokenloom.errors import ConfigError, FormatError

_DESCRIPTION = """\
Show what a Megatron .bin/.idx pair holds and check that it is sound.

Prints the .idx header (format version, token dtype, multimodal or not), the
number of sequences, documents and tokens, statistics (min/mean/p50/p99/max) of
sequence lengths, tokens per document and sequences per document, then runs an
integrity check: sequence pointers agree with the lengths and the dtype size, the
.bin has exactly the size the index describes, the document index starts at 0,
never decreases and ends at the sequence count, and (with --vocab-size) every
token id lies in 0..vocab_size-1.

Exit status: 0 when the check passes, 1 when it fails or the files cannot be read.
"""

_EPILOG = """\
examples:
  tokenloom inspect out/web_text_document
  tokenloom inspect out/web_text_document --vocab-size 32000 --show 3
  tokenloom inspect out/web_text_document --json > web.json
"""


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``inspect`` subcommand."""
    parser = subparsers.add_parser(
        "inspect", help="header, counts, statistics and integrity check of a .bin/.idx pair",
        description=_DESCRIPTION, epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prefix", metavar="PREFIX", help="dataset path without .bin/.idx")
    parser.add_argument("--vocab-size", type=int, metavar="N",
                        help="also check that every token id is below N")
    parser.add_argument("--show", type=int, default=0, metavar="N",
                        help="print the token ids of the first N sequences")
    parser.add_argument("--show-tokens", type=int, default=32, metavar="K",
                        help="with --show: at most K token ids per sequence (default 32)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.set_defaults(func=run)
    return parser


def _preview(dataset, count: int, width: int) -> list:
    rows = []
    for i in range(min(max(count, 0), len(dataset))):
        item = dataset[i]
        tokens = item[0] if dataset.multimodal else item
        row = {"sequence": i, "length": int(tokens.shape[0]),
               "tokens": tokens[:width].tolist(), "truncated": tokens.shape[0] > width}
        if dataset.multimodal:
            row["mode"] = int(item[1])
        rows.append(row)
    return rows


def _stats_line(name: str, stats: dict) -> str:
    return (f"{name:<24} min {stats['min']}  mean {stats['mean']:.2f}  p50 {stats['p50']:g}  "
            f"p99 {stats['p99']:g}  max {stats['max']}")


def _print_text(report: dict) -> None:
    s = report["summary"]
    print(f"prefix:     {s['prefix']}")
    print(f"idx:        {s['idx_path']} ({s['idx_bytes']} bytes)")
    print(f"bin:        {s['bin_path']} ({s['bin_bytes']} bytes)")
    print(f"header:     MMIDIDX version {s['version']}, dtype {s['dtype']} "
          f"(code {s['dtype_code']}), multimodal {'yes' if s['multimodal'] else 'no'}")
    print(f"sequences:  {s['sequence_count']}")
    print(f"documents:  {s['document_count']}")
    print(f"tokens:     {s['token_count']}")
    print(_stats_line("sequence length", s["sequence_length"]))
    print(_stats_line("tokens per document", s["document_tokens"]))
    print(_stats_line("sequences per document", s["sequences_per_document"]))
    if "modes" in s:
        print("modes:      " + ", ".join(f"{m}: {c}" for m, c in s["modes"].items()))
    for row in report.get("preview", []):
        more = " ..." if row["truncated"] else ""
        mode = f" mode {row['mode']}" if "mode" in row else ""
        print(f"[{row['sequence']}] ({row['length']} tokens{mode}) {row['tokens']}{more}")
    if report["ok"]:
        print(f"integrity:  OK{report['vocab_note']}")
    else:
        print("integrity:  FAILED")
        for problem in report["problems"]:
            print(f"  - {problem}")


def run(args: argparse.Namespace) -> int:
    """Inspect ``args.prefix``; return 0 when sound, 1 otherwise."""
    from tokenloom.format.integrity import check_integrity, dataset_summary, open_for_inspection

    if args.vocab_size is not None and args.vocab_size < 1:
        raise ConfigError(f"--vocab-size {args.vocab_size}: must be at least 1")
    try:
        dataset = open_for_inspection(args.prefix)
    except FormatError as error:
        if args.json:
            failure = {"prefix": args.prefix, "ok": False, "problems": [str(error)]}
            print(json.dumps(failure, indent=2))
            return 1
        raise
    with dataset:
        problems = check_integrity(dataset, args.vocab_size)
        report = {"summary": dataset_summary(dataset), "ok": not problems, "problems": problems,
                  "vocab_note": f" (token ids below {args.vocab_size})" if args.vocab_size else ""}
        if args.show:
            report["preview"] = _preview(dataset, args.show, args.show_tokens)
    if args.json:
        report.pop("vocab_note")
        json.dump({**report.pop("summary"), **report}, sys.stdout, indent=2)
        print()
    else:
        _print_text(report)
    return 0 if report["ok"] else 1

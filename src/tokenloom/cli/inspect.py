"""``tokenloom inspect``: header, counts, statistics, integrity check, provenance and a look
at the data (decoded documents, plots) of one or more pairs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Optional

from tokenloom.cli._numbers import Bound, check_numbers
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

Provenance: a pair made by tokenloom has a sidecar PREFIX.json naming the tokenizer
(kind, file hash, vocabulary, special tokens), the EOD and special-token settings,
the inputs (paths, sizes, SHA-256) and the counts; it is shown here (also beside an
s3:// or msc:// pair, where preprocess uploads it).  Pairs made by
Megatron have none, and need none.

A look at the data: --show N prints the first N documents decoded with --tokenizer
SPEC (or with the sidecar's tokenizer when its file is still there), else their
token ids.  --plot OUT.png draws, for every PREFIX in one figure, the histogram of
document lengths (log scale), the token-id frequency and the rank-frequency curve
(needs matplotlib: pip install 'tokenloom[plot]').

Exit status: 0 when the check passes, 1 when it fails or the files cannot be read.
"""

_EPILOG = """\
examples:
  tokenloom inspect out/web_text_document
  tokenloom inspect out/web_text_document --vocab-size 32000 --show 3
  tokenloom inspect out/web_text_document --tokenizer hf:tokenizer.json --show 5
  tokenloom inspect out/web_text_document out/code_text_document --plot look.png
  tokenloom inspect out/web_text_document --json > web.json
"""


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``inspect`` subcommand."""
    parser = subparsers.add_parser(
        "inspect",
        help="header, counts, statistics and integrity check of a .bin/.idx pair",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "prefixes", nargs="+", metavar="PREFIX", help="dataset paths without .bin/.idx"
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        metavar="N",
        help="also check that every token id is below N (an integer >= 1)",
    )
    _add_show_flags(parser)
    _add_plot_flags(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.set_defaults(func=run)
    return parser


def _add_show_flags(parser: argparse.ArgumentParser) -> None:
    """--show and what shapes it: the tokenizer, ids per sequence, characters per document."""
    parser.add_argument(
        "--show",
        type=int,
        default=0,
        metavar="N",
        help="print the first N documents decoded (with a tokenizer), else "
        "the token ids of the first N sequences (N >= 0; default 0: none)",
    )
    parser.add_argument(
        "--tokenizer",
        metavar="SPEC",
        help="decode --show with this tokenizer (default: the sidecar's)",
    )
    parser.add_argument(
        "--show-tokens",
        type=int,
        default=32,
        metavar="K",
        help="with --show and no tokenizer: at most K ids per sequence (K >= 1, default 32)",
    )
    parser.add_argument(
        "--show-chars",
        type=int,
        default=600,
        metavar="C",
        help="with --show and a tokenizer: at most C characters per document (default 600; 0: all)",
    )


def _add_plot_flags(parser: argparse.ArgumentParser) -> None:
    """--plot and its token budget."""
    parser.add_argument(
        "--plot",
        metavar="OUT.png",
        help="draw document lengths and token frequencies of every PREFIX",
    )
    parser.add_argument(
        "--plot-max-tokens",
        type=int,
        default=20_000_000,
        metavar="T",
        help="token frequencies count at most T tokens per PREFIX (T >= 1), in "
        "blocks spread over the file (default 20,000,000; above the file's size: all)",
    )


def _preview(dataset, count: int, width: int) -> list:
    rows = []
    for i in range(min(max(count, 0), len(dataset))):
        item = dataset[i]
        tokens = item[0] if dataset.multimodal else item
        row = {
            "sequence": i,
            "length": int(tokens.shape[0]),
            "tokens": tokens[:width].tolist(),
            "truncated": tokens.shape[0] > width,
        }
        if dataset.multimodal:
            row["mode"] = int(item[1])
        rows.append(row)
    return rows


def _stats_line(name: str, stats: dict) -> str:
    return (
        f"{name:<24} min {stats['min']}  mean {stats['mean']:.2f}  p50 {stats['p50']:g}  "
        f"p99 {stats['p99']:g}  max {stats['max']}"
    )


def _yes_no(value: Any) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def _provenance_lines(
    prefix: str, record: Optional[dict], notes: list, unreadable: Optional[str] = None
) -> list:
    from tokenloom.provenance import sidecar_path

    lines = [f"  {note}" for note in notes]
    if record is None and unreadable:
        return [
            f"provenance: {sidecar_path(prefix)} present but unreadable ({unreadable}); "
            "the pair itself does not need it"
        ] + lines
    if record is None:
        return [
            f"provenance: none ({sidecar_path(prefix)} absent: made by Megatron or another "
            "tool; nothing needs it)"
        ] + lines
    lines.insert(
        0,
        f"provenance: {sidecar_path(prefix)} (tokenloom "
        f"{(record.get('tool') or {}).get('version', '?')})",
    )
    lines += _tokenizer_lines(record)
    lines += _input_lines(record)
    return lines


def _tokenizer_lines(record: dict) -> list:
    """The sidecar's tokenizer, settings and merged parts, one line each."""
    from tokenloom.provenance import tokenizer_label

    lines: list[str] = []
    identity = record.get("tokenizer") or {}
    specials = ", ".join(
        f"{text}={i}" for text, i in (identity.get("special_tokens") or {}).items()
    )
    lines.append(
        f"  tokenizer:  {tokenizer_label(identity)}, eod {identity.get('eod')}"
        + (f", special tokens {specials}" if specials else "")
    )
    settings = record.get("settings")
    if settings:
        eod = f"yes (id {settings.get('eod_id')})" if settings.get("append_eod") else "no"
        lines.append(
            f"  settings:   key {settings.get('json_key')!r}, {settings.get('level')} "
            f"level, append EOD {eod}, special tokens added "
            f"{_yes_no(settings.get('add_special_tokens'))}"
        )
    for part in record.get("merged_from") or []:
        lines.append(
            f"  merged:     {part.get('prefix')} ({(part.get('counts') or {}).get('documents')}"
            " documents)"
        )
    return lines


def _input_lines(record: dict) -> list:
    """The sidecar's inputs (the first 10) and counts."""
    lines: list[str] = []
    inputs = record.get("inputs") or []
    size = sum(int(entry.get("bytes") or 0) for entry in inputs)
    lines.append(f"  inputs:     {len(inputs)} ({size:,} bytes)")
    lines += [
        f"    {entry.get('kind')}: {entry.get('path', entry.get('type'))}"
        + (f" sha256 {entry['sha256'][:12]}" if entry.get("sha256") else "")
        for entry in inputs[:10]
    ]
    if len(inputs) > 10:
        lines.append(f"    ... and {len(inputs) - 10} more")
    counts = record.get("counts") or {}
    lines.append(
        "  counts:     "
        + ", ".join(
            f"{counts[name]:,} {name.replace('_', ' ')}"
            for name in ("documents", "sequences", "tokens", "empty_documents")
            if name in counts
        )
    )
    return lines


def _print_text(report: dict) -> None:
    s = report["summary"]
    print(f"prefix:     {s['prefix']}")
    print(f"idx:        {s['idx_path']} ({s['idx_bytes']} bytes)")
    print(f"bin:        {s['bin_path']} ({s['bin_bytes']} bytes)")
    print(
        f"header:     MMIDIDX version {s['version']}, dtype {s['dtype']} "
        f"(code {s['dtype_code']}), multimodal {'yes' if s['multimodal'] else 'no'}"
    )
    print(f"sequences:  {s['sequence_count']}")
    print(f"documents:  {s['document_count']}")
    print(f"tokens:     {s['token_count']}")
    print(_stats_line("sequence length", s["sequence_length"]))
    print(_stats_line("tokens per document", s["document_tokens"]))
    print(_stats_line("sequences per document", s["sequences_per_document"]))
    if "modes" in s:
        print("modes:      " + ", ".join(f"{m}: {c}" for m, c in s["modes"].items()))
    for line in _provenance_lines(
        s["prefix"], report["provenance"], report["provenance_notes"], report["provenance_error"]
    ):
        print(line)
    for row in report.get("preview", []):
        more = " ..." if row["truncated"] else ""
        mode = f" mode {row['mode']}" if "mode" in row else ""
        print(f"[{row['sequence']}] ({row['length']} tokens{mode}) {row['tokens']}{more}")
    if "documents" in report:
        print(f"decoded:    {report['decoded_with']}")
        for row in report["documents"]:
            print(
                f"--- document {row['document']} ({row['tokens']} tokens, "
                f"{row['sequences']} sequences) ---"
            )
            print(row["text"])
        if report["documents"]:
            print("--- end ---")
    if report["ok"]:
        print(f"integrity:  OK{report['vocab_note']}")
    else:
        print("integrity:  FAILED")
        for problem in report["problems"]:
            print(f"  - {problem}")


def _look(report: dict, dataset: Any, record: Optional[dict], args: argparse.Namespace) -> None:
    """Add what --show asks: decoded documents with a tokenizer, else sequence token ids."""
    from tokenloom.cli._look import document_rows, resolve_tokenizer

    tokenizer, note = (
        (None, "multimodal: showing token ids")
        if dataset.multimodal
        else resolve_tokenizer(args.tokenizer, record)
    )
    if tokenizer is None:
        report["preview"] = _preview(dataset, args.show, args.show_tokens)
        report["provenance_notes"].append(note)
        return
    report["decoded_with"] = note
    report["documents"] = document_rows(dataset, tokenizer, args.show, args.show_chars)


def _inspect_one(prefix: str, args: argparse.Namespace) -> dict:
    from tokenloom.cli._sidecars import read_provenance
    from tokenloom.format.integrity import check_integrity, dataset_summary, open_for_inspection

    try:
        dataset = open_for_inspection(prefix)
    except FormatError as error:
        if args.json:
            return {"prefix": prefix, "ok": False, "problems": [str(error)]}
        raise
    with dataset:
        problems = check_integrity(dataset, args.vocab_size)
        summary = dataset_summary(dataset)
        record, notes, unreadable = read_provenance(prefix, summary)
        report = {
            "summary": summary,
            "ok": not problems,
            "problems": problems,
            "vocab_note": f" (token ids below {args.vocab_size})" if args.vocab_size else "",
            "provenance": record,
            "provenance_notes": notes,
            "provenance_error": unreadable,
        }
        if args.show:
            _look(report, dataset, record, args)
    return report


def _plot(args: argparse.Namespace) -> dict:
    from tokenloom.cli._look import plot_datasets
    from tokenloom.format.integrity import open_for_inspection

    datasets = [(os.path.basename(prefix), open_for_inspection(prefix)) for prefix in args.prefixes]
    try:
        return plot_datasets(datasets, args.plot, args.plot_max_tokens)
    finally:
        for _, dataset in datasets:
            dataset.close()


BOUNDS = (
    Bound("vocab_size", "--vocab-size", 1),
    Bound("show", "--show", 0),
    Bound("show_tokens", "--show-tokens", 1),
    Bound("show_chars", "--show-chars", 0),
    Bound("plot_max_tokens", "--plot-max-tokens", 1),
)
"""Every numeric option of ``inspect``; a value above the data's size means "all"."""


def _check_args(args: argparse.Namespace) -> None:
    check_numbers(args, BOUNDS)
    if args.tokenizer and not args.show:
        raise ConfigError("--tokenizer decodes the documents that --show N prints: add --show N")


def run(args: argparse.Namespace) -> int:
    """Inspect every prefix (and plot them); return 0 when all are sound, 1 otherwise."""
    _check_args(args)
    reports = [_inspect_one(prefix, args) for prefix in args.prefixes]
    plot = _plot(args) if args.plot else None
    if args.json:
        flat = []
        for report in reports:
            report.pop("vocab_note", None)
            flat.append({**report.pop("summary", {}), **report})
        if plot is not None:
            for entry in flat:
                entry["plot"] = plot
        json.dump(flat[0] if len(flat) == 1 else flat, sys.stdout, indent=2)
        print()
    else:
        for number, report in enumerate(reports):
            if number:
                print()
            _print_text(report)
        if plot is not None:
            print(
                f"\nplot:       {plot['path']} (token frequencies from "
                + ", ".join(f"{n:,}" for n in plot["sampled_tokens"].values())
                + " tokens)"
            )
    return 0 if all(report["ok"] for report in reports) else 1

"""``tokenloom merge``: concatenate several .bin/.idx pairs into one (Megatron's add_index).

Two forms: tokenloom's (``--output-prefix OUT PREFIX ...``, in the order given) and
Megatron-LM's ``tools/merge_datasets.py`` (``--input DIR --output-prefix OUT
[--multimodal]``: every pair in DIR, sorted by prefix).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional

from tokenloom.cli._preprocess_flags import suggesting
from tokenloom.errors import ConfigError

FORMS = (
    "tokenloom merge --output-prefix OUT PREFIX [PREFIX ...] | "
    "tokenloom merge --input DIR --output-prefix OUT [--multimodal] "
    "(Megatron's tools/merge_datasets.py)"
)

_DESCRIPTION = """\
Concatenate datasets: the documents of each PREFIX, in the order given, become the
documents of --output-prefix.  The result is byte-identical to merging with
megatron-core's IndexedDatasetBuilder.add_index.

Megatron-LM's tools/merge_datasets.py command line works unchanged: --input DIR merges
every .bin/.idx pair in DIR, in sorted prefix order, as merge_datasets.py does (other
files, such as provenance sidecars, are left alone; a .bin without its .idx or the
reverse is an error).

All inputs must share the token dtype and be all multimodal or all text-only (the
first input decides; a mismatch is an error naming the file).  --multimodal says the
inputs are multimodal; with --input, leaving it out says they are text-only, as in
merge_datasets.py (which, given multimodal inputs without it, drops their modes:
tokenloom refuses instead).  The output is written under temporary names and appears
only when complete.

Inputs made by tokenloom carry a provenance sidecar (PREFIX.json) naming their
tokenizer: pairs of different tokenizers are refused (both are named) unless
--allow-mixed-tokenizers is given.  Pairs without a sidecar (made by Megatron) are
merged with a note that their tokenizer was not checked.  When every input has a
sidecar, the output gets one too (OUT.json: the inputs' records and summed counts).
"""

_EPILOG = """\
examples:
  tokenloom merge --output-prefix data/all data/part-0 data/part-1 data/part-2
  tokenloom merge --output-prefix data/all --overwrite data/shard-*_text_document
  (a shell glob gives .bin and .idx names too; both are accepted and deduplicated)
  tokenloom merge --input data/shards --output-prefix data/all      # merge_datasets.py
"""


def _check_form(args: argparse.Namespace) -> Optional[str]:
    """Exactly one of the two forms (a usage error otherwise)."""
    if args.input is not None and args.prefixes:
        return "give the inputs once: PREFIX ... or --input DIR, not both"
    if args.input is None and not args.prefixes:
        return "the following arguments are required: PREFIX (or --input DIR)"
    return None


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``merge`` subcommand."""
    parser = subparsers.add_parser(
        "merge",
        help="concatenate several .bin/.idx pairs into one",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    suggesting(parser, FORMS, _check_form)
    parser.add_argument(
        "prefixes", nargs="*", metavar="PREFIX", help="input dataset paths without .bin/.idx"
    )
    parser.add_argument(
        "--input",
        metavar="DIR",
        help="merge every .bin/.idx pair in DIR, sorted by prefix (merge_datasets.py)",
    )
    parser.add_argument(
        "--output-prefix",
        required=True,
        metavar="OUT",
        help="path of the merged pair without .bin/.idx",
    )
    parser.add_argument(
        "--multimodal",
        action="store_true",
        default=None,
        help="the inputs are multimodal (with --input, leaving it out means text-only)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing OUT.bin/OUT.idx (atomically, on success)",
    )
    parser.add_argument("--no-progress", action="store_true", help="do not show a progress bar")
    parser.add_argument(
        "--allow-mixed-tokenizers",
        action="store_true",
        help="merge pairs whose provenance sidecars name different tokenizers "
        "(refused by default: their token ids mean different things)",
    )
    parser.set_defaults(func=run)
    return parser


def _normalise(prefixes) -> list:
    """Strip .bin/.idx; a ``X.bin X.idx`` pair (as a shell glob gives) counts once.

    A prefix named twice on purpose is merged twice.
    """
    result, previous = [], None
    for word in prefixes:
        suffix = word[-4:] if word.endswith((".bin", ".idx")) else ""
        prefix = word[: -len(suffix)] if suffix else word
        if previous and previous[0] == prefix and suffix and previous[1] and previous[1] != suffix:
            previous = None  # second half of a pair
            continue
        result.append(prefix)
        previous = (prefix, suffix)
    return result


def directory_prefixes(directory: str) -> tuple[list[str], list[str]]:
    """``(prefixes, ignored files)`` of merge_datasets.py's ``--input DIR``: every
    ``X.bin``/``X.idx`` pair among the files of DIR, sorted by prefix.

    A ``.bin`` or ``.idx`` without its partner is a ConfigError (merge_datasets.py
    asserts); other files are ignored (merge_datasets.py accepts ``X.json`` beside a
    pair and stops at anything else) and returned so that they can be named.
    """
    try:
        names = [n for n in os.listdir(directory) if os.path.isfile(os.path.join(directory, n))]
    except NotADirectoryError:
        raise ConfigError(f"--input {directory}: not a directory") from None
    except FileNotFoundError:
        raise ConfigError(f"--input {directory}: the directory does not exist") from None
    files = set(names)
    prefixes, ignored = set(), []
    for name in sorted(names):
        prefix, ext = os.path.splitext(name)
        if ext in (".bin", ".idx"):
            partner = prefix + (".idx" if ext == ".bin" else ".bin")
            if partner not in files:
                raise ConfigError(
                    f"--input {directory}: {name} has no {partner} beside it; add it or "
                    f"move {name} out of the directory"
                )
            prefixes.add(prefix)
        elif f"{prefix}.idx" not in files:
            ignored.append(name)
    if not prefixes:
        raise ConfigError(f"--input {directory}: no .bin/.idx pair in the directory")
    return [os.path.join(directory, prefix) for prefix in sorted(prefixes)], ignored


def _inputs(args: argparse.Namespace) -> list[str]:
    if args.input is None:
        return _normalise(args.prefixes)
    prefixes, ignored = directory_prefixes(args.input)
    if ignored:
        shown = ", ".join(ignored[:5]) + (
            f" and {len(ignored) - 5} more" if len(ignored) > 5 else ""
        )
        print(
            f"tokenloom merge: ignored {len(ignored)} file(s) that are not .bin/.idx pairs: {shown}",
            file=sys.stderr,
        )
    return prefixes


def _modality(prefix: str, wanted: Optional[bool]) -> tuple[bool, Any]:
    """``(multimodal, dtype)`` of the output: the first input's, checked against
    ``wanted`` (``--multimodal``; None: whatever the first input is)."""
    from tokenloom.format.integrity import open_for_inspection

    first = open_for_inspection(prefix)
    detected, dtype, count = first.multimodal, first.dtype, len(first)
    first.close()
    if wanted is None:
        return detected, dtype
    if count and detected != wanted:  # an empty pair cannot show its modes
        if detected:
            raise ConfigError(
                f"{prefix}: the dataset is multimodal; pass --multimodal (merge_datasets.py "
                "without it would drop the modes)"
            )
        raise ConfigError(f"{prefix}: --multimodal was given but the dataset is not multimodal")
    return wanted, dtype


def run(args: argparse.Namespace) -> int:
    """Merge the inputs (``args.prefixes`` or the pairs of ``args.input``) into
    ``args.output_prefix``."""
    import numpy

    from tokenloom.format import (
        IndexedDatasetBuilder,
        get_bin_path,
        get_idx_path,
        read_index_header,
    )
    from tokenloom.progress import progress
    from tokenloom.provenance import check_tokenizers, merged_sidecar, read_sidecars

    prefixes = _inputs(args)
    out = args.output_prefix
    exists = os.path.exists(get_idx_path(out)) or os.path.exists(get_bin_path(out))
    if exists and not args.overwrite:
        raise ConfigError(f"{out}: output pair already exists; pass --overwrite to replace it")
    headers = [read_index_header(get_idx_path(prefix)) for prefix in prefixes]
    wanted = bool(args.multimodal) if args.input is not None else args.multimodal
    multimodal, dtype = _modality(prefixes[0], wanted)
    sidecars, notes = read_sidecars(prefixes)
    notes += check_tokenizers(sidecars, args.allow_mixed_tokenizers)
    for note in notes:
        print(f"tokenloom merge: {note}", file=sys.stderr)
    total = sum(os.path.getsize(get_bin_path(prefix)) for prefix in prefixes)
    builder = IndexedDatasetBuilder(get_bin_path(out), dtype=dtype, multimodal=multimodal)
    with builder:
        bar = progress(
            total=total,
            unit="B",
            unit_scale=True,
            desc="merge",
            enabled=False if args.no_progress else None,
        )
        with bar:
            for prefix in prefixes:
                builder.add_index(prefix, progress=bar.update)
        builder.finalize(get_idx_path(out), extra_files=merged_sidecar(sidecars))
    sequences = sum(header.sequence_count for header in headers)
    documents = sum(header.num_documents for header in headers)
    tokens = total // numpy.dtype(dtype).itemsize
    print(
        f"merged {len(prefixes)} datasets: {sequences} sequences, {documents} documents, "
        f"{tokens} tokens ({numpy.dtype(dtype).name}{', multimodal' if multimodal else ''}) "
        f"-> {get_bin_path(out)}, {get_idx_path(out)}"
    )
    return 0

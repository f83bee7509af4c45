"""``tokenloom merge``: concatenate several .bin/.idx pairs into one (Megatron's add_index)."""

from __future__ import annotations

import argparse
import os
import sys

from tokenloom.errors import ConfigError

_DESCRIPTION = """\
Concatenate datasets: the documents of each PREFIX, in the order given, become the
documents of --output-prefix.  The result is byte-identical to merging with
megatron-core's IndexedDatasetBuilder.add_index.

All inputs must share the token dtype and be all multimodal or all text-only (the
first input decides; a mismatch is an error naming the file).  The output is
written under temporary names and appears only when complete.

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
"""


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``merge`` subcommand."""
    parser = subparsers.add_parser(
        "merge",
        help="concatenate several .bin/.idx pairs into one",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "prefixes", nargs="+", metavar="PREFIX", help="input dataset paths without .bin/.idx"
    )
    parser.add_argument(
        "--output-prefix",
        required=True,
        metavar="OUT",
        help="path of the merged pair without .bin/.idx",
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


def run(args: argparse.Namespace) -> int:
    """Merge ``args.prefixes`` into ``args.output_prefix``."""
    import numpy

    from tokenloom.format import (
        IndexedDatasetBuilder,
        get_bin_path,
        get_idx_path,
        read_index_header,
    )
    from tokenloom.format.integrity import open_for_inspection
    from tokenloom.progress import progress
    from tokenloom.provenance import check_tokenizers, merged_sidecar, read_sidecars

    prefixes = _normalise(args.prefixes)
    out = args.output_prefix
    exists = os.path.exists(get_idx_path(out)) or os.path.exists(get_bin_path(out))
    if exists and not args.overwrite:
        raise ConfigError(f"{out}: output pair already exists; pass --overwrite to replace it")
    headers = [read_index_header(get_idx_path(prefix)) for prefix in prefixes]
    sidecars, notes = read_sidecars(prefixes)
    notes += check_tokenizers(sidecars, args.allow_mixed_tokenizers)
    for note in notes:
        print(f"tokenloom merge: {note}", file=sys.stderr)
    first = open_for_inspection(prefixes[0])
    multimodal, dtype = first.multimodal, first.dtype
    first.close()
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

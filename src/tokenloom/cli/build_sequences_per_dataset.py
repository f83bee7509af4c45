"""``tokenloom build-sequences-per-dataset``: count sequences and documents of every prefix.

Writes the JSON file that megatron-core reads through ``--per-dataset-sequences-path``
(``GPTDatasetConfig.sequences_per_dataset``): ``{prefix: [sequence_count,
document_count]}`` with the raw ``.idx`` header fields.  Only the 34-byte header of
each ``.idx`` is read, so thousands of prefixes take seconds; training start-up then
opens one JSON file instead of one index per prefix.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError

_DESCRIPTION = """\
Write the sequences-per-dataset JSON of a blend: for each dataset prefix the
[sequence_count, document_count] fields of its .idx header (document_count counts
the leading 0 of the document index, exactly as megatron-core stores it).

Give the blend the way you give it to training, in any one of these forms:
  PREFIX ...                          bare prefixes, or 'WEIGHT PREFIX WEIGHT PREFIX ...'
  --data-path ...                     the same, Megatron spelling
  --data-args-path FILE               a text file holding the --data-path words
  --train-data-path/--valid-data-path/--test-data-path ...
  --per-split-data-args-path FILE     JSON {"train": [...], "valid": [...], "test": [...]}

Each prefix is listed once (first occurrence order).  Use the result with
GPTDatasetConfig(sequences_per_dataset=...) or Megatron's --per-dataset-sequences-path.

Megatron-LM's tools/build_sequences_per_dataset.py command lines work unchanged
(--data-path, --data-args-path, --train/valid/test-data-path,
--per-split-data-args-path, --per-dataset-sequences-path as the output), and the file
is the one its build_sequences_per_dataset() result gives with json.dump: compact
JSON {"prefix": [sequence_count, document_count], ...}, no trailing newline.
"""

_EPILOG = """\
examples:
  tokenloom build-sequences-per-dataset data/web data/code -o seqs.json
  tokenloom build-sequences-per-dataset --data-path 0.7 data/web 0.3 data/code -o seqs.json
  tokenloom build-sequences-per-dataset --per-split-data-args-path blend.json -o seqs.json
"""


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``build-sequences-per-dataset`` subcommand."""
    parser = subparsers.add_parser(
        "build-sequences-per-dataset",
        help="write the sequences-per-dataset JSON of a blend (reads only .idx headers)",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "prefixes",
        nargs="*",
        metavar="PREFIX",
        help="dataset prefixes (path without .bin/.idx), optionally preceded by weights",
    )
    _add_blend_flags(parser)
    parser.add_argument(
        "-o",
        "--output",
        "--per-dataset-sequences-path",
        dest="output",
        required=True,
        metavar="FILE",
        help="JSON file to write (atomically)",
    )
    parser.add_argument("--no-progress", action="store_true", help="do not show a progress bar")
    parser.set_defaults(func=run)
    return parser


def _add_blend_flags(parser: argparse.ArgumentParser) -> None:
    """The blend's forms, as Megatron's: one list, a file of it, or one per split."""
    blend = parser.add_argument_group("blend (choose one form)")
    blend.add_argument(
        "--data-path",
        nargs="*",
        metavar="WORD",
        help="weight/prefix list as for Megatron's --data-path",
    )
    blend.add_argument(
        "--data-args-path",
        metavar="FILE",
        help="text file with the --data-path words (for very long blends)",
    )
    for split in ("train", "valid", "test"):
        blend.add_argument(
            f"--{split}-data-path",
            nargs="*",
            metavar="WORD",
            help=f"weight/prefix list of the {split} split",
        )
    blend.add_argument(
        "--per-split-data-args-path",
        metavar="FILE",
        help='JSON file {"train": [...], "valid": [...], "test": [...]}',
    )


def _read_words(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().split()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"--data-args-path {path}: cannot read it ({error})") from None


def collect_blends(args: Any) -> list[tuple[list[str], Optional[list[float]]]]:
    """Every blend named by the arguments (exactly one form must be used).

    ``args`` is this command's namespace or Megatron's (``data_path``,
    ``data_args_path``, ``train/valid/test_data_path``, ``per_split_data_args_path``;
    ``prefixes`` is tokenloom's extension and may be absent)."""
    from tokenloom.datasets.utils import get_blend_per_split_from_file

    def given(name: str) -> Any:
        return read_attribute(args, name, None)

    split_lists = [given(f"{split}_data_path") for split in ("train", "valid", "test")]
    forms = {
        "PREFIX": given("prefixes") or None,
        "--data-path": given("data_path"),
        "--data-args-path": given("data_args_path"),
        "--train/valid/test-data-path": None
        if all(words is None for words in split_lists)
        else split_lists,
        "--per-split-data-args-path": given("per_split_data_args_path"),
    }
    used = [name for name, value in forms.items() if value is not None]
    if len(used) != 1:
        raise ConfigError(
            f"give the blend in exactly one form, got {used or 'none'}; e.g. "
            f"`tokenloom build-sequences-per-dataset data/web data/code -o seqs.json`"
        )
    if forms["--per-split-data-args-path"] is not None:
        blends = get_blend_per_split_from_file(forms["--per-split-data-args-path"])
    elif forms["--train/valid/test-data-path"] is not None:
        blends = [
            _blend(f"--{s}-data-path", w)
            for s, w in zip(("train", "valid", "test"), split_lists)
            if w is not None
        ]
    elif forms["--data-args-path"] is not None:
        blends = [_blend("--data-args-path", _read_words(forms["--data-args-path"]))]
    else:
        blends = [_blend(used[0], forms[used[0]])]
    return [blend for blend in blends if blend is not None]


def _blend(flag: str, words: Sequence[Any]) -> Any:
    from tokenloom.datasets.utils import get_blend_from_list

    if not words:
        raise ConfigError(f"{flag} names no dataset prefix; give one or more prefixes")
    return get_blend_from_list([str(word) for word in words])


def unique_prefixes(blends) -> list[str]:
    """Prefixes of all blends, each once, in order of first appearance."""
    return list(dict.fromkeys(prefix for prefixes, _ in blends for prefix in prefixes))


def count_sequences(prefixes: Sequence[str], progress_enabled=None) -> dict[str, list[int]]:
    """``{prefix: [sequence_count, document_count]}`` from each ``.idx`` header."""
    from tokenloom.format import get_idx_path, read_index_header
    from tokenloom.progress import progress

    counts: dict[str, list[int]] = {}
    with progress(
        total=len(prefixes), desc="reading .idx headers", unit="prefix", enabled=progress_enabled
    ) as bar:
        for prefix in prefixes:
            header = read_index_header(get_idx_path(prefix))
            counts[prefix] = [int(header.sequence_count), int(header.document_count)]
            bar.update(1)
    return counts


def build_sequences_per_dataset(args: Any) -> dict[str, tuple[int, int]]:
    """Megatron-LM's ``tools/build_sequences_per_dataset.build_sequences_per_dataset``:
    ``{prefix: (sequence_count, document_count)}`` of every prefix the blend arguments of
    ``args`` name (Megatron's training namespace works as is), each prefix once.

    The result can be passed as ``GPTDatasetConfig(sequences_per_dataset=...)`` or
    written with :func:`encode_sequences_per_dataset`."""
    prefixes = unique_prefixes(collect_blends(args))
    if not prefixes:
        raise ConfigError("the blend names no dataset prefix; nothing to count")
    enabled = False if read_attribute(args, "no_progress", False) else None
    counts = count_sequences(prefixes, progress_enabled=enabled)
    return {prefix: (count[0], count[1]) for prefix, count in counts.items()}


def encode_sequences_per_dataset(counts: Mapping[str, Sequence[int]]) -> bytes:
    """The file Megatron-LM's tool writes: ``json.dump`` of the counts (compact, no
    trailing newline)."""
    return json.dumps({prefix: list(count) for prefix, count in counts.items()}).encode("utf-8")


def run(args: argparse.Namespace) -> int:
    """Entry point of the subcommand."""
    from tokenloom.atomic import atomic_write_bytes

    counts = build_sequences_per_dataset(args)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    atomic_write_bytes(args.output, encode_sequences_per_dataset(counts))
    sequences = sum(count[0] for count in counts.values())
    print(f"wrote {args.output}: {len(counts)} prefixes, {sequences} sequences")
    return 0

"""``tokenloom preview``: what the training run will see, before it runs.

Builds (or reuses) the datasets of a training config exactly as ``tokenloom
prepare-cache`` does, prints how often each source repeats (epochs and repetitions:
Megatron logs only the epochs, and a user could repeat data 23 times without
knowing), and decodes random samples with document boundaries and the loss mask
marked.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from collections.abc import Sequence
from typing import Any, Optional

import numpy

from tokenloom.attributes import has_attribute
from tokenloom.cli._numbers import Bound, check_numbers
from tokenloom.errors import ConfigError

_DESCRIPTION = """\
Preview a training blend: build (or reuse) its index caches exactly as
`tokenloom prepare-cache --config` does (same config file, same caches in
data_cache_path), then print

  * for every source of the chosen split: its weight, documents and tokens in the
    split, the samples the blend draws from it, its number of epochs (as Megatron
    logs) and how many times its tokens are repeated; a source repeated more than
    --warn-repeats times gets a loud WARNING (also on stderr);
  * --samples random samples, decoded with --tokenizer SPEC (default: the tokenizer
    named by the first source's provenance sidecar), with every document boundary
    marked as |--- document N ---| and the tokens whose labels the loss mask drops
    shown as [MASKED: ...].

The datasets are built with the tokenizer prepare-cache uses for the same config
(Megatron's tokenizer settings such as tokenizer_type, or vocab_size/eod/pad); what
the config leaves out of vocab_size, eod and pad is taken from the blend's provenance
sidecars, else from --tokenizer.

Numbers: --samples and --chars are integers >= 0 (0: no samples / whole documents),
--seed an integer >= 0, --warn-repeats a number > 0 (inf: never warn).
"""

_EPILOG = """\
examples:
  tokenloom preview --config train.json
  tokenloom preview --config train.json --tokenizer hf:tokenizer.json --samples 3
  tokenloom preview --config train.json --split valid --seed 7 --chars 2000
"""
_SPLITS = ("train", "valid", "test")


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``preview`` subcommand."""
    parser = subparsers.add_parser(
        "preview",
        help="decoded samples and the epochs of each source of a training blend",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        required=True,
        help="the training config (JSON or YAML) that prepare-cache reads",
    )
    parser.add_argument(
        "--tokenizer", metavar="SPEC", help="decode with this tokenizer (default: the sidecar's)"
    )
    parser.add_argument(
        "--split",
        dest="preview_split",
        choices=_SPLITS,
        default="train",
        help="the split to preview (default train)",
    )
    _add_sample_flags(parser)
    parser.add_argument(
        "--warn-repeats",
        type=float,
        default=4.0,
        metavar="R",
        help="warn when a source's tokens repeat more than R times (R > 0, default 4; inf: never)",
    )
    parser.set_defaults(func=run)
    return parser


def _add_sample_flags(parser: argparse.ArgumentParser) -> None:
    """How many random samples to print, which, and how much of each."""
    parser.add_argument(
        "--samples",
        type=int,
        default=4,
        metavar="N",
        help="random samples to print (default 4; 0: only the sources; more than the "
        "split has: all)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="picks the random samples (an integer >= 0)"
    )
    parser.add_argument(
        "--chars",
        type=int,
        default=400,
        metavar="C",
        help="at most C characters per document piece (default 400; 0: all)",
    )


# -- the blend ------------------------------------------------------------------------------
def blend_prefixes(settings: dict[str, Any]) -> list[str]:
    """Every prefix the config's blend names, in order."""
    from tokenloom.datasets.utils import (
        get_blend_from_list,
        get_blend_per_split_from_dict,
        get_blend_per_split_from_file,
    )

    blend, per_split = settings.get("blend"), settings.get("blend_per_split")
    if blend is not None:
        parsed = get_blend_from_list(blend.split() if isinstance(blend, str) else blend)
        return list(parsed[0]) if parsed else []
    if per_split is None:
        return []
    blends = (
        get_blend_per_split_from_dict(per_split, "blend_per_split")
        if isinstance(per_split, dict)
        else get_blend_per_split_from_file(per_split)
    )
    return list(dict.fromkeys(p for b in blends if b for p in b[0]))


def parts_of(dataset: Any) -> tuple[list[Any], numpy.ndarray, list[float]]:
    """``(sources, samples drawn from each, weights)`` of a blended or a single dataset."""
    if has_attribute(dataset, "dataset_index"):
        parts = list(dataset.datasets)
        drawn = numpy.bincount(
            numpy.asarray(dataset.dataset_index, numpy.int64), minlength=len(parts)
        )
        return parts, drawn, [float(w) for w in dataset.weights]
    return [dataset], numpy.array([len(dataset)]), [1.0]


def source_rows(dataset: Any) -> list[dict[str, Any]]:
    """Per source: documents and tokens of the split, samples drawn, epochs, repetitions."""
    rows = []
    parts, drawn, weights = parts_of(dataset)
    total_weight = sum(weights) or 1.0
    for part, used, weight in zip(parts, drawn.tolist(), weights):
        seq = int(part.config.sequence_length)
        extra = int(part.config.add_extra_token_to_sequence)
        indices = part.indices if part.indices is not None else numpy.arange(len(part.dataset))
        tokens = int(numpy.asarray(part.dataset.sequence_lengths)[indices].sum(dtype=numpy.int64))
        epochs = int(part.document_index.shape[0]) // max(int(indices.shape[0]), 1)
        rows.append(
            {
                "source": part.dataset_path or type(part.dataset).__name__,
                "weight": weight / total_weight,
                "documents": int(indices.shape[0]),
                "tokens": tokens,
                "samples_built": len(part),
                "samples_drawn": int(used),
                "epochs": epochs,
                "repeats": (int(used) * seq + extra) / tokens if tokens else float("inf"),
            }
        )
    return rows


def print_sources(name: str, dataset: Any, warn_repeats: float) -> list[dict[str, Any]]:
    """Print the source table of one split; warn loudly about heavy repetition."""
    rows = source_rows(dataset)
    print(
        f"{name} split: {len(dataset):,} samples of {dataset_sequence_length(dataset)} "
        f"tokens from {len(rows)} source(s)"
    )
    print(
        f"  {'weight':>7} {'documents':>11} {'tokens':>14} {'samples':>11} {'epochs':>6} "
        f"{'repeats':>8}  source"
    )
    for row in rows:
        flag = "  <-- REPEATED" if row["repeats"] > warn_repeats else ""
        print(
            f"  {row['weight']:>7.3f} {row['documents']:>11,} {row['tokens']:>14,} "
            f"{row['samples_drawn']:>11,} {row['epochs']:>6} {row['repeats']:>7.2f}x  "
            f"{row['source']}{flag}"
        )
    for row in rows:
        if row["repeats"] > warn_repeats:
            message = (
                f"WARNING: {row['source']} is repeated {row['repeats']:.1f} times in the "
                f"{name} split ({row['epochs']} epochs of {row['documents']:,} documents): "
                "the model sees each of its tokens that often. Add data, lower its "
                "weight, or train on fewer samples."
            )
            print(message)
            print(f"tokenloom preview: {message}", file=sys.stderr)
    return rows


def dataset_sequence_length(dataset: Any) -> int:
    """The ``sequence_length`` of the config ``dataset`` (or its first part) was built with."""
    parts, _, _ = parts_of(dataset)
    return int(parts[0].config.sequence_length)


# -- samples --------------------------------------------------------------------------------
def sample_segments(part: Any, idx: int) -> list[tuple[int, int, int]]:
    """``(sequence id, first token, token count)`` of each document piece in sample
    ``idx`` of a GPT dataset (megatron-core's walk of its sample index)."""
    j = int(part.shuffle_index[idx])
    (begin, begin_offset), (end, end_offset) = (
        tuple(int(v) for v in part.sample_index[k]) for k in (j, j + 1)
    )
    extra = int(part.config.add_extra_token_to_sequence)
    documents = part.document_index
    if begin == end:
        return [(int(documents[begin]), begin_offset, end_offset - begin_offset + extra)]
    lengths = part.dataset.sequence_lengths
    segments = []
    for i in range(begin, end + 1):
        doc = int(documents[i])
        offset = begin_offset if i == begin else 0
        count = int(lengths[doc]) - offset if i < end else end_offset + extra
        if count > 0:
            segments.append((doc, offset, count))
    return segments


def _decode(tokenizer: Any, ids: numpy.ndarray, chars: int) -> str:
    from tokenloom.cli._look import shorten

    if tokenizer is None:
        shown = ids[:24].tolist()
        return f"{shown}{' ...' if ids.size > 24 else ''}"
    return shorten(tokenizer.decode(ids), chars)


def render_sample(
    window: numpy.ndarray,
    segments: Sequence[tuple[int, int, int]],
    loss_mask: numpy.ndarray,
    tokenizer: Any,
    chars: int,
) -> list[str]:
    """Lines for one sample: each document piece under a boundary line, runs of tokens
    whose labels are masked out shown as ``[MASKED: ...]``."""
    lines, position = [], 0
    for doc, offset, count in segments:
        lines.append(
            f"|--- document {doc}"
            + (f" from token {offset}" if offset else "")
            + f" ({count} tokens) ---|"
        )
        masked = [position + k >= 1 and not loss_mask[position + k - 1] for k in range(count)]
        pieces = []
        for is_masked, group in itertools.groupby(range(count), key=lambda k: masked[k]):
            ks = list(group)
            text = _decode(tokenizer, window[position + ks[0] : position + ks[-1] + 1], chars)
            pieces.append(f"[MASKED: {text}]" if is_masked else text)
        lines.append("".join(pieces) if tokenizer is not None else " ".join(pieces))
        position += count
    return lines


def _locate(dataset: Any, k: int) -> tuple[Any, int, str]:
    if has_attribute(dataset, "locate"):  # a train split continued after a mixture change
        part, inner = dataset.locate(k)
        if part is dataset.old:
            return _locate(part, inner)
        return part, inner, f"-> {part.dataset_path} sample {inner} (continued)"
    if has_attribute(dataset, "dataset_index"):
        part = dataset.datasets[int(dataset.dataset_index[k])]
        inner = int(dataset.dataset_sample_index[k])
        return part, inner, f"-> {part.dataset_path} sample {inner}"
    return dataset, k, ""


def print_sample(dataset: Any, k: int, tokenizer: Any, chars: int) -> None:
    """Print sample ``k`` of a split, decoded, with boundaries and the loss mask."""
    part, inner, where = _locate(dataset, k)
    sample = part[inner]
    tokens, mask = numpy.asarray(sample["tokens"]), numpy.asarray(sample["loss_mask"])
    segments = sample_segments(part, inner)
    window = numpy.concatenate(
        [numpy.asarray(part.dataset.get(doc, offset, count)) for doc, offset, count in segments]
    )
    kept = int(numpy.count_nonzero(mask))
    print(
        f"\n=== sample {k} {where} ({tokens.shape[0]} tokens, {len(segments)} document "
        f"piece(s); loss mask keeps {kept}/{mask.shape[0]} labels) ==="
    )
    if window.shape[0] < tokens.shape[0] or not numpy.array_equal(
        window[: tokens.shape[0]], tokens
    ):
        print("(padded sample: shown without boundaries)")  # drop_last_partial=False tail
        window, segments = tokens, [(-1, 0, int(tokens.shape[0]))]
    for line in render_sample(window, segments, mask, tokenizer, chars):
        print(line)


# -- the command ----------------------------------------------------------------------------
def _tokenizer(args: argparse.Namespace, settings: dict[str, Any]) -> Any:
    from tokenloom.cli._look import resolve_tokenizer
    from tokenloom.cli._tokenizer_settings import names_tokenizer, sidecar_ids
    from tokenloom.provenance import read_sidecar

    prefixes = blend_prefixes(settings)
    record = read_sidecar(prefixes[0]) if prefixes and not args.tokenizer else None
    tokenizer, note = resolve_tokenizer(args.tokenizer, record)
    print(f"tokenizer:           {note}")
    if tokenizer is not None and not names_tokenizer(settings) and not sidecar_ids(prefixes):
        # data without sidecars: the decoding tokenizer says what the config leaves out
        settings.setdefault("vocab_size", int(tokenizer.vocab_size))
        if tokenizer.eod is not None:
            settings.setdefault("eod", int(tokenizer.eod))
    return tokenizer


BOUNDS = (
    Bound("samples", "--samples", 0),
    Bound("seed", "--seed", 0),
    Bound("chars", "--chars", 0),
    Bound("warn_repeats", "--warn-repeats", 0, integer=False, low_open=True, allow_inf=True),
)
"""Every numeric option of ``preview`` (the config's settings: prepare-cache's checks)."""


def _check(args: argparse.Namespace) -> None:
    check_numbers(args, BOUNDS)


def run(args: argparse.Namespace) -> int:
    """Entry point of the subcommand."""
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.cli.prepare_cache import compute_plan, make_config, merged_settings
    from tokenloom.datasets import GPTDataset

    _check(args)
    settings = merged_settings(args)
    tokenizer = _tokenizer(args, settings)
    config, plan = make_config(settings), compute_plan(settings)
    print(f"cache path:          {os.path.abspath(config.path_to_cache)}")
    datasets = BlendedMegatronDatasetBuilder(GPTDataset, plan.sizes, lambda: True, config).build()
    chosen: Optional[Any] = dict(zip(_SPLITS, datasets)).get(args.preview_split)
    if isinstance(chosen, list):  # multiple validation sets: the first
        chosen = chosen[0] if chosen else None
    if chosen is None or len(chosen) == 0:
        raise ConfigError(
            f"the {args.preview_split} split is empty in {args.config}: choose "
            "another "
            "with --split, or give it weight and samples"
        )
    print_sources(args.preview_split, chosen, args.warn_repeats)
    first = 0
    if settings.get("mixture_change") and args.preview_split == "train":
        from tokenloom.cli._mixture_change import prepare_change

        chosen = prepare_change(settings["mixture_change"], config, chosen)
        first = chosen.consumed  # the samples the resumed run reads
    picks = first + numpy.random.default_rng(args.seed).choice(
        len(chosen) - first, min(args.samples, len(chosen) - first), replace=False
    )
    for k in sorted(int(p) for p in picks):
        print_sample(chosen, k, tokenizer, args.chars)
    return 0

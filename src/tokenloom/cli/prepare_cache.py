"""``tokenloom prepare-cache``: build every index cache of a training run, offline.

Training start-up otherwise spends minutes on rank 0 building document, sample,
shuffle and blending indices while every GPU waits.  This command computes the
same per-split sample targets as Megatron-LM's training loop and runs the same
:class:`~tokenloom.builder.BlendedMegatronDatasetBuilder`, so the run finds every
cache ready (and can then use ``fast_cache_load``).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any, Optional

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError, UntrustedFileError

_DESCRIPTION = """\
Build every index cache (GPT document/sample/shuffle indices and blending indices)
of a training run ahead of time, on one CPU machine, exactly as the run will.

The per-split sample targets are computed as Megatron-LM training does:
  train = train_iters * global_batch_size          (or --train-samples)
  valid = (train_iters // eval_interval + 1) * eval_iters * global_batch_size
          (None, i.e. one full epoch, with --full-validation)
  test  = eval_iters * global_batch_size
global_batch_size defaults to micro_batch_size * data-parallel size, where
data-parallel size = world_size / (tensor * pipeline * context parallel sizes).

Settings come from --config (JSON, or YAML with PyYAML installed) and/or flags;
flags win.  Config keys are the long flag names with underscores; Megatron's
names are accepted too (data_path, seq_length, seed, data_cache_path, ...).
Mock data (no blend) has nothing to cache and is rejected.
"""

_EPILOG = """\
example config (train.json):
  {"data_path": ["0.7", "data/web", "0.3", "data/code"], "split": "98,2,0",
   "seq_length": 4096, "seed": 1234, "data_cache_path": "/fast/cache",
   "vocab_size": 128256, "eod": 128001,
   "train_iters": 100000, "eval_interval": 1000, "eval_iters": 10,
   "global_batch_size": 512, "world_size": 256, "tensor_model_parallel_size": 8}

examples:
  tokenloom prepare-cache --config train.json
  tokenloom prepare-cache --config train.json --dry-run          # print the plan only
  tokenloom prepare-cache --data-path data/web --split 99,1,0 --seq-length 2048 \\
      --vocab-size 50257 --eod 50256 --train-iters 1000 --eval-interval 100 \\
      --eval-iters 5 --global-batch-size 64 --data-cache-path cache/
"""

# dest -> (flags, kind, help); kind: int, float, path, split (str), words (list), bool
_OPTIONS: dict[str, tuple] = {
    "blend": (["--data-path", "--blend"], "words", "weight/prefix list: '0.7 a 0.3 b' or 'a b'"),
    "blend_per_split": (
        ["--per-split-data-args-path"],
        "path",
        'JSON file {"train": [...], "valid": [...], "test": [...]}',
    ),
    "split": (["--split"], "split", "train,valid,test weights with --data-path, e.g. 98,2,0"),
    "sequence_length": (["--seq-length", "--sequence-length"], "int", "tokens per sample"),
    "random_seed": (["--seed", "--random-seed"], "int", "dataset seed (default 1234)"),
    "path_to_cache": (["--data-cache-path", "--path-to-cache"], "path", "cache directory"),
    "vocab_size": (["--vocab-size"], "int", "tokenizer vocabulary size"),
    "eod": (["--eod"], "int", "end-of-document token id"),
    "pad": (["--pad"], "int", "pad token id (default: none)"),
    "train_iters": (["--train-iters"], "int", "training iterations"),
    "train_samples": (["--train-samples"], "int", "train samples (instead of --train-iters)"),
    "eval_iters": (["--eval-iters"], "int", "iterations per evaluation"),
    "eval_interval": (["--eval-interval"], "int", "iterations between evaluations"),
    "global_batch_size": (["--global-batch-size"], "int", "samples per iteration"),
    "micro_batch_size": (["--micro-batch-size"], "int", "per-rank batch (derives the GBS)"),
    "world_size": (["--world-size", "--prepare-cache-world-size"], "int", "ranks of the run"),
    "tensor_model_parallel_size": (["--tensor-model-parallel-size"], "int", "TP size"),
    "pipeline_model_parallel_size": (["--pipeline-model-parallel-size"], "int", "PP size"),
    "context_parallel_size": (["--context-parallel-size"], "int", "CP size"),
    "full_validation": (["--full-validation"], "bool", "one full validation epoch"),
    "multiple_validation_sets": (["--multiple-validation-sets"], "bool", "one set per prefix"),
    "mid_level_dataset_surplus": (["--mid-level-dataset-surplus"], "float", "default 0.005"),
    "num_dataset_builder_threads": (["--num-dataset-builder-threads"], "int", "threads"),
    "sequences_per_dataset": (
        ["--per-dataset-sequences-path"],
        "path",
        "JSON from `tokenloom build-sequences-per-dataset`",
    ),
    "reset_position_ids": (["--reset-position-ids"], "bool", "as in training"),
    "reset_attention_mask": (["--reset-attention-mask"], "bool", "as in training"),
    "eod_mask_loss": (["--eod-mask-loss"], "bool", "as in training"),
    "create_attention_mask": (["--create-attention-mask"], "bool", "as in training"),
    "add_extra_token_to_sequence": (["--add-extra-token-to-sequence"], "bool", "default on"),
    "drop_last_partial_validation_sequence": (
        ["--drop-last-partial-validation-sequence"],
        "bool",
        "default on",
    ),
    "mmap_bin_files": (["--mmap-bin-files"], "bool", "default on"),
}
_ALIASES = {
    "data_path": "blend",
    "seq_length": "sequence_length",
    "seed": "random_seed",
    "data_cache_path": "path_to_cache",
    "per_split_data_args_path": "blend_per_split",
    "per_dataset_sequences_path": "sequences_per_dataset",
    "prepare_cache_world_size": "world_size",
}
_GPT_FIELDS = (
    "split",
    "sequence_length",
    "random_seed",
    "path_to_cache",
    "full_validation",
    "multiple_validation_sets",
    "mid_level_dataset_surplus",
    "num_dataset_builder_threads",
    "sequences_per_dataset",
    "reset_position_ids",
    "reset_attention_mask",
    "eod_mask_loss",
    "create_attention_mask",
    "add_extra_token_to_sequence",
    "drop_last_partial_validation_sequence",
    "mmap_bin_files",
)
_KINDS = {"int": int, "float": float, "path": str, "split": str}


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``prepare-cache`` subcommand."""
    parser = subparsers.add_parser(
        "prepare-cache",
        help="build every index cache of a training run offline",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="FILE", help="JSON or YAML file with the settings")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (sizes, parallelism, cache path) and build nothing",
    )
    group = parser.add_argument_group("settings (override --config)")
    for dest, (flags, kind, text) in _OPTIONS.items():
        if kind == "bool":
            group.add_argument(
                *flags, dest=dest, action=argparse.BooleanOptionalAction, default=None, help=text
            )
        elif kind == "words":
            group.add_argument(*flags, dest=dest, nargs="+", metavar="WORD", help=text)
        else:
            group.add_argument(
                *flags, dest=dest, type=_KINDS[kind], metavar=kind.upper(), help=text
            )
    parser.set_defaults(func=run)
    return parser


def load_settings_file(path: str) -> dict[str, Any]:
    """Read a JSON or YAML config into a dict with canonical keys (bounded in size and
    nesting by :mod:`tokenloom.untrusted_json`; a pipe such as ``/dev/stdin`` is fine)."""
    from tokenloom.untrusted_json import check_nesting, loads_json, read_bounded

    is_yaml = path.endswith((".yaml", ".yml"))
    try:
        raw = read_bounded(path, what="--config file", allow_stream=True)
        if is_yaml:
            data = _load_yaml(path, raw)
            check_nesting(data, source=path, what="--config file")
        else:
            data = loads_json(raw, source=path, what="--config file")
    except OSError as error:
        raise ConfigError(f"--config {path}: cannot read it ({error})") from None
    except UntrustedFileError as error:
        kind = "YAML" if is_yaml else "JSON"
        raise ConfigError(f"--config {path}: invalid {kind}: the file {error.problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of setting names to values")
    return canonical_settings(data, source=f"--config {path}")


def _load_yaml(path: str, raw: bytes) -> Any:
    try:
        import yaml
    except ImportError:
        raise ConfigError(
            f"--config {path}: reading YAML needs PyYAML "
            f"(pip install pyyaml), or write the config as JSON"
        ) from None
    try:
        return yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(f"--config {path}: cannot read it ({error})") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"--config {path}: invalid YAML ({error})") from None
    except RecursionError:  # PyYAML composes nested nodes recursively
        raise ConfigError(f"--config {path}: YAML nests too deeply") from None


def canonical_settings(data: dict[str, Any], source: str) -> dict[str, Any]:
    """Normalise keys (dashes, Megatron aliases, a nested tokenizer) and reject unknown ones."""
    settings: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = _ALIASES.get(str(raw_key).replace("-", "_"), str(raw_key).replace("-", "_"))
        if key == "tokenizer" and isinstance(value, dict):
            settings.update(canonical_settings(value, f"{source} tokenizer"))
            continue
        if key not in _OPTIONS:
            raise ConfigError(
                f"{source}: unknown setting {raw_key!r}; known settings: "
                f"{', '.join(sorted(_OPTIONS))}"
            )
        settings[key] = value
    return settings


def merged_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Settings of the config file overridden by the flags that were given."""
    settings = load_settings_file(args.config) if args.config else {}
    for dest in _OPTIONS:
        value = read_attribute(args, dest, None)
        if value is not None:
            settings[dest] = value
    return settings


@dataclass(frozen=True)
class Plan:
    """What the run looks like: parallelism, batch size and per-split sample targets."""

    world_size: int
    tensor: int
    pipeline: int
    context: int
    data_parallel_size: int
    global_batch_size: int
    sizes: list[Optional[int]]


def _int_setting(
    settings: dict[str, Any], key: str, default: Optional[int] = None, minimum: int = 0
) -> Optional[int]:
    value = settings.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r}: must be an integer >= {minimum}")
    return value


def _int_or_default(settings: dict[str, Any], key: str, default: int, minimum: int = 0) -> int:
    """``_int_setting`` for a setting with a default (an explicit None also gives it)."""
    value = _int_setting(settings, key, default, minimum)
    return default if value is None else value


def compute_plan(settings: dict[str, Any]) -> Plan:
    """Data-parallel size, global batch size and the train/valid/test sample targets."""
    world = _int_or_default(settings, "world_size", 1, 1)
    tp, pp, cp = (
        _int_or_default(settings, f"{name}_parallel_size", 1, 1)
        for name in ("tensor_model", "pipeline_model", "context")
    )
    if world % (tp * pp * cp):
        raise ConfigError(
            f"world_size={world} is not divisible by tensor x pipeline x context "
            f"parallel sizes = {tp} x {pp} x {cp} = {tp * pp * cp}"
        )
    dp = world // (tp * pp * cp)
    gbs = _int_setting(settings, "global_batch_size", None, 1)
    if gbs is None:
        mbs = _int_setting(settings, "micro_batch_size", None, 1)
        if mbs is None:
            raise ConfigError(
                "give global_batch_size (or micro_batch_size, then the global batch "
                "size is micro_batch_size x data-parallel size)"
            )
        gbs = mbs * dp
    return Plan(world, tp, pp, cp, dp, gbs, _target_sizes(settings, gbs))


def _target_sizes(settings: dict[str, Any], gbs: int) -> list[Optional[int]]:
    train_iters = _int_setting(settings, "train_iters")
    train_samples = _int_setting(settings, "train_samples")
    eval_iters = _int_or_default(settings, "eval_iters", 0)
    eval_interval = _int_setting(settings, "eval_interval", None, 1)
    if not train_samples and train_iters is None:
        raise ConfigError("give train_iters (or train_samples) to size the train split")
    train = train_samples if train_samples or train_iters is None else train_iters * gbs
    if settings.get("full_validation"):
        valid = None
    else:
        if train_iters is None or eval_interval is None:
            raise ConfigError(
                "give train_iters and eval_interval to size the valid split "
                "(valid = (train_iters // eval_interval + 1) * eval_iters * gbs)"
            )
        valid = (train_iters // eval_interval + 1) * eval_iters * gbs
    return [train, valid, eval_iters * gbs]


def make_config(settings: dict[str, Any]):
    """The GPTDatasetConfig of the run (fast-load switches off: they only consume caches)."""
    from tokenloom.datasets import GPTDatasetConfig, SimpleTokenizer
    from tokenloom.datasets.utils import (
        get_blend_from_list,
        get_blend_per_split_from_dict,
        get_blend_per_split_from_file,
    )

    fields = {key: settings[key] for key in _GPT_FIELDS if settings.get(key) is not None}
    blend, per_split = settings.get("blend"), settings.get("blend_per_split")
    if blend is None and per_split is None:
        raise ConfigError(
            "no data: prepare-cache builds the caches of real data, and mock data "
            "(no blend) has none. Give --data-path or --per-split-data-args-path"
        )
    if blend is not None:
        fields["blend"] = get_blend_from_list(blend.split() if isinstance(blend, str) else blend)
    elif isinstance(per_split, dict):
        fields["blend_per_split"] = get_blend_per_split_from_dict(per_split, "blend_per_split")
    elif per_split is not None:
        fields["blend_per_split"] = get_blend_per_split_from_file(per_split)
    if fields.get("path_to_cache") is None:
        raise ConfigError(
            "give --data-cache-path: the directory the training run reads its index cache from"
        )
    if settings.get("vocab_size") is None or settings.get("eod") is None:
        raise ConfigError("give the tokenizer's --vocab-size and --eod (they shape the samples)")
    fields.setdefault("random_seed", 1234)
    for name in ("reset_position_ids", "reset_attention_mask", "eod_mask_loss"):
        fields.setdefault(name, False)
    if "sequence_length" not in fields:
        raise ConfigError("give --seq-length (tokens per sample)")
    tokenizer = SimpleTokenizer(settings["vocab_size"], settings["eod"], settings.get("pad"))
    return GPTDatasetConfig(
        tokenizer=tokenizer, fast_cache_load=False, defer_npy_index_mmap=False, **fields
    )


def _describe(dataset: Any) -> str:
    if dataset is None:
        return "none"
    if isinstance(dataset, list):
        return f"{len(dataset)} validation sets ({', '.join(_describe(d) for d in dataset)})"
    parts = read_attribute(dataset, "datasets", None)
    inner = f" of {len(parts)} datasets" if parts else ""
    return f"{type(dataset).__name__}{inner}, {len(dataset)} samples"


def run(args: argparse.Namespace) -> int:
    """Entry point of the subcommand."""
    settings = merged_settings(args)
    config = make_config(settings)
    plan = compute_plan(settings)
    sizes = " | ".join(
        f"{name} {size}" for name, size in zip(("train", "valid", "test"), plan.sizes)
    )
    print(f"world size:          {plan.world_size}")
    print(
        f"data-parallel size:  {plan.data_parallel_size}  (world {plan.world_size} / (TP "
        f"{plan.tensor} x PP {plan.pipeline} x CP {plan.context}))"
    )
    print(f"global batch size:   {plan.global_batch_size}")
    print(f"cache path:          {os.path.abspath(config.path_to_cache)}")
    print(f"target samples:      {sizes}")
    if args.dry_run:
        return 0
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.datasets import GPTDataset

    datasets = BlendedMegatronDatasetBuilder(GPTDataset, plan.sizes, lambda: True, config).build()
    for name, dataset in zip(("train", "valid", "test"), datasets):
        print(f"{name + ':':<21}{_describe(dataset)}")
    from tokenloom.cache import IndexCache

    count = len(IndexCache(config.path_to_cache).stems())  # entry files and pack entries
    print(f"done: {count} cached index sets in {config.path_to_cache}")
    return 0

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
from typing import Any

from tokenloom.attributes import read_attribute
from tokenloom.cli._numbers import Bound, check_numbers
from tokenloom.cli._preprocess_flags import add_megatron_tokenizer_flags
from tokenloom.cli._tokenizer_settings import (
    TOKENIZER_ALIASES,
    TOKENIZER_SETTINGS,
    dataset_tokenizer,
)
from tokenloom.cli._training_plan import compute_plan
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
names are accepted too (data_path, seq_length, seed, data_cache_path, ...). The
training loader's keys (dataloader_type, data_sharding, loader_seed, drop_last,
hybrid_context_parallel, skip_batches, block_documents, max_seqlen_per_dp_cp_rank), read
by `tokenloom trace`,
are accepted and do not change the caches.
Mock data (no blend) has nothing to cache and is rejected.

The tokenizer's unique_identifiers are part of every cache key, so give the one the
run uses: Megatron's tokenizer flags (--tokenizer-type, --tokenizer-model,
--vocab-file, --merge-file, --vocab-size, ...) or --tokenizer SPEC build the
tokenizer `tokenloom preprocess` builds from them; otherwise --vocab-size, --eod and
--pad describe a SimpleTokenizer, and what is left out is taken from the blend's
provenance sidecars (as `tokenloom preview` does).

Numbers: sizes, iterations and parallel sizes are integers (0 allowed only for
train_iters, train_samples and eval_iters: an empty target); --seq-length 1..2**31-1,
--seed 0..2**32-1, --mid-level-dataset-surplus 0..1e6; anything else is an error
naming the setting.
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
    "eod": (["--eod"], "int", "end-of-document token id, an integer >= 0 (no tokenizer)"),
    "pad": (["--pad"], "int", "pad token id, an integer >= -1 (no tokenizer; default none)"),
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
    "mid_level_dataset_surplus": (
        ["--mid-level-dataset-surplus"],
        "float",
        "0..1e6 (default 0.005)",
    ),
    "num_dataset_builder_threads": (
        ["--num-dataset-builder-threads"],
        "int",
        "threads, >= 1 (above the prefix count: one per prefix)",
    ),
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
    "mixture_change": (
        ["--mixture-change"],
        "path",
        "resume with a changed mixture: also the old run's caches (docs/mixtures.md)",
    ),
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
_CONFIG_ONLY = ("blend_schedule", "max_epochs_per_source", "inter_document_masking")
"""Config-file settings with no flag (lists), passed to GPTDatasetConfig as given."""
LOADER_SETTINGS = (
    "dataloader_type",
    "data_sharding",
    "loader_seed",
    "drop_last",
    "hybrid_context_parallel",
    "skip_batches",
    "block_documents",
    "max_seqlen_per_dp_cp_rank",
)
"""The training loader's config keys (build_pretraining_data_loader's arguments):
``tokenloom trace`` reads them; prepare-cache, preview and plan accept them and build
nothing from them, so one config file serves all four (docs/trace.md)."""
_KINDS = {"int": int, "float": float, "path": str, "split": str}
SETTING_BOUNDS = (
    Bound("sequence_length", "sequence_length (--seq-length)", 1, 2**31 - 1),
    Bound("random_seed", "random_seed (--seed)", 0, 2**32 - 1),
    Bound("vocab_size", "vocab_size (--vocab-size)", 1),
    Bound("eod", "eod (--eod)", 0),
    Bound("pad", "pad (--pad)", -1),
    Bound("tiktoken_num_special_tokens", "--tiktoken-num-special-tokens", 0),
    Bound("num_dataset_builder_threads", "--num-dataset-builder-threads", 1),
    Bound("mid_level_dataset_surplus", "--mid-level-dataset-surplus", 0, 1e6, integer=False),
)
"""The numeric settings checked before the config is made (the others: compute_plan)."""


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
    add_megatron_tokenizer_flags(parser, defaults=False, spec_flag=True)
    parser.set_defaults(func=run)
    return parser


def load_settings_file(path: str) -> dict[str, Any]:
    """Read a JSON or YAML config into a dict with canonical keys (bounded in size and
    nesting by :mod:`tokenloom.untrusted_json`; a pipe such as ``/dev/stdin`` is fine)."""
    return canonical_settings(read_config_mapping(path), source=f"--config {path}")


def read_config_mapping(path: str) -> dict[str, Any]:
    """The JSON or YAML mapping of a config file as written (keys not yet canonical)."""
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
    return data


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
        key = "tokenizer_spec" if key == "tokenizer" else TOKENIZER_ALIASES.get(key, key)
        known = (*_OPTIONS, *TOKENIZER_SETTINGS, *_CONFIG_ONLY, *LOADER_SETTINGS)
        if key not in known:
            raise ConfigError(
                f"{source}: unknown setting {raw_key!r}; known settings: {', '.join(sorted(known))}"
            )
        settings[key] = value
    return settings


def merged_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Settings of the config file overridden by the flags that were given."""
    settings = load_settings_file(args.config) if args.config else {}
    for dest in (*_OPTIONS, *TOKENIZER_SETTINGS):
        value = read_attribute(args, dest, None)
        if value is not None:
            settings[dest] = value
    return settings


def make_config(settings: dict[str, Any]):
    """The GPTDatasetConfig of the run (fast-load switches off: they only consume caches)."""
    from tokenloom.datasets import GPTDatasetConfig
    from tokenloom.datasets.utils import (
        get_blend_from_list,
        get_blend_per_split_from_dict,
        get_blend_per_split_from_file,
    )

    check_numbers(settings, SETTING_BOUNDS)
    fields = {
        key: settings[key] for key in (*_GPT_FIELDS, *_CONFIG_ONLY) if settings.get(key) is not None
    }
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
    fields.setdefault("random_seed", 1234)
    for name in ("reset_position_ids", "reset_attention_mask", "eod_mask_loss"):
        fields.setdefault(name, False)
    if "sequence_length" not in fields:
        raise ConfigError("give --seq-length (tokens per sample)")
    blends = [fields.get("blend"), *(fields.get("blend_per_split") or [])]
    prefixes = [prefix for blend in blends if blend for prefix in blend[0]]
    tokenizer = dataset_tokenizer(settings, prefixes)
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
    change = settings.get("mixture_change")
    if args.dry_run:
        if change:
            from tokenloom.cli._mixture_change import describe_change

            describe_change(change)
        return 0
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.datasets import GPTDataset

    datasets = BlendedMegatronDatasetBuilder(GPTDataset, plan.sizes, lambda: True, config).build()
    for name, dataset in zip(("train", "valid", "test"), datasets):
        print(f"{name + ':':<21}{_describe(dataset)}")
    if change:
        from tokenloom.cli._mixture_change import prepare_change

        prepare_change(change, config, datasets[0])
    from tokenloom.cache import IndexCache

    count = len(IndexCache(config.path_to_cache).stems())  # entry files and pack entries
    print(f"done: {count} cached index sets in {config.path_to_cache}")
    return 0

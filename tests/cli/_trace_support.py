"""What the `tokenloom trace` tests share: the run config (Megatron's keys) written to a
file, the run loaded as `trace` loads it, and a real loader per data-parallel rank of a
trace's layout."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Optional

from tokenloom.cli._trace_order import Layout
from tokenloom.cli.trace import load_run
from tokenloom.training import build_pretraining_data_loader

SEQ = 32


def write_config(tmp_path: Path, name: str, data_path: list[str], **extra: Any) -> str:
    """A run config file of the shared shape (2 DP ranks, 8 a global batch), as a path;
    ``extra`` adds or overrides settings."""
    config = {  # Megatron's keys
        "data_path": data_path,
        "split": "100,0,0",
        "seq_length": SEQ,
        "seed": 1234,
        "data_cache_path": str(tmp_path / "cache"),
        "train_iters": 12,
        "eval_interval": 1000,
        "eval_iters": 0,
        "global_batch_size": 8,
        "micro_batch_size": 2,
        "world_size": 2,
        "vocab_size": 500,
        "eod": 2,
        **extra,
    }
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


def load_traced(config: str, state: Optional[str] = None, change: bool = False) -> Any:
    """The run as `tokenloom trace --config CONFIG [--state STATE]` loads it."""
    return load_run(
        argparse.Namespace(
            config=config,
            state=state,
            dataloader_type=None,
            allow_mixture_change=change,
            allow_data_change=False,
        )
    )


def rank_loader(dataset: Any, layout: Layout, rank: int, workers: int, **extra: Any) -> Any:
    """A real loader for ``rank`` of ``layout`` (``extra``: more loader arguments)."""
    return build_pretraining_data_loader(
        dataset,
        0,
        dataloader_type=layout.dataloader_type,
        micro_batch_size=layout.micro_batch_size,
        global_batch_size=layout.global_batch_size,
        data_parallel_rank=rank,
        data_parallel_size=layout.data_parallel_size,
        seed=layout.seed,
        num_workers=workers,
        pin_memory=False,
        **extra,
    )

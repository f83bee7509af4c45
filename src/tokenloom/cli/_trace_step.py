"""``tokenloom trace --step N``: the samples of one global batch (text or ``--json``)."""

from __future__ import annotations

import argparse
import json
from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError


def step_records(
    dataset: Any, layout: Any, step: int, resume: Any = None, quarantine: Any = None
) -> list[dict[str, Any]]:
    """Per sample of global batch ``step``: ``rank``, ``micro_batch``, ``position`` and
    the fields of :func:`~tokenloom.cli._trace_ranges.sample_records`; with a block list
    in ``quarantine``, ``blocked`` (one bool per range: loss_mask 0 on its labels). The
    samples the step holds whether or not ``quarantine`` skips it."""
    from tokenloom.cli._trace_order import global_batches
    from tokenloom.cli._trace_ranges import sample_records

    batch = next(global_batches(dataset, layout, step, resume), None)
    if batch is None:
        raise ConfigError(
            f"--step {step}: the run's loader ({layout.dataloader_type}) ends before it; "
            f"the traced split has {len(dataset)} samples, "
            f"{len(dataset) // layout.global_batch_size} steps of {layout.global_batch_size}"
        )
    records = sample_records(dataset, batch)
    per_micro = layout.micro_batch_size * layout.data_parallel_size
    for position, record in enumerate(records):
        micro, within = divmod(position, per_micro)
        head = {
            "position": position,
            "rank": within // layout.micro_batch_size,
            "micro_batch": micro,
        }
        records[position] = {**head, **record}
    if quarantine is not None and quarantine.blocker is not None:
        for record in records:
            documents = [row[0] for row in record["document_ranges"]]
            record["blocked"] = quarantine.blocked(record["source"], documents).tolist()
    return records


def _tokenizer(args: argparse.Namespace, dataset: Any) -> Any:
    from tokenloom.cli._look import resolve_tokenizer
    from tokenloom.cli._trace_ranges import parts
    from tokenloom.provenance import read_sidecar

    first = str(parts(dataset)[0].dataset_path)
    record = read_sidecar(first) if not args.tokenizer else None
    tokenizer, _note = resolve_tokenizer(args.tokenizer, record)
    return tokenizer


def add_text(dataset: Any, records: list[dict[str, Any]], tokenizer: Any) -> None:
    """Give every record a ``text`` list, one decoded string per range (the token ids
    as a list when there is no tokenizer)."""
    from tokenloom.cli._trace_ranges import parts

    sources = parts(dataset)
    for record in records:
        low_level = sources[record["dataset_id"]].dataset
        texts = []
        for document, start, end in record["document_ranges"]:
            ids = numpy.asarray(low_level.get(document, start, end - start))
            texts.append(tokenizer.decode(ids) if tokenizer is not None else ids.tolist())
        record["text"] = texts


def _print_records(step: int, layout: Any, records: list[dict[str, Any]]) -> None:
    print(
        f"step {step}: {len(records)} samples (global_batch_size {layout.global_batch_size}; "
        f"dataloader_type {layout.dataloader_type}, {layout.data_parallel_size} data-parallel "
        f"rank(s) x {layout.micro_steps} micro-batch(es) of {layout.micro_batch_size})"
    )
    for record in records:
        print(
            f"sample {record['position']} (rank {record['rank']}, micro-batch "
            f"{record['micro_batch']}): global sample {record['sample']} <- "
            f"{record['source']} (dataset_id {record['dataset_id']}, sample "
            f"{record['dataset_sample']})"
        )
        for k, (document, start, end) in enumerate(record["document_ranges"]):
            text: Optional[Any] = record.get("text", [None] * (k + 1))[k]
            shown = "" if text is None else f": {text!r}"
            blocked = (
                " blocked (loss_mask 0)" if record.get("blocked", [False] * (k + 1))[k] else ""
            )
            print(f"  document {document} tokens [{start}, {end}){blocked}{shown}")
        for piece in record.get("hybrid_cp", []):
            print(
                f"  hybrid-CP sub-sample {piece['subsample_id']} tokens [{piece['token_start']}, "
                f"{piece['token_end']}): micro-batch {piece['microbatch']}, DP x CP ranks "
                f"{piece['dp_cp_ranks']}"
            )


def _print_skipped(args: argparse.Namespace, layout: Any, where: tuple[int, int]) -> int:
    if args.json:
        body = {"step": args.step, "skipped": True, "skip_batches": list(where), "samples": []}
        print(json.dumps(body, indent=1))
    else:
        print(
            f"step {args.step}: skipped (skip_batches [{where[0]}, {where[1]})): the loader "
            f"consumes its {layout.global_batch_size} samples and serves none of them"
        )
    return 0


def trace_step(
    args: argparse.Namespace, dataset: Any, layout: Any, resume: Any, quarantine: Any
) -> int:
    """Print (or ``--json``) global batch ``args.step`` (a skipped step holds none)."""
    where = quarantine.skip_range(args.step)
    records = step_records(dataset, layout, args.step, resume, quarantine)
    if where is not None:
        return _print_skipped(args, layout, where)
    if args.decode:
        add_text(dataset, records, _tokenizer(args, dataset))
    extra = {}
    if read_attribute(args, "hybrid_cp", False):
        from tokenloom.cli._trace_hybrid_cp import add_hybrid_cp

        extra = {"hybrid_cp_microbatches": add_hybrid_cp(dataset, layout, records)}
    if args.json:
        body = {
            "step": args.step,
            "skipped": False,
            "global_batch_size": layout.global_batch_size,
            "layout": {**layout.describe(), "data_parallel_size": layout.data_parallel_size},
            **extra,
            "samples": records,
        }
        print(json.dumps(body, indent=1))
    else:
        _print_records(args.step, layout, records)
    return 0


__all__ = ["add_text", "step_records", "trace_step"]

"""Run megatron-core on a list of dataset cases and save every array (one ``.npz`` per case).

``python _megatron_runner.py SPEC.json OUT_DIR``: SPEC is a list of cases
``{"name", "class", "config", "sizes", "samples"}`` (config: megatron-core
GPTDatasetConfig fields plus ``vocab_size``/``eod``).  Runs in its own process so
megatron-core (and whatever it imports) never enters the pytest process.  A case
that raises is saved as ``<name>.error.json`` with the exception type and message.
A one-process gloo group is initialised because megatron-core's BlendedDataset
reads the rank when it writes its cache.
"""

from __future__ import annotations

import json
import sys
import traceback
import warnings
from pathlib import Path

import numpy

SPLITS = ("train", "valid", "test")


class Tokenizer:
    """The few tokenizer facts megatron-core's GPT datasets read."""

    def __init__(self, vocab_size: int, eod: int) -> None:
        self.vocab_size, self.eod = vocab_size, eod
        self.unique_identifiers = {"class": "Tokenizer", "vocab_size": vocab_size, "eod": eod}

    @property
    def pad(self):
        raise AttributeError("no pad token")  # megatron-core then pads with -1


def _arrays(prefix: str, dataset, samples) -> dict:
    from megatron.core.datasets.blended_dataset import BlendedDataset

    out = {f"{prefix}.len": numpy.asarray(len(dataset), dtype=numpy.int64)}
    if isinstance(dataset, BlendedDataset):
        out[f"{prefix}.dataset_index"] = numpy.asarray(dataset.dataset_index)
        out[f"{prefix}.dataset_sample_index"] = numpy.asarray(dataset.dataset_sample_index)
        for j, sub in enumerate(dataset.datasets):
            out.update(_arrays(f"{prefix}.sub{j}", sub, []))
    else:
        for name in ("document_index", "sample_index", "shuffle_index"):
            out[f"{prefix}.{name}"] = numpy.asarray(getattr(dataset, name))
    for k in samples:
        if k < len(dataset):
            for field, value in dataset[k].items():
                value = value.numpy() if hasattr(value, "numpy") else numpy.asarray(value)
                out[f"{prefix}.sample{k}.{field}"] = value
    return out


def run_case(case: dict, out_dir: Path) -> None:
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    fields = dict(case["config"])
    tokenizer = Tokenizer(fields.pop("vocab_size"), fields.pop("eod"))
    config = GPTDatasetConfig(tokenizer=tokenizer, **fields)
    datasets = BlendedMegatronDatasetBuilder(
        GPTDataset, case["sizes"], lambda: True, config
    ).build()
    arrays = {}
    for split, dataset in zip(SPLITS, datasets):
        if isinstance(dataset, list):
            for v, item in enumerate(dataset):
                arrays.update(_arrays(f"{split}.set{v}", item, case["samples"]))
        elif dataset is not None:
            arrays.update(_arrays(split, dataset, case["samples"]))
    numpy.savez(out_dir / f"{case['name']}.npz", **arrays)


def main() -> None:
    warnings.simplefilter("ignore")
    spec, out_dir = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
    import torch.distributed as dist

    # megatron-core's BlendedDataset asks torch.distributed for the rank whenever it
    # builds into a cache, so it needs a (one-process) group even on a single process
    dist.init_process_group(
        "gloo", init_method=f"file://{out_dir / 'rendezvous'}", rank=0, world_size=1
    )
    for case in spec:
        try:
            run_case(case, out_dir)
        except Exception as error:  # noqa: BLE001 - recorded for the comparison
            (out_dir / f"{case['name']}.error.json").write_text(
                json.dumps(
                    {
                        "type": type(error).__name__,
                        "message": str(error),
                        "traceback": traceback.format_exc()[-2000:],
                    }
                )
            )


if __name__ == "__main__":
    main()

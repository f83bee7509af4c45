"""Megatron-LM's unmodified ``GPTFIMDataset`` under tokenloom and under megatron-core.

usage: python fim_differential.py MEGATRON_LM_DIR OPT_DATA_DIR [--samples N]

``GPTFIMDataset`` (megatron/training/datasets/fim_dataset.py) overrides
``_query_document_sample_shuffle_indices`` and rewrites samples with a stateful RNG, so
any call tokenloom skipped, repeated or reordered would change every later sample. For
FIM rates 1.0 and 0.5 (and both SPM rates, with and without a split token) it is built
twice, in fresh processes: with the layer installed and with Megatron-LM's own
``megatron/core/datasets``, from the FIM pair and Hugging Face tokenizer that
``make_assets.py`` lays out (OPT_DATA_DIR is its ``opt-data`` folder). The first N
samples of the train and valid splits must be equal in keys, dtypes and values.
Prints PASS, or FAIL with the first difference; exit status 0 on PASS.
"""

# ruff: noqa: T201  (a command-line script: it prints its report)

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CASES = {
    "rate-1.0": {"fim_rate": 1.0, "fim_spm_rate": 0.0, "fim_split_sample": None},
    "rate-1.0-spm": {"fim_rate": 1.0, "fim_spm_rate": 1.0, "fim_split_sample": None},
    "rate-0.5": {"fim_rate": 0.5, "fim_spm_rate": 0.5, "fim_split_sample": None},
    "rate-0.5-split": {"fim_rate": 0.5, "fim_spm_rate": 0.0, "fim_split_sample": "."},
}
EXTRA = {
    "prefix": "<prefix>",
    "middle": "<middle>",
    "suffix": "<suffix>",
    "pad": "<pad>",
    "eod": "<eod>",
}
CHILD = "--child"


def child(mode: str, opt_data: str, samples: int) -> None:
    """Build every case in this process (``mode`` tokenloom: the layer first); print JSON."""
    if mode == "tokenloom":
        import tokenloom.megatron

        tokenloom.megatron.install()
    import torch
    import torch.distributed as dist
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.utils import compile_helpers, get_blend_from_list
    from megatron.core.tokenizers import MegatronTokenizer
    from megatron.training.datasets.fim_dataset import GPTFIMDataset, GPTFIMDatasetConfig

    with tempfile.TemporaryDirectory() as folder:
        dist.init_process_group("gloo", init_method=f"file://{folder}/rv", rank=0, world_size=1)
        compile_helpers()
        tokenizer = MegatronTokenizer.from_pretrained(
            tokenizer_path=os.path.join(opt_data, "tokenizers", "huggingface"),
            metadata_path={"library": "huggingface"},
            additional_special_tokens=list(EXTRA.values()),
            include_special_tokens=True,
        )
        out = {}
        for name, fim in CASES.items():
            split_sample = fim["fim_split_sample"]
            config = GPTFIMDatasetConfig(
                blend=get_blend_from_list(
                    [os.path.join(opt_data, "datasets", "fim", "fim_text_document")]
                ),
                random_seed=1234,
                sequence_length=32,
                split="80,20,0",
                tokenizer=tokenizer,
                reset_position_ids=True,
                reset_attention_mask=True,
                eod_mask_loss=True,
                path_to_cache=os.path.join(folder, f"cache-{name}"),
                fim_extra_tokens=EXTRA,
                fim_rate=fim["fim_rate"],
                fim_spm_rate=fim["fim_spm_rate"],
                fim_fragment_rate=0.5,
                fim_split_sample=split_sample,
            )
            train, valid, _ = BlendedMegatronDatasetBuilder(
                GPTFIMDataset, [samples, samples, None], lambda: True, config
            ).build()
            out[name] = {
                split: [
                    {
                        key: [str(value.dtype), value.tolist()]
                        for key, value in dataset[i].items()
                        if isinstance(value, torch.Tensor)
                    }
                    for i in range(min(samples, len(dataset)))
                ]
                for split, dataset in (("train", train), ("valid", valid))
            }
        dist.destroy_process_group()
    print(json.dumps(out))


def run(mode: str, megatron: str, opt_data: str, samples: int) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (megatron, env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), CHILD, mode, opt_data, str(samples)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if done.returncode != 0:
        raise SystemExit(f"FAIL: the {mode} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def first_difference(theirs: dict, ours: dict) -> str:
    for name in CASES:
        for split in ("train", "valid"):
            a, b = theirs[name][split], ours[name][split]
            if len(a) != len(b):
                return f"{name} {split}: {len(b)} samples, megatron-core {len(a)}"
            for i, (x, y) in enumerate(zip(a, b)):
                for key in sorted(set(x) | set(y)):
                    if x.get(key) != y.get(key):
                        return f"{name} {split} sample {i} {key}: {y.get(key)} != {x.get(key)}"
    return ""


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == CHILD:
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("megatron", help="a Megatron-LM checkout")
    parser.add_argument("opt_data", help="make_assets.py's opt-data folder")
    parser.add_argument("--samples", type=int, default=12, help="samples compared per split")
    args = parser.parse_args()
    theirs = run("megatron", args.megatron, args.opt_data, args.samples)
    ours = run("tokenloom", args.megatron, args.opt_data, args.samples)
    difference = first_difference(theirs, ours)
    first = ours["rate-1.0"]["train"][0]["tokens"][1][0] if ours["rate-1.0"]["train"] else None
    if difference:
        print(f"GPTFIMDataset differential: FAIL: {difference}")
        return 1
    compared = sum(len(ours[n][s]) for n in CASES for s in ("train", "valid"))
    print(
        f"GPTFIMDataset differential: PASS ({compared} samples over {len(CASES)} FIM settings "
        f"equal to megatron-core's; at rate 1.0 train sample 0 starts with id {first})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

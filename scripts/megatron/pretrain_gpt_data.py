"""Megatron-LM's ``pretrain_gpt.py`` data path, unchanged, under tokenloom and without it.

usage: python pretrain_gpt_data.py MEGATRON_LM_DIR [--golden DIR] [--work DIR] [--samples N]

Imports ``MEGATRON_LM_DIR/pretrain_gpt.py`` as it is, parses a small GPT configuration
with Megatron's own ``parse_args`` (through ``initialize_megatron(allow_no_cuda=True,
skip_mpu_initialization=True)``, then a gloo process group and model parallel size 1), computes the sample counts with Megatron's
``get_train_valid_test_num_samples`` and calls
``pretrain_gpt.train_valid_test_datasets_provider`` (``core_gpt_dataset_config_from_args``
-> ``BlendedMegatronDatasetBuilder``). The data is a blend of two pairs written by
Megatron's ``tools/preprocess_data.py`` (the golden set's case_29 text and case_31 title,
GPT2BPETokenizer with the golden vocab and merges).

Each configuration runs twice, in fresh processes: under the layer (``python -m
tokenloom.megatron``, the launcher) and with Megatron-LM's own
``megatron/core/datasets``. The first and last samples of every split are compared:
keys, dtypes, shapes and values of tokens, labels, loss_mask, position_ids and
attention_mask, and the splits' lengths. Prints PASS, or FAIL with the first difference;
exit status 0 on PASS.
"""

# ruff: noqa: T201  (a command-line script: it prints its report)

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAIRS = ("case_29_text_document", "case_31_title_document")
MODEL = [
    "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
    "--seq-length", "64", "--max-position-embeddings", "64",
    "--micro-batch-size", "2", "--global-batch-size", "4",
    "--train-iters", "20", "--eval-interval", "10", "--eval-iters", "2",
    "--lr", "0.0001", "--transformer-impl", "local", "--distributed-backend", "gloo",
    "--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion",
    "--no-bias-gelu-fusion", "--no-bias-dropout-fusion", "--no-persist-layer-norm",
    "--seed", "1234", "--split", "90,8,2",
]  # fmt: skip
CONFIGS = {
    "plain": [],
    "reset-eod": ["--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss"],
}
CHILD_FLAG = "--child-output"


def _prepare(golden: Path, work: Path) -> tuple[list[str], Path]:
    """Copy the two pairs and lay out the working directory with the ``./gpt2`` stand-in."""
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    for pair in PAIRS:
        for suffix in (".bin", ".idx"):
            shutil.copyfile(golden / "outputs" / f"{pair}{suffix}", data / f"{pair}{suffix}")
    sys.path.insert(0, str(HERE))
    from make_assets import make_cwd  # the same ./gpt2 hub stand-in as the tests get

    make_cwd(golden, work)
    cwd = work / "cwd"
    tokenizer = golden / "tokenizers" / "gpt2_bpe"
    arguments = [
        "--data-path", "0.7", str(data / PAIRS[0]), "0.3", str(data / PAIRS[1]),
        "--tokenizer-type", "GPT2BPETokenizer",
        "--vocab-file", str(tokenizer / "vocab.json"), "--merge-file", str(tokenizer / "merges.txt"),
    ]  # fmt: skip
    return arguments, cwd


def _run_child(megatron: Path, layer: bool, arguments: list[str], output: Path, cwd: Path) -> str:
    """One build in a fresh process; returns '' or the error's tail."""
    script = [str(Path(__file__).resolve()), CHILD_FLAG, str(output), str(megatron), *arguments]
    command = (
        [sys.executable, "-m", "tokenloom.megatron", *script]
        if layer
        else [sys.executable, *script]
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), str(megatron), env.get("PYTHONPATH", "")) if p
    )
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return (done.stdout + done.stderr)[-4000:]
    return ""


def child(argv: list[str]) -> int:
    """In the fresh process: build the datasets as pretrain_gpt.py does, save samples."""
    output, megatron, arguments = Path(argv[0]), Path(argv[1]), argv[2:]
    samples = int(os.environ.get("TOKENLOOM_PRETRAIN_SAMPLES", "4"))
    sys.path.insert(0, str(megatron))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    sys.argv = [str(megatron / "pretrain_gpt.py"), *arguments]
    import inspect

    import pretrain_gpt  # noqa: F401  (Megatron-LM's script, unchanged)
    import torch
    from megatron.core.datasets import gpt_dataset
    from megatron.training.initialize import initialize_megatron
    from megatron.training.training import get_train_valid_test_num_samples

    # Megatron's own arguments, validation and global variables; its distributed set-up
    # skips model parallelism without a CUDA device, so that part is done here on gloo
    options = {"allow_no_cuda": True, "skip_mpu_initialization": True}
    defaults = {"tokenizer_type": "GPT2BPETokenizer"}
    if "args_defaults" in inspect.signature(initialize_megatron).parameters:  # core_v0.16.1
        initialize_megatron(args_defaults=defaults, **options)
    else:  # Megatron-LM main parses first, as its pretrain_gpt.py's __main__ does
        from megatron.training.arguments import parse_and_validate_args

        parse_and_validate_args(args_defaults=defaults)
        initialize_megatron(**options)
    from megatron.core import parallel_state
    from megatron.core.datasets.utils import compile_helpers

    torch.distributed.init_process_group(backend="gloo", world_size=1, rank=0)
    parallel_state.initialize_model_parallel(1, 1)
    compile_helpers()  # as Megatron's _compile_dependencies does on rank 0
    counts = get_train_valid_test_num_samples()
    splits = pretrain_gpt.train_valid_test_datasets_provider(counts)
    result: dict = {"implementation": gpt_dataset.__file__, "counts": list(counts), "splits": {}}
    for name, dataset in zip(("train", "valid", "test"), splits):
        if dataset is None:
            result["splits"][name] = None
            continue
        indices = sorted({*range(min(samples, len(dataset))), len(dataset) - 1})
        result["splits"][name] = {
            "type": type(dataset).__name__,
            "length": len(dataset),
            "samples": {i: dict(dataset[i]) for i in indices},
        }
    torch.save(result, output)
    torch.distributed.destroy_process_group()
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def first_difference(layer: dict, megatron: dict) -> str:
    """'' when the two builds agree; otherwise the first difference, in words."""
    import torch

    if layer["counts"] != megatron["counts"]:
        return f"sample counts {layer['counts']} != {megatron['counts']}"
    for split, theirs in megatron["splits"].items():
        ours = layer["splits"][split]
        if (ours is None) != (theirs is None):
            return f"{split}: built {ours is not None} under the layer, {theirs is not None} in Megatron"
        if theirs is None:
            continue
        for field in ("type", "length"):
            if ours[field] != theirs[field]:
                return f"{split}: {field} {ours[field]!r} != {theirs[field]!r}"
        for index, sample in theirs["samples"].items():
            mine = ours["samples"][index]
            if sorted(mine) != sorted(sample):
                return f"{split}[{index}]: keys {sorted(mine)} != {sorted(sample)}"
            for key, value in sample.items():
                got = mine[key]
                if not isinstance(value, torch.Tensor) or not isinstance(got, torch.Tensor):
                    if type(got) is not type(value) or got != value:
                        return f"{split}[{index}][{key!r}]: {got!r} != {value!r}"
                    continue
                if got.dtype != value.dtype or got.shape != value.shape:
                    return (
                        f"{split}[{index}][{key!r}]: {got.dtype} {tuple(got.shape)} != "
                        f"{value.dtype} {tuple(value.shape)}"
                    )
                if not torch.equal(got, value):
                    at = (got != value).nonzero()[0].tolist()
                    return (
                        f"{split}[{index}][{key!r}] at {at}: {got[tuple(at)]} != {value[tuple(at)]}"
                    )
    return ""


def _describe(result: dict) -> str:
    parts = []
    for split, info in result["splits"].items():
        if info is not None:
            first = next(iter(info["samples"].values()))
            keys = ", ".join(f"{k}:{str(v.dtype).replace('torch.', '')}" for k, v in first.items())
            parts.append(f"{split} {info['type']} len {info['length']}")
    return "; ".join(parts) + f" | keys {keys}"


def compare(megatron: Path, golden: Path, work: Path) -> int:
    """Run every configuration under the layer and with Megatron's code; compare."""
    import torch

    data_arguments, cwd = _prepare(golden, work)
    failed = False
    for name, extra in CONFIGS.items():
        results = {}
        for layer in (True, False):
            side = "tokenloom" if layer else "megatron"
            output = work / f"{name}-{side}.pt"
            arguments = [*MODEL, *extra, *data_arguments]
            arguments += ["--data-cache-path", str(work / f"cache-{name}-{side}")]
            error = _run_child(megatron, layer, arguments, output, cwd)
            if error:
                print(f"pretrain_gpt data path [{name}]: FAIL ({side} run failed)\n{error}")
                failed = True
                break
            results[side] = torch.load(output, weights_only=False)
        else:
            ours, theirs = results["tokenloom"], results["megatron"]
            if "tokenloom" not in ours["implementation"] or "tokenloom" in theirs["implementation"]:
                print(
                    f"pretrain_gpt data path [{name}]: FAIL (implementations: "
                    f"{ours['implementation']} vs {theirs['implementation']})"
                )
                failed = True
                continue
            difference = first_difference(ours, theirs)
            verdict = f"FAIL: {difference}" if difference else "PASS"
            failed = failed or bool(difference)
            print(f"pretrain_gpt data path [{name}]: {verdict} ({_describe(theirs)})")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    """Parse the command line; run as the comparer or as one child build."""
    if argv[:1] == [CHILD_FLAG]:
        return child(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("megatron_lm_dir", type=Path)
    default_golden = HERE.parents[2] / "shared" / "golden" / "megatron-preprocess"
    parser.add_argument("--golden", type=Path, default=default_golden)
    parser.add_argument("--work", type=Path, default=None)
    options = parser.parse_args(argv)
    megatron = options.megatron_lm_dir.resolve()
    if not (megatron / "pretrain_gpt.py").is_file():
        parser.error(f"{megatron} has no pretrain_gpt.py: not a Megatron-LM checkout")
    if options.work is not None:
        options.work.mkdir(parents=True, exist_ok=True)
        return compare(megatron, options.golden.resolve(), options.work.resolve())
    with tempfile.TemporaryDirectory(prefix="tokenloom-pretrain-gpt-") as work:
        return compare(megatron, options.golden.resolve(), Path(work))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Make, offline, the test assets that Megatron-LM's data tests would download.

Megatron-LM's ``tests/unit_tests/conftest.py`` downloads a bundle of test assets into
``/opt/data`` and some tests read Megatron-LM itself from ``/opt/megatron-lm``. Nothing
can be downloaded here, so this script lays out stand-ins made only from the project's
golden material (``../shared/golden/megatron-preprocess/``)::

    OUT/opt-data/tokenizers/megatron/gpt2-vocab.json   golden gpt2_bpe/vocab.json
    OUT/opt-data/tokenizers/megatron/gpt2-merges.txt   golden gpt2_bpe/merges.txt
    OUT/opt-data/tokenizers/huggingface/               golden hf_bos (adds a BOS, as the
                                                       tests' index [1] expects)
    OUT/opt-data/datasets/fim/fim_text_document.*      the golden corpus' non-empty texts,
                                                       10 times over (2,000+ documents, so
                                                       the tests' split 990,9,1 leaves
                                                       documents in every split), preprocessed
                                                       with that tokenizer
    OUT/opt-data/datasets/dclm/dclm.jsonl              the golden corpus
    OUT/cwd/gpt2                                       the offline stand-in for the hub
                                                       repo "gpt2" (golden README's
                                                       tokenizers/gpt2, plus the repo's
                                                       vocab.json and merges.txt: the
                                                       golden gpt2_bpe pair)
    OUT/cwd/bert-large-uncased                         the same kind of stand-in for the
                                                       hub repo that BertWordPieceLowerCase
                                                       asks for (config only, no vocabulary:
                                                       the test passes its --vocab-file)

``megatron-tests.sh`` then shows ``OUT/opt-data`` at ``/opt/data`` and the Megatron-LM
checkout at ``/opt/megatron-lm`` inside a private mount namespace (nothing outside the
test process sees them) and runs pytest from ``OUT/cwd``.

usage: python make_assets.py GOLDEN_DIR OUT_DIR
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

FIM_COPIES = 10


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def make_tokenizers(golden: Path, data: Path) -> Path:
    """The GPT-2 two-file tokenizer and the Hugging Face folder; returns the latter."""
    tokenizers = golden / "tokenizers"
    megatron = data / "tokenizers" / "megatron"
    _copy(tokenizers / "gpt2_bpe" / "vocab.json", megatron / "gpt2-vocab.json")
    _copy(tokenizers / "gpt2_bpe" / "merges.txt", megatron / "gpt2-merges.txt")
    huggingface = data / "tokenizers" / "huggingface"
    for name in ("tokenizer.json", "tokenizer_config.json"):
        _copy(tokenizers / "hf_bos" / name, huggingface / name)
    return huggingface


def make_datasets(golden: Path, data: Path, tokenizer: Path) -> None:
    """dclm.jsonl (the golden corpus) and the FIM pair preprocessed from it."""
    corpus = golden / "inputs" / "corpus.jsonl"
    _copy(corpus, data / "datasets" / "dclm" / "dclm.jsonl")
    fim = data / "datasets" / "fim"
    fim.mkdir(parents=True, exist_ok=True)
    lines = [line for line in corpus.read_text().splitlines() if json.loads(line)["text"]]
    fim_corpus = fim / "fim.jsonl"
    fim_corpus.write_text("\n".join(lines * FIM_COPIES) + "\n")
    command = [
        sys.executable,
        "-m",
        "tokenloom",
        "preprocess",
        "--input",
        str(fim_corpus),
        "--output-prefix",
        str(fim / "fim"),
        "--tokenizer-type",
        "HuggingFaceTokenizer",
        "--tokenizer-model",
        str(tokenizer),
        "--append-eod",
        "--workers",
        "1",
        "--no-progress",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"make_assets: preprocessing the FIM corpus failed: {command}")


def make_cwd(golden: Path, out: Path) -> None:
    """The working directory of the tests, with the ``./gpt2`` hub stand-in."""
    cwd = out / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    # core_v0.16.1's GPT2BPETokenizer passes the merges under a name transformers ignores
    # (merge_files=), so the merges come from the hub repo's own merges.txt, as online
    gpt2 = cwd / "gpt2"
    for name in ("config.json", "tokenizer_config.json"):
        _copy(golden / "tokenizers" / "gpt2" / name, gpt2 / name)
    for name in ("vocab.json", "merges.txt"):
        _copy(golden / "tokenizers" / "gpt2_bpe" / name, gpt2 / name)
    bert = cwd / "bert-large-uncased"
    bert.mkdir(exist_ok=True)
    (bert / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (bert / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": True, "model_max_length": 512})
    )


def main(argv: list[str]) -> int:
    """Lay out the assets under ``OUT_DIR``."""
    if len(argv) != 2:
        sys.stderr.write(__doc__ or "")
        return 2
    golden, out = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    if not (golden / "tokenizers" / "gpt2_bpe" / "vocab.json").is_file():
        sys.stderr.write(f"make_assets: {golden} is not the megatron-preprocess golden set\n")
        return 2
    data = out / "opt-data"
    tokenizer = make_tokenizers(golden, data)
    make_datasets(golden, data, tokenizer)
    make_cwd(golden, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

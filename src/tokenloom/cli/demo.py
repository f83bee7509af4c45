"""``tokenloom demo``: the whole pipeline, offline, on real text in well under a minute.

The text is the running Python's own standard library: module sources form one corpus
(``code``), their docstrings, extracted with :mod:`ast`, another (``docs``).  The demo
trains a byte-level BPE with Hugging Face ``tokenizers``, tokenizes both corpora into
``.bin``/``.idx`` pairs through :func:`tokenloom.preprocess.preprocess` (the code path of
``tokenloom preprocess``), decodes a few documents back, and, when the dataset classes
are installed, builds a 70/30 blended GPT dataset and shows one sample with its loss mask.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from tokenloom.attributes import read_attribute
from tokenloom.cli._numbers import Bound, check_numbers

DESCRIPTION = """\
Run the whole tokenloom pipeline on real text, offline, in well under a minute:

  1. corpora     this Python's standard library: module sources ('code') and their
                 docstrings extracted with ast ('docs'), written as JSONL
  2. tokenizer   a byte-level BPE trained with Hugging Face tokenizers (--vocab-size)
  3. preprocess  both corpora -> .bin/.idx (the code path of `tokenloom preprocess`),
                 then a few documents read back and decoded
  4. dataset     a blended GPT dataset, 70% code / 30% docs, and one training sample
                 with its labels and loss mask

Everything is written under --output-dir; rerunning overwrites it.
"""

WIDTH = 100


def register(subparsers) -> None:
    """Add the ``demo`` subcommand and its flags to ``subparsers``."""
    parser = subparsers.add_parser(
        "demo",
        help="see the whole pipeline work on real text (offline, < 1 min)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--output-dir", default="demo-output", help="where to write (default ./demo-output)"
    )
    parser.add_argument(
        "--max-files",
        type=int,
        default=300,
        metavar="N",
        help="standard-library modules to read (default 300; more than there are: all)",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=8000,
        metavar="V",
        help="BPE vocabulary size, 258..1000000 (default 8000)",
    )
    parser.add_argument(
        "--train-mb",
        type=float,
        default=3.0,
        metavar="MB",
        help="text the tokenizer is trained on (default 3 MB; inf: all of it)",
    )
    parser.add_argument(
        "--sequence-length",
        type=int,
        default=64,
        metavar="L",
        help="tokens per sample of the blended dataset (default 64)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="preprocess worker processes, 1..1024 (default 1)",
    )
    parser.set_defaults(func=run)


BOUNDS = (
    Bound("max_files", "--max-files", 1),
    Bound("vocab_size", "--vocab-size", 258, 1_000_000),
    Bound("train_mb", "--train-mb", 0, integer=False, low_open=True, allow_inf=True),
    Bound("sequence_length", "--sequence-length", 1, 2**31 - 1),
    Bound("workers", "--workers", 1, 1024),
)
"""Every numeric option of ``demo``: a byte-level BPE needs 258 ids (256 bytes and its
special tokens), and its trainer allocates for the whole vocabulary up front."""


def _check(args) -> None:
    check_numbers(args, BOUNDS)


def run(args) -> int:
    """Run ``tokenloom demo``: preprocess the embedded text, build, and print samples."""
    _check(args)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # --workers is the knob
    from tokenloom.preprocess.stdlib_corpus import stdlib_root, write_stdlib_corpora

    started = time.perf_counter()
    out = os.path.abspath(args.output_dir)
    print(
        f"tokenloom demo: real text from this Python's standard library\n"
        f"  source  {stdlib_root()}  (Python {platform.python_version()})\n  output  {out}\n"
    )
    corpora = write_stdlib_corpora(os.path.join(out, "corpus"), max_files=args.max_files)
    _print_corpora(corpora)
    tokenizer = _train(corpora, args, out)
    prefixes = _preprocess(corpora, tokenizer, args, out)
    _show_documents(prefixes, tokenizer)
    _blend(prefixes, tokenizer, args, out)
    print(f"\ndone in {time.perf_counter() - started:.1f} s; files are in {out}")
    return 0


def _print_corpora(corpora) -> None:
    rows = [
        ("code", "module sources", corpora.code_documents, corpora.code_path),
        ("docs", "docstrings, via ast", corpora.docs_documents, corpora.docs_path),
    ]
    print(f"[1/4] corpora{'':<26}{'documents':>12}{'MB':>9}")
    for name, what, count, path in rows:
        print(
            f"      {name:<5}({what}){'':<{25 - len(what)}}{count:>12,}"
            f"{os.path.getsize(path) / 1e6:>9.2f}"
        )
    print()


def _training_texts(corpora, limit_bytes: float):
    from tokenloom.untrusted_json import loads_json

    size = 0
    for path in (corpora.code_path, corpora.docs_path):
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                text = loads_json(line, source=f"{path}:{number}", what="demo corpus line")["text"]
                yield text
                size += len(text)
                if size >= limit_bytes / 2 and path == corpora.code_path:
                    break  # half the budget from each corpus
                if size >= limit_bytes:
                    return


def _train(corpora, args, out: str):
    from tokenloom.tokenizers.train import train_byte_level_bpe

    started = time.perf_counter()
    path = os.path.join(out, "tokenizer.json")
    texts = list(_training_texts(corpora, args.train_mb * 1e6))
    tokenizer = train_byte_level_bpe(texts, args.vocab_size, path)
    megabytes = sum(len(text) for text in texts) / 1e6
    print(
        f"[2/4] tokenizer: byte-level BPE, vocabulary {tokenizer.vocab_size:,}, trained on "
        f"{megabytes:.1f} MB in {time.perf_counter() - started:.1f} s\n"
        f"      {path}   eod={tokenizer.eod} pad={tokenizer.pad}\n"
    )
    return tokenizer


def _preprocess(corpora, tokenizer, args, out: str) -> dict[str, str]:
    from tokenloom.preprocess import preprocess

    print(
        f"[3/4] preprocess -> .bin/.idx{'':<4}{'documents':>11}{'tokens':>12}{'tok/doc':>9}"
        f"{'MB/s':>7}{'tokens/s':>11}{'dtype':>8}"
    )
    prefixes = {}
    for name, path in (("code", corpora.code_path), ("docs", corpora.docs_path)):
        summary = preprocess(
            path,
            os.path.join(out, "data", name),
            tokenizer,
            json_keys=["text"],
            append_eod=True,
            workers=args.workers,
            show_progress=False,
        )
        stats = summary.outputs["text"]
        prefixes[name] = stats.path_prefix
        per_doc = stats.tokens / max(stats.documents, 1)
        print(
            f"      {name:<27}{stats.documents:>11,}{stats.tokens:>12,}{per_doc:>9,.0f}"
            f"{summary.megabytes_per_second:>7.1f}{summary.tokens_per_second:>11,.0f}"
            f"{summary.dtype:>8}"
        )
        if summary.skipped_total:
            print(f"      {'':<5}{summary.skipped_text()}")
    docs = os.path.basename(prefixes["docs"])
    print(f"      outputs: {prefixes['code']}.bin/.idx, {docs}.bin/.idx")
    return prefixes


def _one_line(text: str, limit: int) -> str:
    flat = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _show_documents(prefixes: dict[str, str], tokenizer) -> None:
    from tokenloom.format import IndexedDataset

    print("\n      documents read back from the .bin/.idx files and decoded:")
    for name, prefix in prefixes.items():
        with IndexedDataset(prefix) as dataset:
            picks = sorted({0, len(dataset) // 2, len(dataset) - 1})
            for index in picks:
                tokens = dataset[index]
                text = tokenizer.decode(tokens)
                print(
                    f"      {name} #{index:<6}{len(tokens):>7,} tokens  "
                    f"{_one_line(text, WIDTH - 34)!s}"
                )


def _dataset_classes():
    """The GPT dataset classes, or None while they are not part of this installation."""
    try:
        from tokenloom.builder import BlendedMegatronDatasetBuilder
        from tokenloom.datasets import GPTDataset, GPTDatasetConfig
    except ImportError:
        return None
    return BlendedMegatronDatasetBuilder, GPTDataset, GPTDatasetConfig


def _blend(prefixes: dict[str, str], tokenizer, args, out: str) -> None:
    classes = _dataset_classes()
    if classes is None:
        print(
            "\n[4/4] blended GPT dataset: skipped (tokenloom.builder / tokenloom.datasets are "
            "not available in this installation)"
        )
        return
    builder_class, dataset_class, config_class = classes
    config = config_class(
        random_seed=1234,
        sequence_length=args.sequence_length,
        blend=([prefixes["code"], prefixes["docs"]], [0.7, 0.3]),
        split="100,0,0",
        path_to_cache=os.path.join(out, "cache"),
        tokenizer=tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=True,
        create_attention_mask=False,
    )
    samples = 1000
    started = time.perf_counter()
    train = builder_class(dataset_class, [samples, 0, 0], lambda: True, config).build()[0]
    counts = _blend_counts(train, len(prefixes))
    print(
        f"\n[4/4] blended GPT dataset: 70% code + 30% docs, sequence length "
        f"{args.sequence_length}, built in {time.perf_counter() - started:.1f} s\n"
        f"      index cache: {config.path_to_cache}"
    )
    print(f"      {len(train):,} samples: code {counts[0]:,}, docs {counts[1]:,}")
    _show_sample(train, tokenizer)


def _blend_counts(blended, datasets: int) -> list[int]:
    import numpy

    index = read_attribute(blended, "dataset_index", None)
    if index is None:
        return [0] * datasets
    return numpy.bincount(numpy.asarray(index), minlength=datasets).tolist()


def _show_sample(dataset, tokenizer) -> None:
    import numpy

    eod = tokenizer.eod
    pick = next(
        (
            i
            for i in range(min(len(dataset), 200))
            if eod in numpy.asarray(dataset[i]["tokens"]).tolist()
        ),
        0,
    )
    sample = dataset[pick]
    tokens = numpy.asarray(sample["tokens"])
    labels = numpy.asarray(sample["labels"])
    mask = numpy.asarray(sample["loss_mask"])
    source = ("code", "docs")[int(sample["dataset_id"])] if "dataset_id" in sample else "?"
    print(
        f"\n      sample {pick} (from {source}), {len(tokens)} positions: the model reads "
        "'token' and\n      is trained to predict 'label' where loss_mask is 1"
    )
    print(f"      {'pos':>5}  {'token':<22}{'label':<22}{'loss_mask':>9}")
    shown = _positions_to_show(labels, eod)
    for previous, position in zip([-1] + shown, shown):
        if position > previous + 1:
            print(f"      {'...':>5}")
        piece = _one_line(tokenizer.decode([tokens[position]]), 20)
        target = _one_line(tokenizer.decode([labels[position]]), 20)
        weight = float(mask[position])
        print(f"      {position:>5}  {quote(piece):<22}{quote(target):<22}{weight:>9.0f}")
    masked = int((mask == 0).sum())
    print(
        f"      ... {len(tokens) - len(shown)} more positions; {masked} masked: with "
        "eod_mask_loss=True there is no loss\n      where the token read is the end-of-document "
        "token (the next document is unrelated)"
    )
    print(f"      text of the sample: {_one_line(tokenizer.decode(tokens), WIDTH - 26)}")


def quote(piece: str) -> str:
    """A token piece in quotes, already escaped by :func:`_one_line`."""
    return f"'{piece}'"


def _positions_to_show(labels, eod) -> list[int]:
    import numpy

    eods = numpy.flatnonzero(labels == eod).tolist()
    around = [p for e in eods[:1] for p in range(max(e - 2, 0), min(e + 3, len(labels)))]
    return sorted(set(list(range(min(4, len(labels)))) + around))

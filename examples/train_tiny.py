"""Train a tiny GPT for a few steps on Megatron-format data made from real text.

    python examples/train_tiny.py [--steps 40] [--workdir /tmp/tokenloom-tiny]

1. writes a ``.bin``/``.idx`` pair from the docstrings of Python's standard library
   (UTF-8 bytes as tokens, 256 = end of document), with tokenloom's writer;
2. builds the train split with ``BlendedMegatronDatasetBuilder`` (Megatron's indices);
3. feeds a two-layer causal transformer through ``build_pretraining_data_loader``;
4. saves the loader state halfway, rebuilds the loader, loads the state and checks
   that the resumed run gets exactly the batches the first one would have.
"""

from __future__ import annotations

import argparse
import ast
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy
import torch

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig
from tokenloom.format import IndexedDatasetBuilder
from tokenloom.training import build_pretraining_data_loader

EOD, VOCAB, SEQ = 256, 257, 64


def stdlib_text(limit: int = 400) -> Iterator[str]:
    """Real English text without a download: module docstrings of the standard library
    (read with ``ast``, nothing is imported)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.glob("*.py"))[:limit]:
        try:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        if doc and len(doc) > 200:
            yield doc


def write_corpus(prefix: Path) -> int:
    """One document per docstring; returns the number of documents."""
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    count = 0
    for text in stdlib_text():
        tokens = numpy.frombuffer(text.encode("utf-8"), dtype=numpy.uint8).astype(numpy.uint16)
        builder.add_item(numpy.append(tokens, EOD))
        builder.end_document()
        count += 1
    builder.finalize(f"{prefix}.idx")
    return count


class TinyGPT(torch.nn.Module):
    """Embedding, two causal transformer layers, a linear head."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, width)
        self.position = torch.nn.Embedding(SEQ, width)
        layer = torch.nn.TransformerEncoderLayer(width, 4, 4 * width, dropout=0.0, batch_first=True)
        self.body = torch.nn.TransformerEncoder(layer, 2)
        self.head = torch.nn.Linear(width, VOCAB)

    def forward(self, tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        mask = torch.nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        hidden = self.embed(tokens) + self.position(position_ids)
        return self.head(self.body(hidden, mask=mask, is_causal=True))


def loss_of(model: TinyGPT, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Megatron's masked language-model loss."""
    logits = model(batch["tokens"], batch["position_ids"])
    losses = torch.nn.functional.cross_entropy(
        logits.transpose(1, 2), batch["labels"], reduction="none"
    )
    return (losses * batch["loss_mask"]).sum() / batch["loss_mask"].sum()


def build_dataset(workdir: Path, samples: int) -> GPTDataset:
    prefix = workdir / "stdlib_docs"
    documents = write_corpus(prefix)
    print(f"corpus: {documents} documents at {prefix}.bin/.idx")
    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=SEQ,
        blend=([str(prefix)], None),
        split="100,0,0",
        tokenizer={"vocab_size": VOCAB, "eod": EOD},
        path_to_cache=str(workdir / "cache"),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
    )
    train, _, _ = BlendedMegatronDatasetBuilder(
        GPTDataset, [samples, 0, 0], lambda: True, config
    ).build()
    return train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps")
    parser.add_argument("--workdir", default=None, help="where to write data (default: a temp dir)")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        train = build_dataset(workdir, samples=args.steps * 8)
        model = TinyGPT()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        # the three lines of a training loop:
        loader = build_pretraining_data_loader(
            train, 0, dataloader_type="cyclic", micro_batch_size=8, num_workers=args.workers
        )
        for step, batch in zip(range(args.steps), loader):
            loss = loss_of(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 10 == 0 or step == args.steps - 1:
                print(f"step {step:3d}  loss {loss.item():.3f}")
            if step == args.steps // 2:
                torch.save(loader.state_dict(), workdir / "loader.pt")
                saved_step = step
        check_resume(train, workdir, saved_step, args)
    return 0


def check_resume(
    train: GPTDataset, workdir: Path, saved_step: int, args: argparse.Namespace
) -> None:
    """A fresh loader with the saved state continues with the very next batches."""
    kwargs = dict(dataloader_type="cyclic", micro_batch_size=8, num_workers=args.workers)
    continuous = iter(build_pretraining_data_loader(train, 0, **kwargs))
    for _ in range(saved_step + 1):
        next(continuous)
    resumed = build_pretraining_data_loader(train, 0, **kwargs)
    resumed.load_state_dict(torch.load(workdir / "loader.pt"))
    same = all(
        torch.equal(a["tokens"], b["tokens"])
        for a, b in zip((next(continuous) for _ in range(5)), resumed)
    )
    print(f"resumed after step {saved_step}: next batches identical: {same}")
    if not same:
        raise SystemExit("resume produced different batches")


if __name__ == "__main__":
    raise SystemExit(main())

"""``GPTDatasetConfig(inter_document_masking=True)``: Megatron-LM main's sample layout.

Each sample is checked against a literal reading of Megatron-LM main's rule, computed
here from the raw index arrays: the tokens read from each document (the extra label
token in the last part), the extra token taken off the last part (which goes when
empty), a padded sample's shortfall given to its last part, ``cu_seqlens`` the running
sum padded to ``sequence_length + 1`` with ``sequence_length``, ``max_seqlen`` the
longest part, and position ids counted from 0 in each part. Tokens, labels and loss
mask are the plain layout's. Golden corpora and the mock dataset, with and without the
extra token, the padded last validation sample and the padding sample (``None``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy
import pytest

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, MockGPTDataset
from tokenloom.errors import ConfigError

SEQ = 64


def _config(extra: bool, blend: Any, **fields: Any) -> GPTDatasetConfig:
    return GPTDatasetConfig(
        random_seed=1234,
        sequence_length=SEQ,
        blend=blend,
        split="90,10,0",
        tokenizer={"vocab_size": 32000, "eod": 2},
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=True,
        add_extra_token_to_sequence=extra,
        drop_last_partial_validation_sequence=False,
        **fields,
    )


def _splits(cls: type, extra: bool, blend: Any, **fields: Any) -> list:
    config = _config(extra, blend, **fields)
    return BlendedMegatronDatasetBuilder(cls, [60, 40, 0], lambda: True, config).build()


def _reference(dataset: Any, idx: int, extra: int) -> tuple[list[int], list[int], list[int]]:
    """``(cu_seqlens, max_seqlen as a list, position_ids)`` by Megatron-LM main's rule."""
    row = int(dataset.shuffle_index[idx])
    (begin, begin_offset), (end, end_offset) = dataset.sample_index[row : row + 2]
    sizes = dataset.dataset.sequence_lengths
    lengths = []
    for i in range(int(begin), int(end) + 1):
        start = int(begin_offset) if i == begin else 0
        stop = int(end_offset) + extra if i == end else int(sizes[dataset.document_index[i]])
        lengths.append(stop - start)
    if extra:
        lengths[-1] -= 1
        if lengths[-1] == 0:
            lengths.pop()
    if SEQ - sum(lengths) > 0:
        if lengths:
            lengths[-1] += SEQ - sum(lengths)
        else:
            lengths.append(SEQ)
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    positions = [p for n in lengths for p in range(n)]
    return cu + [SEQ] * (SEQ + 1 - len(cu)), [max(lengths)], positions


def _check(masked: Any, plain: Any, idx: Any, extra: int) -> None:
    got, want = masked[idx], plain[idx]
    assert list(got) == [
        "tokens",
        "labels",
        "loss_mask",
        "position_ids",
        "cu_seqlens",
        "max_seqlen",
    ]
    for name in ("tokens", "labels", "loss_mask"):
        assert numpy.array_equal(got[name], want[name]), (idx, name)
    cu, longest, positions = _reference(plain, 0 if idx is None else idx, extra)
    assert got["cu_seqlens"].dtype == numpy.int32 and got["cu_seqlens"].tolist() == cu, idx
    assert got["max_seqlen"].dtype == numpy.int32 and [int(got["max_seqlen"])] == longest
    assert got["position_ids"].dtype == numpy.int64
    assert got["position_ids"].tolist() == positions, idx


@pytest.mark.parametrize("extra", [True, False])
def test_every_sample_is_megatron_main_s_layout(golden_dir: Path, extra: bool) -> None:
    blend = ([str(golden_dir / "corpora" / "c0")], None)
    masked = _splits(GPTDataset, extra, blend, inter_document_masking=True)
    plain = _splits(GPTDataset, extra, blend)
    many = 0
    for split in (0, 1):
        for idx in [*range(len(plain[split])), None]:
            _check(masked[split], plain[split], idx, int(extra))
        many += sum(int((s["cu_seqlens"] < SEQ).sum()) > 2 for s in masked[split])
    assert many > 0  # samples that cross documents were seen
    last = plain[1][len(plain[1]) - 1]
    assert last["loss_mask"].sum() < SEQ  # the padded last validation sample was seen
    assert not masked[0][None]["loss_mask"].any()
    batch = masked[0].get_batch([*range(len(plain[0])), None])  # stacks self[i]
    for row, idx in enumerate([*range(len(plain[0])), None]):
        for name, value in batch.items():
            assert numpy.array_equal(value[row], masked[0][idx][name]), (idx, name)


def test_mock_dataset_and_the_config_check() -> None:
    masked = _splits(MockGPTDataset, True, None, inter_document_masking=True)
    plain = _splits(MockGPTDataset, True, None)
    for idx in range(8):  # the mock's sequence_lengths is made on each read: a few
        _check(masked[0], plain[0], idx, 1)
    with pytest.raises(ConfigError, match="inter_document_masking"):
        _config(True, None, inter_document_masking="yes")


def test_a_hook_without_document_lengths_is_a_config_error(golden_dir: Path) -> None:
    class Old(GPTDataset):  # a megatron-core 0.16.1 hook: (tokens, document ids)
        def _query_document_sample_shuffle_indices(self, idx: int) -> Any:
            return super()._query_document_sample_shuffle_indices(idx)

    class Main(GPTDataset):  # Megatron-LM main's: the part lengths third
        def _query_document_sample_shuffle_indices(self, idx: int) -> Any:
            tokens, ids = super()._query_document_sample_shuffle_indices(idx)
            row = int(self.shuffle_index[idx])
            (b, bo), (e, eo) = self.sample_index[row : row + 2]
            sizes = self.dataset.sequence_lengths[self.document_index[b : e + 1]].tolist()
            sizes[0] -= int(bo)
            sizes[-1] = int(eo) + 1 - (int(bo) if b == e else 0)
            return tokens, ids, sizes

    blend = ([str(golden_dir / "corpora" / "c0")], None)
    with pytest.raises(ConfigError, match="needs the per-document token counts"):
        _splits(Old, True, blend, inter_document_masking=True)[0][0]
    main = _splits(Main, True, blend, inter_document_masking=True)[0]
    plain = _splits(GPTDataset, True, blend)[0]
    for idx in range(len(plain)):
        _check(main, plain, idx, 1)


@pytest.mark.parametrize(
    ("workers", "kind"),
    [(0, "single"), pytest.param(2, "single", marks=pytest.mark.processes), (0, "cyclic")],
)
def test_the_loader_stacks_the_samples_as_torch_s_default_collate(
    golden_dir: Path, workers: int, kind: str
) -> None:
    """The batch Megatron-LM main's DataLoader gives (torch's default collate of its
    samples), with the loader's own sampler order."""
    import torch
    from torch.utils.data import default_collate

    from tokenloom.training import build_pretraining_data_loader

    blend = ([str(golden_dir / "corpora" / "c0")], None)
    train = _splits(GPTDataset, True, blend, inter_document_masking=True)[0]
    loader = build_pretraining_data_loader(
        train, 0, micro_batch_size=4, num_workers=workers, dataloader_type=kind, seed=7
    )
    order = build_pretraining_data_loader(
        _splits(GPTDataset, True, blend)[0], 0, micro_batch_size=4, dataloader_type=kind, seed=7
    )
    for step, (batch, plain) in enumerate(zip(loader, order)):
        assert "attention_mask" not in batch
        want = default_collate([train[int(i)] for i in _indices(train, plain["tokens"])])
        assert sorted(batch) == sorted(want), step
        for name, value in want.items():
            assert batch[name].dtype == torch.as_tensor(value).dtype, name
            assert torch.equal(batch[name], torch.as_tensor(value)), (step, name)
        if step == 3:
            break


def _indices(dataset: Any, tokens: Any) -> list[int]:
    """The sample indices whose tokens are the rows of ``tokens`` (the plain loader's
    batch: the same order, without the new fields)."""
    table = {dataset[i]["tokens"].tobytes(): i for i in range(len(dataset))}
    return [table[row.numpy().tobytes()] for row in tokens]

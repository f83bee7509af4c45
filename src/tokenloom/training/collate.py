"""Batches as torch tensors with Megatron's dtypes and shapes, filled by ``get_batch``.

``tokens``/``labels``/``position_ids`` int64 ``[b, s]``, ``loss_mask`` float32 ``[b, s]``,
``attention_mask`` bool ``[b, 1, s, s]`` (True = masked) only with
``create_attention_mask``, ``dataset_id`` int16 ``[b]`` for blended datasets, and on
request ``cu_seqlens`` int32 (document boundaries of the flattened ``[b*s]`` tokens:
row starts and the position after every EOD token) with ``max_seqlen`` int32 ``[1]``.

One ``get_batch`` call per micro-batch writes straight into the tensors' memory: in a
DataLoader worker that memory is one shared-memory block (so passing the batch to the
main process copies nothing), in the main process it is pinned when asked and possible.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Optional

import numpy
import torch

from tokenloom.attributes import has_attribute, read_attribute
from tokenloom.errors import ConfigError
from tokenloom.process_caches import CAUSAL_MASKS
from tokenloom.training.samplers import RandomSeedDataset

__all__ = [
    "BATCH_DTYPES",
    "BatchFetcher",
    "BufferPool",
    "collate_batch",
    "cu_seqlens",
    "make_fetcher",
]

BATCH_DTYPES: dict[str, torch.dtype] = {
    "tokens": torch.int64,
    "labels": torch.int64,
    "loss_mask": torch.float32,
    "position_ids": torch.int64,
}
NUMPY_DTYPES = {
    "tokens": numpy.int64,
    "labels": numpy.int64,
    "loss_mask": numpy.float32,
    "position_ids": numpy.int64,
}


def _causal(seq: int) -> torch.Tensor:
    """``[1, 1, s, s]`` bool, True above the diagonal (one per length, the last few
    kept in ``process_caches.CAUSAL_MASKS``)."""
    mask: Optional[torch.Tensor] = CAUSAL_MASKS.get(seq)
    if mask is None:
        mask = CAUSAL_MASKS.put(seq, torch.ones(seq, seq, dtype=torch.bool).triu_(1)[None, None])
    return mask


def cu_seqlens(tokens: torch.Tensor, eod: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cu_seqlens, max_seqlen)`` int32 of the flattened ``[b, s]`` tokens."""
    b, s = tokens.shape
    ends = torch.zeros(b, s, dtype=torch.bool)
    ends[:, :-1] = tokens[:, :-1] == eod
    ends[:, -1] = True
    cuts = torch.nonzero(ends.reshape(-1)).reshape(-1) + 1
    cu = torch.cat([torch.zeros(1, dtype=torch.int64), cuts]).to(torch.int32)
    return cu, (cu[1:] - cu[:-1]).max().reshape(1).to(torch.int32)


def _in_worker() -> bool:
    return torch.utils.data.get_worker_info() is not None


class BufferPool:
    """Reusable batch blocks for the main process (``num_workers=0``), safe by refcount.

    A block is a numpy byte array; the batch tensors are ``torch.from_numpy`` of numpy
    views of it, and every torch view derived from them keeps those numpy views (hence
    the block) referenced.  A block whose reference count is back to the pool's own is
    free: nothing can still see its memory, and it is reused without a page fault.  At
    most ``size`` blocks are kept; beyond that a batch gets a fresh, unpooled block.
    """

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self.blocks: list[numpy.ndarray] = []

    def take(self, nbytes: int) -> numpy.ndarray:
        """A free block of ``nbytes`` bytes (reused when possible)."""
        for block in self.blocks:
            # refs: the list, the loop variable, getrefcount's argument
            if block.nbytes == nbytes and sys.getrefcount(block) <= 3:
                return block
        block = numpy.empty(nbytes, dtype=numpy.uint8)
        if len(self.blocks) >= self.size:
            self.blocks.pop(0)
        self.blocks.append(block)
        return block

    def __getstate__(self) -> dict[str, Any]:
        return {"size": self.size, "blocks": []}  # workers use shared memory instead


def _sizes(b: int, s: int) -> list[int]:
    return [b * s * numpy.dtype(NUMPY_DTYPES[name]).itemsize for name in BATCH_DTYPES]


def _allocate(
    b: int, s: int, pin: bool, pool: Optional[BufferPool] = None
) -> dict[str, torch.Tensor]:
    """The four ``[b, s]`` tensors as views of one block: shared memory in a worker,
    pinned (torch's caching host allocator) when asked, else a pooled numpy block."""
    sizes = _sizes(b, s)
    out: dict[str, torch.Tensor] = {}
    offset = 0
    if _in_worker() or pin or pool is None:
        block = torch.empty(sum(sizes), dtype=torch.uint8)
        if _in_worker():
            block.share_memory_()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        elif pin:
            block = block.pin_memory()
        for (name, dtype), size in zip(BATCH_DTYPES.items(), sizes):
            out[name] = block[offset : offset + size].view(dtype).view(b, s)
            offset += size
        return out
    raw = pool.take(sum(sizes))
    for name, size in zip(BATCH_DTYPES, sizes):
        view = raw[offset : offset + size].view(NUMPY_DTYPES[name]).reshape(b, s)
        out[name] = torch.from_numpy(view)
        offset += size
    return out


def _stack_rows(dataset: Any, indices: Sequence[int], out: dict[str, numpy.ndarray]) -> list[Any]:
    """Fill ``out`` from ``dataset[i]`` row by row; return the samples (for masks)."""
    samples = []
    for row, index in enumerate(indices):
        sample = dataset[index]
        for name in BATCH_DTYPES:
            out[name][row] = numpy.asarray(sample[name])
        samples.append(sample)
    return samples


ATTRIBUTION_FIELDS = ("document_ranges", "document_range_counts", "tokens_per_source")
"""What ``return_document_ranges`` adds to a batch (docs/training.md, "Source attribution")."""


def _attribution(
    samples: list[Any], loss_mask: numpy.ndarray, sources: int
) -> dict[str, torch.Tensor]:
    """The attribution fields of samples that carry their own ``document_ranges``."""
    rows = [numpy.asarray(s["document_ranges"], dtype=numpy.int64).reshape(-1, 3) for s in samples]
    counts = numpy.array([r.shape[0] for r in rows], dtype=numpy.int64)
    padded = numpy.full((len(rows), max(1, int(counts.max())), 3), -1, dtype=numpy.int64)
    for i, r in enumerate(rows):
        padded[i, : r.shape[0]] = r
    ids = numpy.array([int(s.get("dataset_id", 0)) for s in samples], dtype=numpy.int64)
    per_row = loss_mask.sum(axis=1, dtype=numpy.float64)
    tokens = numpy.bincount(ids, weights=per_row, minlength=sources)
    return {
        "document_ranges": torch.from_numpy(padded),
        "document_range_counts": torch.from_numpy(counts),
        "tokens_per_source": torch.from_numpy(numpy.rint(tokens).astype(numpy.int64)),
    }


def _sequence_length(dataset: Any, indices: Sequence[int]) -> int:
    config = read_attribute(dataset, "config", None)
    length = read_attribute(config, "sequence_length", None)
    if length is None:
        return int(numpy.asarray(dataset[indices[0]]["tokens"]).shape[-1])
    return int(length)


def _fill(
    dataset: Any,
    indices: list[int],
    views: dict[str, numpy.ndarray],
    batch: dict[str, torch.Tensor],
    batched: bool,
) -> list[Any]:
    """Fill ``views`` (and the blend and attribution fields of ``batch``) by one
    ``get_batch`` call when ``batched`` and the dataset has one, else sample by sample;
    the samples read one by one (empty after ``get_batch``)."""
    if batched and has_attribute(dataset, "get_batch"):
        result = dataset.get_batch(indices, out=views)
        if "dataset_id" in result:
            batch["dataset_id"] = torch.from_numpy(numpy.array(result["dataset_id"]))
        if "document_ranges" in result:  # arrays of this call's own: no copy needed
            for name in ATTRIBUTION_FIELDS:
                batch[name] = torch.from_numpy(result[name])
        return []
    samples = _stack_rows(dataset, indices, views)
    if samples and "dataset_id" in samples[0]:
        batch["dataset_id"] = torch.tensor(
            [int(s["dataset_id"]) for s in samples], dtype=torch.int16
        )
    if samples and "document_ranges" in samples[0]:
        sources = len(read_attribute(dataset, "datasets", None) or [None])
        batch.update(_attribution(samples, views["loss_mask"], sources))
    return samples


def collate_batch(
    dataset: Any,
    indices: Sequence[int],
    *,
    attention_mask: str = "none",
    with_cu_seqlens: bool = False,
    eod: Optional[int] = None,
    pin: bool = False,
    pool: Optional[BufferPool] = None,
    inter_document: bool = False,
) -> dict[str, torch.Tensor]:
    """One micro-batch ``indices`` of ``dataset`` as a dict of torch tensors.

    ``attention_mask``: ``"none"``, ``"causal"`` (one causal mask expanded over the batch,
    no copy) or ``"per_sample"`` (each sample's own mask, for ``reset_attention_mask``).
    ``inter_document``: the samples carry their own ``cu_seqlens`` and ``max_seqlen``
    (``inter_document_masking``), stacked as ``[b, s + 1]`` and ``[b]`` as PyTorch's
    default collate stacks Megatron-LM main's.
    """
    indices = list(indices)
    if not indices:
        return {name: torch.empty(0, 0, dtype=dtype) for name, dtype in BATCH_DTYPES.items()}
    tensors = _allocate(len(indices), _sequence_length(dataset, indices), pin, pool)
    views = {name: tensor.numpy() for name, tensor in tensors.items()}
    batch: dict[str, torch.Tensor] = dict(tensors)
    batched = not (inter_document or isinstance(dataset, RandomSeedDataset))
    samples = _fill(dataset, indices, views, batch, batched)
    if attention_mask == "causal":
        s = tensors["tokens"].shape[1]
        batch["attention_mask"] = _causal(s).expand(len(indices), 1, s, s)
    elif attention_mask == "per_sample":
        rows = samples or [dataset[i] for i in indices]
        batch["attention_mask"] = torch.from_numpy(
            numpy.stack([numpy.asarray(r["attention_mask"], dtype=bool) for r in rows])
        )
    if inter_document and samples:
        for name in ("cu_seqlens", "max_seqlen"):
            batch[name] = torch.from_numpy(numpy.stack([numpy.asarray(r[name]) for r in samples]))
    elif with_cu_seqlens and eod is not None:
        batch["cu_seqlens"], batch["max_seqlen"] = cu_seqlens(tensors["tokens"], eod)
    return batch


class BatchFetcher(torch.utils.data.Dataset[Any]):
    """The DataLoader's dataset: item ``(epoch, indices)`` is one collated micro-batch.

    The epoch travels with every request, so a :class:`RandomSeedDataset` in a worker
    process (forked or spawned, persistent or not) is set to the sampler's epoch before
    each fetch.  ``per_sample`` gives Megatron's hybrid-CP identity collate: a list of
    per-sample dicts instead of one batch dict.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        attention_mask: str,
        with_cu_seqlens: bool,
        eod: Optional[int],
        pin: bool,
        per_sample: bool = False,
        blocker: Any = None,
    ) -> None:
        self.dataset = dataset
        self.blocker = blocker  # a quarantine.DocumentBlocker, or None
        self.attention_mask = attention_mask
        self.with_cu_seqlens = with_cu_seqlens
        self.eod = eod
        self.pin = pin
        self.per_sample = per_sample
        self.inter_document = _inter_document(dataset)
        self.pool = BufferPool()

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, request: tuple[int, list[int]]) -> Any:
        epoch, indices = request
        if isinstance(self.dataset, RandomSeedDataset):
            self.dataset.set_epoch(epoch)
        batch = collate_batch(
            self.dataset,
            indices,
            attention_mask=self.attention_mask,
            with_cu_seqlens=self.with_cu_seqlens and not self.per_sample,
            eod=self.eod,
            pin=self.pin and not _in_worker(),
            pool=self.pool,
            inter_document=self.inter_document,
        )
        if self.blocker is not None:
            self.blocker.mask(self.dataset, indices, batch["loss_mask"])
        if not self.per_sample:
            return batch
        return [{name: value[row] for name, value in batch.items()} for row in range(len(indices))]


def _inter_document(dataset: Any) -> bool:
    """Whether the dataset's config asks for Megatron-LM main's inter-document layout."""
    target = dataset.dataset if isinstance(dataset, RandomSeedDataset) else dataset
    config = read_attribute(target, "config", None)
    return bool(read_attribute(config, "inter_document_masking", False))


def _resolve_attention(dataset: Any, create_attention_mask: Optional[bool]) -> str:
    config = read_attribute(dataset, "config", None)
    if _inter_document(dataset):
        return "none"  # Megatron-LM main's samples have no attention_mask then
    if create_attention_mask is None:
        create_attention_mask = bool(read_attribute(config, "create_attention_mask", False))
    if not create_attention_mask:
        return "none"
    return "per_sample" if read_attribute(config, "reset_attention_mask", False) else "causal"


def _eod(dataset: Any) -> Optional[int]:
    tokenizer = read_attribute(read_attribute(dataset, "config", None), "tokenizer", None)
    eod = read_attribute(tokenizer, "eod", None)
    return None if eod is None else int(eod)


def make_fetcher(
    dataset: Any,
    *,
    create_attention_mask: Optional[bool],
    return_cu_seqlens: bool,
    pin: bool,
    per_sample: bool,
    blocker: Any = None,
) -> BatchFetcher:
    """The loader's fetcher: the attention mask as asked (None: the dataset config's) and
    ``cu_seqlens`` cut at the config's ``tokenizer.eod`` (ConfigError without one)."""
    fetcher = BatchFetcher(
        dataset,
        attention_mask=_resolve_attention(dataset, create_attention_mask),
        with_cu_seqlens=return_cu_seqlens,
        eod=_eod(dataset),
        pin=pin,
        per_sample=per_sample,
        blocker=blocker,
    )
    if return_cu_seqlens and fetcher.eod is None:
        raise ConfigError("return_cu_seqlens=True needs the dataset's config.tokenizer.eod")
    return fetcher


def warm_before_fork(dataloader: Any, fetcher: BatchFetcher) -> bool:
    """Fetch one sample in this process before forked workers start, so that they
    inherit the loaded batch kernel instead of each loading it (~0.3-1 s apiece);
    whether it did (only with the fork start method and a dataset with ``get_batch``)."""
    context = dataloader.multiprocessing_context
    method = (
        context.get_start_method()
        if context is not None
        else torch.multiprocessing.get_start_method()
    )
    dataset = fetcher.dataset
    if (
        method != "fork"
        or isinstance(dataset, RandomSeedDataset)
        or not has_attribute(dataset, "get_batch")
    ):
        return False
    collate_batch(dataset, [0], pool=fetcher.pool)
    return True


def no_collate(item: Any) -> Any:
    """The DataLoader's ``collate_fn``: the fetcher already returns the batch."""
    return item

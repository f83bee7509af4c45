"""Which global samples each global batch of a run holds, from the loader's own samplers.

Nothing here re-derives the order: every rank's sampler is the ``batch_sampler`` that
:func:`~tokenloom.training.build_pretraining_data_loader` builds
(:func:`~tokenloom.training.build_batch_sampler`: the loader's own choice and checks,
without the loader, so without torch) at the consumed count the run's loader would
build it at, and its micro-batches are taken as the loader takes them (a new pass where
the loader starts one). A global batch is ``global_batch_size // (micro_batch_size * data_parallel_size)``
micro-steps, each holding rank 0's micro-batch, then rank 1's, ...; its samples are
listed in that order (for the elastic loader it is the order of its global stream, so
it does not depend on the data-parallel size).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import islice
from typing import Any, Optional

import numpy

from tokenloom.attributes import has_attribute
from tokenloom.errors import ConfigError


@dataclass(frozen=True)
class Layout:
    """The loader arguments that decide the data order (as ``state_dict()`` records them)."""

    dataloader_type: str
    micro_batch_size: int
    global_batch_size: int
    data_parallel_size: int
    data_sharding: bool = True
    seed: int = 0
    drop_last: bool = True
    hybrid_context_parallel: bool = False
    context_parallel_size: int = 1
    max_seqlen_per_dp_cp_rank: Optional[int] = None
    """HybridCPDataLoaderWrapper's limit (``--hybrid-cp``); None: the sequence length."""

    @property
    def micro_steps(self) -> int:
        """Micro-batches per rank in one global batch."""
        return self.global_batch_size // (self.micro_batch_size * self.data_parallel_size)

    def describe(self) -> dict[str, Any]:
        """The fields that decide which samples a global batch holds (a manifest's
        header; the data-parallel size is left out for the elastic loader, whose
        global batches do not depend on it)."""
        fields = {
            "dataloader_type": self.dataloader_type,
            "global_batch_size": self.global_batch_size,
            "seed": self.seed,
        }
        if self.dataloader_type != "elastic":
            fields.update(
                micro_batch_size=self.micro_batch_size,
                data_parallel_size=self.data_parallel_size,
                data_sharding=self.data_sharding,
            )
        return fields


@dataclass(frozen=True)
class Resume:
    """Where a resumed loader starts: a saved ``state_dict()``'s counters."""

    consumed_samples: int
    pass_start_consumed: int
    pass_batches: int


def check_layout(layout: Layout) -> Layout:
    """``layout`` itself, or ConfigError when its global batch is not whole micro-steps."""
    step = layout.micro_batch_size * layout.data_parallel_size
    if layout.micro_batch_size < 1 or layout.global_batch_size % step:
        raise ConfigError(
            f"global_batch_size={layout.global_batch_size} is not a multiple of "
            f"micro_batch_size={layout.micro_batch_size} x data_parallel_size="
            f"{layout.data_parallel_size}; fix micro_batch_size or the world size"
        )
    return layout


def layout_from_state(
    state: dict[str, Any], base: Layout, mixture_change: bool = False
) -> tuple[Layout, Resume]:
    """The layout and resume point of a saved loader state (its sampler arguments win
    over the config's; an elastic run, or a single one resumed over a changed mixture,
    may be resumed with another data-parallel size, so ``base``'s is kept for it)."""
    try:
        layout = replace(
            base,
            dataloader_type=str(state["dataloader_type"]),
            micro_batch_size=int(state["micro_batch_size"]),
            global_batch_size=int(state["global_batch_size"] or base.global_batch_size),
            data_sharding=bool(state["data_sharding"]),
            seed=int(state["seed"]),
            drop_last=bool(state["drop_last"]),
            hybrid_context_parallel=state["sampler"] == "HybridCPMegatronPretrainingSampler",
        )
        keep = layout.dataloader_type == "elastic" or (
            mixture_change and layout.dataloader_type == "single"
        )
        if not keep:
            layout = replace(layout, data_parallel_size=int(state["data_parallel_size"]))
        resume = Resume(
            int(state["consumed_samples"]),
            int(state["pass_start_consumed"]),
            int(state["pass_batches"]),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ConfigError(
            f"--state: not a tokenloom loader state_dict() ({type(error).__name__}: {error}); "
            "save PretrainingDataLoader.state_dict() with torch.save or json.dump"
        ) from None
    return check_layout(layout), resume


def load_state(
    dataset: Any,
    layout: Layout,
    state: dict[str, Any],
    quarantine: Any = None,
    **allow: bool,
) -> tuple[dict[str, Any], Any]:
    """``(state_dict(), served dataset)`` of a loader of ``layout`` (and the config's
    ``quarantine``) over ``dataset`` that loaded ``state`` with the opt-ins ``allow``
    (``allow_data_change``, ``allow_mixture_change``), or ConfigError from the loader's
    own ``load_state_dict`` checks (the same dataset, blend, files and block list,
    sampler arguments, a data-parallel change only for the elastic loader, unless
    opted in). The served dataset is what the loader's fetcher reads from then on: the
    dataset itself, or its continuation after a mixture change
    (:mod:`tokenloom.training.mixture_resume`)."""
    rank = state.get("data_parallel_rank")  # the rank that saved it (any rank's will do)
    if not isinstance(rank, int) or not 0 <= rank < layout.data_parallel_size:
        rank = 0
    loader = _loader(dataset, layout, 0, rank, quarantine)
    try:
        loader.load_state_dict(state, **allow)
    except ConfigError as error:
        hint = {"allow_mixture_change": "--allow-mixture-change"}
        hint["allow_data_change"] = "--allow-data-change"
        named = [flag for key, flag in hint.items() if key in str(error) and not allow.get(key)]
        if not named:
            raise
        raise ConfigError(
            f"{error} (trace: give {' or '.join(named)} when the run loaded the state so)"
        ) from None
    return dict(loader.state_dict()), loader.fetcher.dataset


def _sampler(dataset: Any, layout: Layout, consumed: int, rank: int, memo: Any) -> Any:
    """``build_pretraining_data_loader(...).batch_sampler`` of ``rank`` (built the same
    way, without the loader and torch; ``memo``: one permutation draw per pass)."""
    from tokenloom.training import build_batch_sampler

    return build_batch_sampler(
        dataset, consumed, **_layout_arguments(layout, rank), permutations=memo
    )


def _layout_arguments(layout: Layout, rank: int) -> dict:
    """The sampler arguments of ``rank`` in ``layout``, as the loader takes them."""
    return {
        "dataloader_type": layout.dataloader_type,
        "micro_batch_size": layout.micro_batch_size,
        "global_batch_size": layout.global_batch_size,
        "data_parallel_rank": rank,
        "data_parallel_size": layout.data_parallel_size,
        "data_sharding": layout.data_sharding,
        "drop_last": layout.drop_last,
        "seed": layout.seed,
        "hybrid_context_parallel": layout.hybrid_context_parallel,
    }


def _loader(dataset: Any, layout: Layout, consumed: int, rank: int, quarantine: Any = None) -> Any:
    from tokenloom.training import build_pretraining_data_loader

    quarantined = {}
    if quarantine is not None:
        quarantined = {
            "skip_batches": quarantine.skip_batches,
            "block_documents": quarantine.block_documents,
        }
    return build_pretraining_data_loader(
        dataset,
        consumed,
        **_layout_arguments(layout, rank),
        num_workers=0,
        pin_memory=False,
        **quarantined,
    )


_CHUNK = 16384  # sampler batches turned into one array at a time


def _rank_blocks(
    dataset: Any, layout: Layout, rank: int, start: int, skip: int, memo: Any
) -> Iterator[numpy.ndarray]:
    """Rank ``rank``'s micro-batches (``[n, micro_batch_size]`` int64 blocks, in order)
    from a loader whose pass starts at ``start``, after ``skip`` of its sampler's
    batches; the cyclic and elastic loaders start a new pass at each end. A partial
    micro-batch ends the stream (no global batch holds it)."""
    step, mbs = layout.micro_batch_size * layout.data_parallel_size, layout.micro_batch_size
    single = layout.dataloader_type == "single"
    while True:
        if single and start >= len(dataset):
            return
        sampler = _sampler(dataset, layout, start, rank, memo)
        if has_attribute(sampler, "epoch_indices"):  # the random samplers: one array a pass
            rows = numpy.asarray(sampler.epoch_indices(), dtype=numpy.int64)
            rows = rows[: rows.shape[0] // mbs * mbs].reshape(-1, mbs)  # what __iter__ yields
            got, skip, rows = rows.shape[0], max(skip - rows.shape[0], 0), rows[skip:]
            if rows.shape[0]:
                yield rows
            if got == 0:
                return
            start += got * step
            continue
        got, batches = 0, iter(sampler)
        while chunk := list(islice(batches, _CHUNK)):
            got += len(chunk)
            drop, skip = min(skip, len(chunk)), skip - min(skip, len(chunk))
            chunk = chunk[drop:]
            if layout.hybrid_context_parallel:  # one request per global batch: its micro-steps
                chunk = [b[k : k + mbs] for b in chunk for k in range(0, len(b), mbs)]
            full = len(chunk)
            while full and len(chunk[full - 1]) != mbs:  # only a pass's last can be short
                full -= 1
            if full:
                yield numpy.array(chunk[:full], dtype=numpy.int64).reshape(full, mbs)
            if full < len(chunk):
                return
        if single or got == 0:
            return
        start += got * step


class _Buffer:
    """Takes ``n`` micro-batches at a time from a stream of blocks (no copy of what is
    left: a block is sliced, never joined with the rest)."""

    def __init__(self, blocks: Iterator[numpy.ndarray], width: int) -> None:
        self.blocks, self.width = blocks, width
        self.block = numpy.zeros((0, width), dtype=numpy.int64)
        self.at = 0

    def take(self, n: int) -> numpy.ndarray:
        """The next ``n`` micro-batches (fewer when the stream ends)."""
        pieces, need = [], n
        while need:
            if self.at == self.block.shape[0]:
                block = next(self.blocks, None)
                if block is None:
                    break
                self.block, self.at = block, 0
            piece = self.block[self.at : self.at + need]
            self.at += piece.shape[0]
            need -= piece.shape[0]
            pieces.append(piece)
        if len(pieces) == 1:
            return pieces[0]
        return numpy.concatenate(pieces) if pieces else self.block[:0]


def _start(layout: Layout, first_step: int, resume: Optional[Resume]) -> tuple[int, int]:
    """``(pass start, micro-batches to skip)`` of the sampler that serves ``first_step``."""
    gbs = layout.global_batch_size
    if resume is None:
        return first_step * gbs, 0
    resumed_step, rest = divmod(resume.consumed_samples, gbs)
    if rest or first_step < resumed_step:
        raise ConfigError(
            f"--state resumes at consumed_samples={resume.consumed_samples} (step "
            f"{resume.consumed_samples / gbs:g} of global_batch_size={gbs}); trace a step "
            f">= {resumed_step} from it, saved at a global batch boundary"
        )
    ahead = (first_step - resumed_step) * layout.micro_steps
    if layout.dataloader_type == "cyclic":
        return resume.pass_start_consumed, resume.pass_batches + ahead
    return resume.consumed_samples + (first_step - resumed_step) * gbs, 0


def global_blocks(
    dataset: Any, layout: Layout, first_step: int = 0, resume: Optional[Resume] = None
) -> Iterator[numpy.ndarray]:
    """The global sample indices of steps ``first_step``, ``first_step + 1``, ... as the
    run's loaders serve them, as ``[k, global_batch_size]`` int64 blocks (``k`` doubling
    from 1 up to about 2**20 samples a block); ends with the data (``single``) or never
    (``cyclic``, ``elastic``). A last partial batch is left out."""
    from tokenloom.training import PermutationMemo

    check_layout(layout)
    start, skip = _start(layout, first_step, resume)
    if layout.dataloader_type == "elastic":  # its stream does not depend on the DP layout:
        gbs = layout.global_batch_size  # one rank whose micro-batch is the global batch
        layout = replace(layout, data_parallel_size=1, micro_batch_size=gbs)
    mbs, dp, micro = layout.micro_batch_size, layout.data_parallel_size, layout.micro_steps

    memo = PermutationMemo()  # the ranks of a pass draw its permutation once, in turn
    streams = [_Buffer(_rank_blocks(dataset, layout, r, start, skip, memo), mbs) for r in range(dp)]
    want, cap = 1, max(1, 2**20 // layout.global_batch_size)
    while True:
        taken = [stream.take(want * micro) for stream in streams]
        steps = min(part.shape[0] for part in taken) // micro
        if steps:  # [micro-batch, rank, sample]: micro-step by micro-step, rank by rank
            stacked = numpy.stack([part[: steps * micro] for part in taken], axis=1)
            yield stacked.reshape(steps, layout.global_batch_size)
        if steps < want:
            return
        want = min(want * 2, cap)


def global_batches(
    dataset: Any, layout: Layout, first_step: int = 0, resume: Optional[Resume] = None
) -> Iterator[numpy.ndarray]:
    """The global sample indices (int64 ``[global_batch_size]``) of steps ``first_step``,
    ``first_step + 1``, ... (:func:`global_blocks`, one step at a time)."""
    for block in global_blocks(dataset, layout, first_step, resume):
        yield from block


def run_order(
    dataset: Any, layout: Layout, steps: int, first_step: int = 0, resume: Optional[Resume] = None
) -> numpy.ndarray:
    """``[k, global_batch_size]`` global sample indices of steps ``first_step`` to
    ``first_step + steps`` (``k`` fewer than ``steps`` when a single-pass loader ends)."""
    rows: list[numpy.ndarray] = []
    have = 0
    if steps > 0:
        for block in global_blocks(dataset, layout, first_step, resume):
            rows.append(block[: steps - have])
            have += rows[-1].shape[0]
            if have == steps:
                break
    if not rows:
        return numpy.zeros((0, layout.global_batch_size), dtype=numpy.int64)
    return numpy.concatenate(rows)


__all__ = [
    "Layout",
    "Resume",
    "check_layout",
    "load_state",
    "global_batches",
    "global_blocks",
    "layout_from_state",
    "run_order",
]

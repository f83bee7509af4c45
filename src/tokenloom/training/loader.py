"""``build_pretraining_data_loader``: Megatron's data loader with explicit arguments.

The returned :class:`PretrainingDataLoader` yields dicts of torch tensors (see
:mod:`tokenloom.training.collate`), counts what it has handed out, and saves/loads that
with :meth:`~PretrainingDataLoader.state_dict` / :meth:`~PretrainingDataLoader.load_state_dict`.
Every ``iter()`` starts from the current state: a fresh loader with a loaded state
yields exactly the batches the saved one would have yielded next.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any, Optional

import torch

from tokenloom.errors import ConfigError
from tokenloom.training.checks import flag, optional_flag
from tokenloom.training.collate import BatchFetcher, make_fetcher, no_collate, warm_before_fork
from tokenloom.training.mixture_resume import SourceBook
from tokenloom.training.options import (
    DATALOADER_TYPES,
    check_dataloader_type,
    loader_kwargs,
)
from tokenloom.training.quarantine import (
    DocumentBlocker,
    Requests,
    check_blocked,
    resume_skip_batches,
    skip_end,
    skip_unit,
)
from tokenloom.training.sampler_choice import make_sampler, resolved_options
from tokenloom.training.samplers import HybridCPMegatronPretrainingSampler
from tokenloom.training.state import STATE_FORMAT, check_state, dataset_fingerprint, same_dataset
from tokenloom.training.state_schema import OLD_STATE_FORMAT

__all__ = [
    "DATALOADER_TYPES",
    "PretrainingDataLoader",
    "build_pretraining_data_loader",
    "cyclic_iter",
]


def cyclic_iter(iterable: Any) -> Iterator[Any]:
    """Megatron's ``cyclic_iter``: iterate ``iterable`` again and again, forever."""
    while True:
        empty = True
        for item in iterable:
            empty = False
            yield item
        if empty:
            raise ConfigError(
                "cyclic_iter: a pass over the data loader yielded no batch; "
                "the dataset is too small for micro_batch_size * data_parallel_size"
            )


class PretrainingDataLoader:
    """Megatron's pretraining loader (a torch DataLoader inside) with exact resume.

    Build it with :func:`build_pretraining_data_loader`.  ``dataloader_type``:
    ``"single"`` (one pass, then ``StopIteration``), ``"cyclic"`` (Megatron's random
    sampler over epochs, forever) or ``"elastic"`` (random, global order independent of
    the data-parallel size, forever).
    """

    def __init__(
        self,
        dataset: Any,
        consumed_samples: int,
        options: dict[str, Any],
        loader_kwargs: dict[str, Any],
        fetcher: BatchFetcher,
    ) -> None:
        self.dataset = dataset
        self.options = options
        self._consumed = consumed_samples
        self._pass_start = consumed_samples
        self._pass_batches = 0
        self._generation = 0
        self._warmed = False
        self._fingerprint: Optional[dict[str, Any]] = None
        self.batch_sampler = self._make_sampler(consumed_samples)  # validates the arguments
        self._requests = Requests(self.batch_sampler, 0)
        self._requests.ranges = options["skip_batches"]
        self._unit = skip_unit(options, self._step())
        self.fetcher, self._kwargs, self._book = fetcher, loader_kwargs, SourceBook(dataset)
        self.dataloader = self._make_dataloader()

    def _make_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(
            self.fetcher,
            sampler=self._requests,
            batch_size=None,
            collate_fn=no_collate,
            **self._kwargs,
        )

    # -- samplers --------------------------------------------------------------------
    def _make_sampler(self, consumed: int) -> Any:
        return make_sampler(self.dataset, self.options, consumed)

    def _step(self) -> int:
        sampler = self.batch_sampler
        if isinstance(sampler, HybridCPMegatronPretrainingSampler):
            return sampler.micro_batch_times_data_parallel_size * sampler.num_micro_batches
        return int(sampler.micro_batch_times_data_parallel_size)

    def _restart(self) -> None:
        """Point the DataLoader's sampler at the current state."""
        kind = self.options["dataloader_type"]
        if kind == "cyclic":
            self.batch_sampler, skip = self._make_sampler(self._pass_start), self._pass_batches
        else:
            self.batch_sampler, skip = self._make_sampler(self._consumed), 0
            self._pass_start, self._pass_batches = self._consumed, 0
        requests = self._requests
        requests.sampler, requests.skip, requests.step = self.batch_sampler, skip, self._step()
        requests.start, requests.unit = self._pass_start, self._unit

    # -- iteration -------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        self._generation += 1
        generation = self._generation
        single = self.options["dataloader_type"] == "single"
        if single and self._consumed >= len(self.dataset):
            return
        while True:
            self._restart()
            step, empty = self._step(), self._requests.skip == 0
            for batch in self._batches():
                if generation != self._generation:
                    raise ConfigError(
                        "this iterator is stale: the loader was iterated again "
                        "or load_state_dict() was called; call iter() again"
                    )
                empty = False
                self._skip_to(skip_end(self._consumed, self._requests.ranges, self._unit))
                self._pass_batches += 1
                self._consumed += step
                if single:  # a last partial batch hands out fewer than a step
                    self._consumed = min(self._consumed, len(self.dataset))
                yield batch
            if single:
                self._consumed = max(self._consumed, len(self.dataset))
                return
            self._skip_to(self._pass_start + self._requests.drawn * step)
            if empty and not self._requests.drawn:
                raise ConfigError(
                    "a pass over the data yielded no batch; the dataset is too "
                    "small for micro_batch_size * data_parallel_size"
                )
            self._pass_start, self._pass_batches = self._consumed, 0

    def _skip_to(self, consumed: int) -> None:
        """Move the count past skipped steps (their batches are consumed, not served)."""
        if consumed > self._consumed:
            self._pass_batches += (consumed - self._consumed) // self._step()
            self._consumed = consumed

    def _batches(self) -> Iterator[Any]:
        """The DataLoader's batches; without workers the fetcher is called directly (torch's
        single-process iterator only adds per-batch overhead), pinned when asked."""
        if self.dataloader.num_workers > 0:
            self._warmed = self._warmed or warm_before_fork(self.dataloader, self.fetcher)
            return iter(self.dataloader)
        return (self.fetcher[request] for request in self._requests)

    @property
    def consumed_samples(self) -> int:
        """Megatron's ``consumed_samples``: samples handed out over all DP ranks."""
        return self._consumed

    # -- state -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What resuming needs; safe to call while an iterator (with workers) is live.
        Only the cyclic kind needs the pass fields (the others record
        ``pass_start_consumed=consumed_samples``, ``pass_batches=0``); ``sources`` and
        ``mixture``: :mod:`tokenloom.training.mixture_resume`."""
        sequential = self.options["dataloader_type"] == "single"
        return {**self._state(), **self._book.fields(self._consumed, sequential)}

    def _state(self) -> dict[str, Any]:
        o = self.options
        cyclic = o["dataloader_type"] == "cyclic"
        if self._fingerprint is None:  # the files as opened: fixed for the dataset's life
            self._fingerprint = dataset_fingerprint(self.dataset)
        return {
            "format": STATE_FORMAT,
            "dataloader_type": o["dataloader_type"],
            "sampler": type(self.batch_sampler).__name__,
            "consumed_samples": self._consumed,
            "pass_start_consumed": self._pass_start if cyclic else self._consumed,
            "pass_batches": self._pass_batches if cyclic else 0,
            "micro_batch_size": o["micro_batch_size"],
            "global_batch_size": o["global_batch_size"],
            "data_parallel_size": o["data_parallel_size"],
            "data_parallel_rank": o["data_parallel_rank"],
            "data_sharding": o["data_sharding"],
            "drop_last": o["drop_last"],
            "seed": o["seed"],
            "skip_batches": [list(pair) for pair in self._requests.ranges],
            "dataset": dict(copy.deepcopy(self._fingerprint), blocked_documents=self._blocked()),
        }

    def _blocked(self) -> Optional[str]:
        return None if self.fetcher.blocker is None else str(self.fetcher.blocker.digest)

    def load_state_dict(
        self,
        state: dict[str, Any],
        allow_data_change: bool = False,
        allow_mixture_change: bool = False,
    ) -> None:
        """Continue from ``state`` (saved by a loader built with the same arguments).

        The whole state is validated first. ConfigError when it does not fit: a field of
        the wrong type or range (named by its path), another dataset or blend, other
        sampler arguments, a consumed count past the end, another data-parallel layout
        (allowed only with ``dataloader_type="elastic"``), or data files whose identity
        changed since the state was saved (a ``.bin``/``.idx`` pair regenerated or
        replaced, even with the same lengths). ``allow_data_change=True`` accepts a
        deliberate change of the files (and states saved before tokenloom recorded them)
        with a logged warning; every other check still runs. ``allow_mixture_change=True``
        accepts a state saved over another mixture (``"single"`` only, any data-parallel
        size) and continues every source (:mod:`tokenloom.training.mixture_resume`).
        """
        allow = flag("allow_data_change", allow_data_change)
        change = flag("allow_mixture_change", allow_mixture_change)
        kind, current = self.options["dataloader_type"], self._state()  # no per-source counts
        saved = check_state(state, current, kind == "elastic", allow, change)
        changed = not same_dataset(saved["dataset"], current["dataset"])
        consumed, pass_start, pass_batches = self._resume_point(saved)
        served, stopped = self._book.plan(saved, kind, changed, allow)
        check_blocked(saved["dataset"]["blocked_documents"], self._blocked(), allow)
        ranges = resume_skip_batches(saved["skip_batches"], self._requests.ranges)
        self.options["skip_batches"] = self._requests.ranges = ranges
        self._unit = skip_unit(self.options, self._step())
        if kind == "single" and consumed > len(self.dataset):
            raise ConfigError(
                f"loader state consumed_samples={consumed} is past the end of "
                f"the dataset ({len(self.dataset)} samples)"
            )
        if not (kind == "single" and consumed == len(self.dataset)):
            self._make_sampler(pass_start)  # raises on a count past the end or off a step
        if served is not self.fetcher.dataset:  # workers must fork with the new one
            self.fetcher.dataset = served
            self.dataloader = self._make_dataloader()
        self._book.adopt(served, stopped, saved)
        self._consumed, self._pass_start, self._pass_batches = consumed, pass_start, pass_batches
        self._generation += 1

    def _resume_point(self, saved: dict[str, Any]) -> tuple[int, int, int]:
        """``(consumed, pass_start, pass_batches)`` of a checked state, or ConfigError
        when its fields disagree."""
        consumed = saved["consumed_samples"]
        pass_start, pass_batches = saved["pass_start_consumed"], saved["pass_batches"]
        if self.options["dataloader_type"] != "cyclic":  # a function of consumed alone
            if saved["format"] != OLD_STATE_FORMAT and (pass_start, pass_batches) != (consumed, 0):
                raise ConfigError(
                    f"loader state is inconsistent: pass_start_consumed={pass_start} and "
                    f"pass_batches={pass_batches} must be consumed_samples={consumed} and 0 "
                    f"for dataloader_type={self.options['dataloader_type']!r}"
                )
            return consumed, consumed, 0
        if pass_start + pass_batches * self._step() != consumed:
            raise ConfigError(
                f"loader state is inconsistent: pass_start_consumed={pass_start} "
                f"+ pass_batches={pass_batches} * {self._step()} != "
                f"consumed_samples={consumed}"
            )
        return consumed, pass_start, pass_batches


def build_pretraining_data_loader(
    dataset: Any,
    consumed_samples: int,
    *,
    dataloader_type: str = "single",
    micro_batch_size: int,
    data_parallel_rank: int = 0,
    data_parallel_size: int = 1,
    num_workers: int = 0,
    data_sharding: bool = True,
    global_batch_size: Optional[int] = None,
    hybrid_context_parallel: bool = False,
    full_validation: bool = False,
    drop_last: bool = True,
    seed: int = 0,
    pin_memory: Optional[bool] = None,
    persistent_workers: Optional[bool] = None,
    multiprocessing_context: Optional[str] = None,
    prefetch_factor: Optional[int] = None,
    create_attention_mask: Optional[bool] = None,
    return_cu_seqlens: bool = False,
    timeout: float = 0.0,
    worker_init_fn: Optional[Callable[[int], None]] = None,
    skip_batches: Any = None,
    block_documents: Any = None,
) -> Any:
    """Megatron's ``build_pretraining_data_loader`` with its ``args`` made explicit.

    ``dataset`` None gives None and ``"external"`` returns ``dataset`` itself, as in
    Megatron.  The sampler's ``total_samples`` is ``len(dataset)``.  ``pin_memory`` None
    pins when an accelerator is present (Megatron always asks for it);
    ``persistent_workers`` None means ``num_workers > 0`` (Megatron's choice).
    ``create_attention_mask`` None follows the dataset's config.  ``return_cu_seqlens``
    adds ``cu_seqlens``/``max_seqlen`` (int32) for varlen attention.  ``seed`` is used
    by ``"elastic"`` only (epoch e draws ``randperm(len(dataset), seed + e)``).
    ``skip_batches=[(first, end), ...]`` (0-based global steps, end exclusive) are never
    served and ``block_documents`` (``"PREFIX:document_id"`` strings or a file of them)
    get loss_mask 0: see :mod:`tokenloom.training.quarantine`.
    """
    if dataset is None:
        return None
    check_dataloader_type(dataloader_type)
    if dataloader_type == "external":
        return dataset
    options, consumed_samples = resolved_options(
        dataset,
        consumed_samples,
        full_validation,
        dataloader_type=dataloader_type,
        micro_batch_size=micro_batch_size,
        global_batch_size=global_batch_size,
        data_parallel_rank=data_parallel_rank,
        data_parallel_size=data_parallel_size,
        data_sharding=data_sharding,
        drop_last=drop_last,
        seed=seed,
        hybrid_context_parallel=hybrid_context_parallel,
        skip_batches=skip_batches,
    )
    kwargs = loader_kwargs(
        num_workers,
        pin_memory,
        persistent_workers,
        multiprocessing_context,
        prefetch_factor,
        timeout,
        worker_init_fn,
    )
    return PretrainingDataLoader(
        dataset,
        consumed_samples,
        options,
        kwargs,
        make_fetcher(
            dataset,
            create_attention_mask=optional_flag("create_attention_mask", create_attention_mask),
            return_cu_seqlens=flag("return_cu_seqlens", return_cu_seqlens),
            pin=kwargs["pin_memory"] and torch.cuda.is_available(),
            per_sample=options["hybrid_context_parallel"],
            blocker=DocumentBlocker.build(dataset, block_documents),
        ),
    )

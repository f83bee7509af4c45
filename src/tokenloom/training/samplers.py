"""Megatron's pretraining samplers (``megatron/training/datasets/data_samplers.py``), exact.

Same class names, constructor arguments, attributes and yielded index lists as Megatron;
the difference is that bad arguments raise :class:`~tokenloom.errors.ConfigError` (a
``ValueError``) naming the argument, where Megatron asserts or divides by zero.

Megatron behaviours that are kept (so that the same checkpoint gives the same samples)
and documented in ``docs/training.md``:

* ``MegatronPretrainingSampler.__len__`` is ``total_samples``, not a number of batches.
* The unsharded random sampler gives ranks different numbers of batches per pass when
  ``total_samples % (micro_batch_size * data_parallel_size) != 0``; their
  ``consumed_samples`` then drift apart and a resumed run (which starts from
  ``consumed_samples`` alone) differs from a continuous one.  The loader's
  ``state_dict`` records the pass start, so tokenloom's own resume stays exact; the safe
  alternative is :class:`ElasticPretrainingSampler` or ``data_sharding=True``.
* The sharded random sampler's order depends on the data-parallel size.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any, Optional

import numpy

from tokenloom.errors import ConfigError
from tokenloom.training.checks import (
    INT64_MAX,
    check_total_samples,
    data_parallel_ranks,
    describe,
    integer,
    is_integer,
)
from tokenloom.training.permutation import randperm

__all__ = [
    "ElasticPretrainingSampler",
    "HybridCPMegatronPretrainingSampler",
    "MegatronFullValidationSampler",
    "MegatronPretrainingRandomSampler",
    "MegatronPretrainingSampler",
    "PermutationMemo",
    "RandomSeedDataset",
]


def _slice(begin: int, stop: int, start: int, end: int) -> list[int]:
    """``list(range(begin, stop))[start:end]`` for ``0 <= start <= end``, in O(end - start)."""
    length = stop - begin
    return list(range(begin + min(start, length), begin + min(end, length)))


class MegatronPretrainingSampler:
    """Consecutive micro-batches from ``consumed_samples`` on; rank r takes slice r."""

    def __init__(
        self,
        total_samples: int,
        consumed_samples: int,
        micro_batch_size: int,
        data_parallel_rank: int,
        data_parallel_size: int,
        drop_last: bool = True,
    ) -> None:
        self.total_samples = check_total_samples(total_samples)
        self.consumed_samples = integer("consumed_samples", consumed_samples, 0)
        if self.consumed_samples >= self.total_samples:
            raise ConfigError(
                f"consumed_samples={self.consumed_samples} is past the end: the "
                f"dataset has total_samples={self.total_samples}; no samples "
                "left to consume (build the dataset with more samples)"
            )
        self.micro_batch_size = integer("micro_batch_size", micro_batch_size, 1)
        self.data_parallel_rank, data_parallel_size = data_parallel_ranks(
            data_parallel_rank, data_parallel_size
        )
        self.micro_batch_times_data_parallel_size = self.micro_batch_size * data_parallel_size
        self.drop_last = bool(drop_last)

    def __len__(self) -> int:
        return self.total_samples

    def get_start_end_idx(self) -> tuple[int, int]:
        """This rank's slice of one ``micro_batch_size * data_parallel_size`` step."""
        start_idx = self.data_parallel_rank * self.micro_batch_size
        return start_idx, start_idx + self.micro_batch_size

    def _step(self) -> int:
        return self.micro_batch_times_data_parallel_size

    def _take(self, begin: int, stop: int) -> list[int]:
        """This rank's part of the batch ``range(begin, stop)`` (without building it)."""
        start, end = self.get_start_end_idx()
        return _slice(begin, stop, start, end)

    def __iter__(self) -> Iterator[list[int]]:
        step = self._step()
        first = self.consumed_samples
        full_end = first + (self.total_samples - first) // step * step
        for begin in range(first, full_end, step):
            yield self._take(begin, begin + step)
        if full_end < self.total_samples and not self.drop_last:
            yield self._take(full_end, self.total_samples)


class HybridCPMegatronPretrainingSampler(MegatronPretrainingSampler):
    """All of this rank's indices of one global batch at once (hybrid context parallel)."""

    def __init__(
        self,
        total_samples: int,
        consumed_samples: int,
        micro_batch_size: int,
        global_batch_size: int,
        data_parallel_rank: int,
        data_parallel_size: int,
        drop_last: bool = True,
    ) -> None:
        super().__init__(
            total_samples,
            consumed_samples,
            micro_batch_size,
            data_parallel_rank,
            data_parallel_size,
            drop_last,
        )
        self.global_batch_size = integer("global_batch_size", global_batch_size, 0)
        self.data_parallel_size = int(data_parallel_size)
        self.num_micro_batches = self.global_batch_size // self.micro_batch_times_data_parallel_size

    def get_start_end_idx_global_batch(self) -> tuple[list[int], list[int]]:
        """Start and end of this rank's slice in each micro-step of a global batch."""
        starts = [
            self.data_parallel_rank * self.micro_batch_size
            + i * self.micro_batch_size * self.data_parallel_size
            for i in range(self.num_micro_batches)
        ]
        return starts, [start + self.micro_batch_size for start in starts]

    def _step(self) -> int:
        return self.micro_batch_times_data_parallel_size * self.num_micro_batches

    def _take(self, begin: int, stop: int) -> list[int]:
        starts, ends = self.get_start_end_idx_global_batch()
        return [
            index for start, end in zip(starts, ends) for index in _slice(begin, stop, start, end)
        ]

    def __iter__(self) -> Iterator[list[int]]:
        if self._step() == 0:  # Megatron: the batch never reaches length 0, nothing full
            if not self.drop_last and self.consumed_samples < self.total_samples:
                yield []
            return
        yield from super().__iter__()


class RandomSeedDataset:
    """Seeds torch, ``random`` and numpy with ``index + seed + epoch`` before each sample.

    Megatron sets the epoch on the main process's copy only, so DataLoader workers keep
    epoch 0 forever.  tokenloom's loader sends the epoch with every batch request and
    calls :meth:`set_epoch` in the worker before fetching (see ``docs/training.md``).

    ``seed`` is any integer: torch gets ``s mod 2**64`` and numpy ``s mod 2**32`` of the
    sample's seed ``s`` (``random`` gets ``s`` itself), which are the seeds Megatron's
    wrapper gives wherever it runs (torch wraps negative seeds the same way; numpy and
    torch refuse the others).
    """

    def __init__(self, dataset: Any, seed: int) -> None:
        if not is_integer(seed):
            raise ConfigError(f"RandomSeedDataset seed must be an integer, got {describe(seed)}")
        self.base_seed = int(seed)
        self.curr_seed = self.base_seed
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def set_epoch(self, epoch: int) -> None:
        """Use seed ``base_seed + epoch`` from now on (``epoch`` an integer >= 0)."""
        self.curr_seed = self.base_seed + integer("epoch", epoch, 0)

    def __getitem__(self, idx: int) -> Any:
        seed = integer("sample index", idx, -INT64_MAX - 1) + self.curr_seed
        try:
            import torch
        except ModuleNotFoundError:
            torch = None  # type: ignore[assignment]
        if torch is not None:
            torch.manual_seed(seed % 2**64)
        random.seed(seed)
        numpy.random.seed(seed % 2**32)
        return self.dataset[idx]

    def __getattr__(self, name: str) -> Any:
        if name in ("dataset", "__setstate__", "__getstate__") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dataset, name)  # config, unique_description_hash, ...


class PermutationMemo:
    """The last epoch's permutation (one entry: a sampler draws one epoch at a time, and
    the samplers of all ranks of one pass draw the same one, so they may share a memo:
    :func:`tokenloom.training.sampler_choice.make_sampler`). Read-only arrays."""

    def __init__(self) -> None:
        self.key: Optional[tuple[int, int]] = None
        self.value: Optional[numpy.ndarray] = None

    def get(self, size: int, seed: int) -> numpy.ndarray:
        """The permutation of ``range(size)`` for ``seed``, computed once per key and read-only."""
        value = self.value
        if value is None or self.key != (size, seed):
            value = randperm(size, seed)
            value.flags.writeable = False  # shared by the samplers that hold this memo
            self.value, self.key = value, (size, seed)
        return value


def _check_epoch_offset(consumed: int, active: int, step: int) -> tuple[int, int]:
    epoch, offset = divmod(consumed, active)
    if offset % step:
        raise ConfigError(
            f"consumed_samples={consumed} puts the sampler {offset} samples into "
            f"epoch {epoch}, which is not a multiple of micro_batch_size * "
            f"data_parallel_size = {step}; resume from a step boundary"
        )
    return epoch, offset


class MegatronPretrainingRandomSampler:
    """Megatron's random sampler: one epoch per pass, permutation ``randperm(.., epoch)``.

    ``data_sharding=True``: rank r shuffles its own contiguous bucket.  ``False``: one
    permutation of all samples, rank r takes every ``data_parallel_size``-th index.
    ``dataset`` is only used for ``set_epoch`` when it is a :class:`RandomSeedDataset`.
    """

    def __init__(
        self,
        dataset: Any,
        total_samples: int,
        consumed_samples: int,
        micro_batch_size: int,
        data_parallel_rank: int,
        data_parallel_size: int,
        data_sharding: bool,
    ) -> None:
        self.dataset = dataset
        self.total_samples = check_total_samples(total_samples)
        self.consumed_samples = integer("consumed_samples", consumed_samples, 0)
        self.micro_batch_size = integer("micro_batch_size", micro_batch_size, 1)
        self.data_parallel_rank, self.data_parallel_size = data_parallel_ranks(
            data_parallel_rank, data_parallel_size
        )
        self.data_sharding = bool(data_sharding)
        self.micro_batch_times_data_parallel_size = self.micro_batch_size * self.data_parallel_size
        self.last_batch_size = self.total_samples % self.micro_batch_times_data_parallel_size
        if self.total_samples < self.micro_batch_times_data_parallel_size:
            raise ConfigError(
                f"total_samples={self.total_samples} is smaller than micro_batch_size * "
                f"data_parallel_size = {self.micro_batch_times_data_parallel_size}: not one "
                "step fits (Megatron divides by zero here); use more samples or fewer ranks"
            )
        _check_epoch_offset(
            self.consumed_samples, self._active(), self.micro_batch_times_data_parallel_size
        )
        self.epoch = self.consumed_samples // self._active()
        self.permutations = PermutationMemo()

    def _active(self) -> int:
        return self.total_samples - self.last_batch_size

    def __len__(self) -> int:
        return self.total_samples

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["permutations"] = PermutationMemo()  # the permutation is recomputed, not pickled
        return state

    def epoch_indices(self) -> numpy.ndarray:
        """This rank's remaining indices of the current pass (sets ``self.epoch``)."""
        step = self.micro_batch_times_data_parallel_size
        self.epoch, offset = _check_epoch_offset(self.consumed_samples, self._active(), step)
        if isinstance(self.dataset, RandomSeedDataset):
            self.dataset.set_epoch(self.epoch)
        if self.data_sharding:
            bucket_size = (self.total_samples // step) * self.micro_batch_size
            permutation = self.permutations.get(bucket_size, self.epoch)
            start = self.data_parallel_rank * bucket_size
            return permutation[offset // self.data_parallel_size :] + start
        full_bucket_size = (self.total_samples // self.micro_batch_size) * self.micro_batch_size
        permutation = self.permutations.get(full_bucket_size, self.epoch)
        return permutation[offset:][self.data_parallel_rank :: self.data_parallel_size]

    def __iter__(self) -> Iterator[list[int]]:
        indices = self.epoch_indices()
        size = self.micro_batch_size
        for begin in range(0, indices.shape[0] - size + 1, size):
            self.consumed_samples += self.micro_batch_times_data_parallel_size
            yield indices[begin : begin + size].tolist()


class MegatronFullValidationSampler:
    """Every sample once, one index per batch, rank r taking every dp-th sample."""

    def __init__(
        self, total_samples: int, data_parallel_rank: int, data_parallel_size: int
    ) -> None:
        self.total_samples = check_total_samples(total_samples)
        self.data_parallel_rank, self.data_parallel_size = data_parallel_ranks(
            data_parallel_rank, data_parallel_size
        )

    def __len__(self) -> int:
        return len(range(self.data_parallel_rank, self.total_samples, self.data_parallel_size))

    def __iter__(self) -> Iterator[list[int]]:
        for index in range(self.data_parallel_rank, self.total_samples, self.data_parallel_size):
            yield [index]


class ElasticPretrainingSampler:
    """Random order whose global sample stream does not depend on the data-parallel size.

    Epoch ``e`` is ``randperm(total_samples, seed + e)`` cut to a multiple of
    ``global_batch_size``; global batch ``k`` is positions ``[k*gbs, (k+1)*gbs)`` of the
    stream of epochs, and rank r takes slice r of each ``micro_batch_size *
    data_parallel_size`` step.  Changing ``data_parallel_size`` (same global batch size)
    changes who gets a sample inside a global batch, never which samples it holds.
    One pass is one epoch (like the random sampler); ``consumed_samples`` is global.
    """

    def __init__(
        self,
        total_samples: int,
        consumed_samples: int,
        micro_batch_size: int,
        global_batch_size: int,
        data_parallel_rank: int,
        data_parallel_size: int,
        seed: int = 0,
    ) -> None:
        self.total_samples = check_total_samples(total_samples)
        self.consumed_samples = integer("consumed_samples", consumed_samples, 0)
        self.micro_batch_size = integer("micro_batch_size", micro_batch_size, 1)
        self.global_batch_size = integer("global_batch_size", global_batch_size, 1)
        self.data_parallel_rank, self.data_parallel_size = data_parallel_ranks(
            data_parallel_rank, data_parallel_size
        )
        self.seed = integer("seed", seed, 0)
        self.micro_batch_times_data_parallel_size = self.micro_batch_size * self.data_parallel_size
        if self.global_batch_size % self.micro_batch_times_data_parallel_size:
            raise ConfigError(
                f"global_batch_size={self.global_batch_size} is not a multiple of "
                f"micro_batch_size * data_parallel_size = "
                f"{self.micro_batch_times_data_parallel_size}"
            )
        self.epoch_samples = self.total_samples // self.global_batch_size * self.global_batch_size
        if self.epoch_samples == 0:
            raise ConfigError(
                f"total_samples={self.total_samples} is smaller than "
                f"global_batch_size={self.global_batch_size}: no global batch fits"
            )
        _check_epoch_offset(
            self.consumed_samples, self.epoch_samples, self.micro_batch_times_data_parallel_size
        )
        self.epoch = self.consumed_samples // self.epoch_samples
        self.permutations = PermutationMemo()

    def __len__(self) -> int:
        return self.total_samples

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["permutations"] = PermutationMemo()
        return state

    def epoch_indices(self) -> numpy.ndarray:
        """This rank's remaining indices of the current pass, its micro-batches one after
        the other (what ``__iter__`` yields; sets ``self.epoch``)."""
        step = self.micro_batch_times_data_parallel_size
        self.epoch, offset = _check_epoch_offset(self.consumed_samples, self.epoch_samples, step)
        permutation = self.permutations.get(self.total_samples, self.seed + self.epoch)
        first = self.data_parallel_rank * self.micro_batch_size
        rows = numpy.asarray(permutation[offset : self.epoch_samples]).reshape(-1, step)
        return rows[:, first : first + self.micro_batch_size].reshape(-1)

    def __iter__(self) -> Iterator[list[int]]:
        step = self.micro_batch_times_data_parallel_size
        for row in self.epoch_indices().reshape(-1, self.micro_batch_size):
            self.consumed_samples += step
            yield row.tolist()

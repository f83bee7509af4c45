"""The arguments of ``build_pretraining_data_loader``, checked before anything is built.

Every count is an integer (numpy integers too; never a bool, a float or NaN) in a range
where it means something, and every flag a bool; anything else is a
:class:`~tokenloom.errors.ConfigError` naming the argument and its value. The ranges
(documented in ``docs/training.md``):

* ``micro_batch_size`` >= 1, ``data_parallel_size`` >= 1, ``0 <= data_parallel_rank <
  data_parallel_size``, ``consumed_samples`` >= 0, ``global_batch_size`` None or >= 1
  (Megatron asserts ``global_batch_size > 0``), ``seed`` in ``[0, 2**63)``; every count
  below ``2**63``.
* ``num_workers`` in ``[0, MAX_WORKERS]`` (each worker is a process holding the dataset;
  torch starts them one by one and a typo of ``10**6`` would fork until the system refuses).
* ``prefetch_factor`` None (torch's default, 2) or in ``[1, MAX_PREFETCH_FACTOR]`` batches
  per worker; ignored with ``num_workers=0`` (nothing runs ahead).
* ``timeout`` a finite number of seconds in ``[0, threading.TIMEOUT_MAX]``; 0 waits
  forever (torch's and Megatron's default); ignored with ``num_workers=0``.

``full_validation`` on a validation split makes the loader one ``"single"`` pass from
sample 0 (Megatron's full-validation mode).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Optional

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError
from tokenloom.training.checks import (
    data_parallel_ranks,
    describe,
    flag,
    integer,
    optional_flag,
    seconds,
)

__all__ = [
    "DATALOADER_TYPES",
    "MAX_PREFETCH_FACTOR",
    "MAX_WORKERS",
    "check_dataloader_type",
    "check_options",
    "loader_kwargs",
    "resolve_options",
]

DATALOADER_TYPES = ("single", "cyclic", "elastic", "external")
MAX_WORKERS = 1024
MAX_PREFETCH_FACTOR = 1024
_CONTEXTS = (None, "fork", "spawn", "forkserver")


def check_dataloader_type(dataloader_type: Any) -> None:
    """ConfigError unless ``dataloader_type`` is one of :data:`DATALOADER_TYPES`."""
    if not isinstance(dataloader_type, str) or dataloader_type not in DATALOADER_TYPES:
        raise ConfigError(
            f"dataloader_type must be one of {DATALOADER_TYPES}, got {describe(dataloader_type)}"
        )


def check_options(options: dict[str, Any], consumed_samples: Any) -> int:
    """Check the sampler options in place (ints and bools made plain); return
    ``consumed_samples`` as an int."""
    consumed = integer("consumed_samples", consumed_samples, 0)
    options["micro_batch_size"] = integer("micro_batch_size", options["micro_batch_size"], 1)
    rank, size = data_parallel_ranks(options["data_parallel_rank"], options["data_parallel_size"])
    options["data_parallel_size"], options["data_parallel_rank"] = size, rank
    if options["global_batch_size"] is not None:
        options["global_batch_size"] = integer("global_batch_size", options["global_batch_size"], 1)
    options["seed"] = integer("seed", options["seed"], 0)
    for name in ("data_sharding", "drop_last", "hybrid_context_parallel"):
        options[name] = flag(name, options[name])
    return consumed


def _is_full_validation(dataset: Any, full_validation: bool) -> bool:
    if not full_validation:
        return False
    from tokenloom.datasets import Split

    split = read_attribute(dataset, "split", read_attribute(dataset, "index_split", None))
    return bool(split == Split.valid)


def resolve_options(
    dataset: Any, options: dict[str, Any], consumed_samples: Any, full_validation: Any
) -> int:
    """Check the sampler ``options`` (:func:`check_options`) and apply
    ``full_validation`` in place; return the consumed count to start from."""
    consumed = check_options(options, consumed_samples)
    if _is_full_validation(dataset, flag("full_validation", full_validation)):
        options.update(dataloader_type="single", hybrid_context_parallel=False)
        consumed = 0
    if options["hybrid_context_parallel"] and options["global_batch_size"] is None:
        raise ConfigError("hybrid_context_parallel=True needs global_batch_size")
    return consumed


class WorkerInit:
    """A DataLoader ``worker_init_fn`` that first puts tokenloom's SIGBUS handler back on
    top (torch installs its own in every worker; see :mod:`tokenloom.format.sigbus`), so
    that a worker reading a ``.bin`` that shrank under its mapping names the file before
    it dies; then calls the user's ``worker_init_fn``, if any. Picklable (spawn)."""

    def __init__(self, user: Optional[Callable[[int], None]]) -> None:
        self.user = user

    def __call__(self, worker_id: int) -> None:
        from tokenloom.format import sigbus

        sigbus.install()
        if self.user is not None:
            self.user(worker_id)


def loader_kwargs(
    num_workers: Any,
    pin_memory: Optional[bool],
    persistent_workers: Optional[bool],
    multiprocessing_context: Optional[str],
    prefetch_factor: Optional[int],
    timeout: Any,
    worker_init_fn: Optional[Callable[[int], None]],
) -> dict[str, Any]:
    """The torch DataLoader's keyword arguments, each checked."""
    import torch  # here: the samplers' checks above (resolve_options) need no torch

    workers = integer("num_workers", num_workers, 0, MAX_WORKERS)
    if not (isinstance(multiprocessing_context, str) or multiprocessing_context is None) or (
        multiprocessing_context not in _CONTEXTS
    ):
        raise ConfigError(
            f"multiprocessing_context must be 'fork', 'spawn', 'forkserver' or "
            f"None, got {describe(multiprocessing_context)}"
        )
    if prefetch_factor is not None:
        prefetch_factor = integer("prefetch_factor", prefetch_factor, 1, MAX_PREFETCH_FACTOR)
    if worker_init_fn is not None and not callable(worker_init_fn):
        raise ConfigError(
            f"worker_init_fn must be callable or None, got {describe(worker_init_fn)}"
        )
    pin = optional_flag("pin_memory", pin_memory)
    persistent = optional_flag("persistent_workers", persistent_workers)
    kwargs: dict[str, Any] = {
        "num_workers": workers,
        "pin_memory": torch.cuda.is_available() if pin is None else pin,
        "persistent_workers": workers > 0 if persistent is None else persistent and workers > 0,
        "timeout": seconds("timeout", timeout, threading.TIMEOUT_MAX),
        "worker_init_fn": WorkerInit(worker_init_fn),
    }
    if workers > 0:
        kwargs["multiprocessing_context"] = multiprocessing_context
        kwargs["prefetch_factor"] = prefetch_factor
    return kwargs

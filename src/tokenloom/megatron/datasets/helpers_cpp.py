"""``megatron.core.datasets.helpers_cpp``: Megatron's compiled index builders, by tokenloom.

megatron-core builds these from ``helpers.cpp`` at run time; here they are tokenloom's
numba kernels (with readable twins in :mod:`tokenloom.index.reference`), same arguments
(positional, as the pybind11 functions take them) and same results:

* ``build_blending_indices(dataset_index, dataset_sample_index, weights, num_datasets,
  size, verbose)`` and ``build_exhaustive_blending_indices(dataset_index,
  dataset_sample_index, sizes, num_datasets)`` fill the two given arrays in place;
* ``build_sample_idx_int32`` / ``build_sample_idx_int64(sizes, document_index,
  sequence_length, num_epochs, tokens_per_epoch, drop_last_partial_sequence,
  add_extra_token_to_sequence)`` return the sample index.

``build_mapping`` and ``build_blocks_mapping`` (BERT/T5 and the legacy ICT datasets) are
megatron-core's own when its compiled ``helpers_cpp`` is installed; tokenloom does not
implement those datasets.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from typing import Any

import numpy

from tokenloom.errors import ConfigError

__all__ = [
    "build_blending_indices",
    "build_blocks_mapping",
    "build_exhaustive_blending_indices",
    "build_mapping",
    "build_sample_idx_int32",
    "build_sample_idx_int64",
]


def _fill(name: str, target: numpy.ndarray, values: numpy.ndarray) -> None:
    target = numpy.asarray(target)
    if target.shape != values.shape:
        raise ConfigError(
            f"{name}: an array of shape {target.shape} was given for {values.shape[0]} entries"
        )
    target[...] = values


def build_blending_indices(
    dataset_index: Any,
    dataset_sample_index: Any,
    weights: Any,
    num_datasets: int,
    size: int,
    verbose: bool,
) -> None:
    """Fill ``dataset_index`` (int16) and ``dataset_sample_index`` (int64) for ``size``
    samples drawn by the largest-sampling-error rule from ``weights``."""
    from tokenloom.index import build_blending_indices as build

    if len(weights) != int(num_datasets):
        raise ConfigError(f"{len(weights)} weights for num_datasets={num_datasets}")
    ids, positions = build(numpy.asarray(weights, dtype=numpy.float64), int(size))
    _fill("dataset_index", dataset_index, ids)
    _fill("dataset_sample_index", dataset_sample_index, positions)


def build_exhaustive_blending_indices(
    dataset_index: Any, dataset_sample_index: Any, sizes: Any, num_datasets: int
) -> None:
    """Fill the two arrays with every sample of every dataset (``sizes``), interleaved
    by the largest-sampling-error rule over the sizes."""
    from tokenloom.index import build_exhaustive_blending_indices as build

    if len(sizes) != int(num_datasets):
        raise ConfigError(f"{len(sizes)} sizes for num_datasets={num_datasets}")
    ids, positions = build(numpy.asarray(sizes, dtype=numpy.int64))
    _fill("dataset_index", dataset_index, ids)
    _fill("dataset_sample_index", dataset_sample_index, positions)


def _sample_idx(dtype: Any, *args: Any) -> numpy.ndarray:
    from tokenloom.index import build_sample_index

    sizes, documents, sequence_length, num_epochs, tokens, drop_last, extra = args
    index = build_sample_index(
        numpy.asarray(sizes, dtype=numpy.int32),
        numpy.asarray(documents, dtype=numpy.int32),
        int(sequence_length),
        int(num_epochs),
        int(tokens),
        bool(drop_last),
        int(extra),
    )
    return numpy.asarray(index, dtype=dtype)


def build_sample_idx_int32(*args: Any) -> numpy.ndarray:
    """The ``[num_samples + 1, 2]`` int32 sample index (see the module docstring)."""
    return _sample_idx(numpy.int32, *args)


def build_sample_idx_int64(*args: Any) -> numpy.ndarray:
    """The ``[num_samples + 1, 2]`` int64 sample index (see the module docstring)."""
    return _sample_idx(numpy.int64, *args)


def _megatron_helpers() -> Any:
    """megatron-core's compiled ``helpers_cpp`` beside an installed megatron, or None."""
    spec = importlib.machinery.PathFinder.find_spec("megatron")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        datasets = os.path.join(folder, "core", "datasets")
        for name in sorted(os.listdir(datasets)) if os.path.isdir(datasets) else []:
            if name.startswith("helpers_cpp") and name.endswith(
                tuple(importlib.machinery.EXTENSION_SUFFIXES)
            ):
                found = importlib.util.spec_from_file_location(
                    "helpers_cpp", os.path.join(datasets, name)
                )
                if found is not None and found.loader is not None:
                    module = importlib.util.module_from_spec(found)
                    found.loader.exec_module(module)
                    return module
    return None


def _delegate(name: str, args: tuple) -> Any:
    module = _megatron_helpers()  # loaded per call: these run once per BERT/T5 dataset
    if module is None:
        raise ConfigError(
            f"{name}: the BERT/T5 sample mapping is not implemented by tokenloom, and no "
            "compiled megatron-core helpers_cpp was found beside an installed megatron; "
            "install megatron-core (and run its compile_helpers()) for these datasets"
        )
    return getattr(module, name)(*args)


def build_mapping(*args: Any) -> numpy.ndarray:
    """megatron-core's BERT sample mapping (its compiled helper; see the module docstring)."""
    return _delegate("build_mapping", args)


def build_blocks_mapping(*args: Any) -> numpy.ndarray:
    """megatron-core's ICT block mapping (its compiled helper; see the module docstring)."""
    return _delegate("build_blocks_mapping", args)

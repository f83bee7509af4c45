"""A blend that continues after a mixture change (issue 20 §1, the data-side core).

The rule (docs/mixtures.md): from the resume point on, the blend is the new weights'
greedy blend (megatron-core's rule, :func:`tokenloom.index.build_blending_indices`) as
if it had started there. A continuing source carries on in the order of the dataset it
was drawn from in the saved run, from its next unconsumed sample: a source's order
depends on its ``num_samples``, so a source rebuilt from the new config would be in
another order. An added source starts at its first sample; a removed one is no longer
drawn. When the new blend needs more of a continuing source than its old dataset holds,
:class:`ContinuedMixture` refuses (ConfigError naming the source and both counts)
instead of inventing an order (a source rebuilt with a larger ``num_samples`` is in
another order, so that is no fix either). Continuing into further epochs built
deterministically is not implemented yet.

The loader's path (``PretrainingDataLoader.load_state_dict(state,
allow_mixture_change=True)``) is :mod:`tokenloom.training.mixture_resume`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy

from tokenloom.errors import ConfigError
from tokenloom.index import build_blending_indices
from tokenloom.training.data_identity import pair_identities

__all__ = [
    "ContinuedMixture",
    "continue_blend",
    "mixture_changes",
    "old_sources",
    "source_consumed",
]

logger = logging.getLogger(__name__)


def source_consumed(
    dataset_index: numpy.ndarray, consumed: int, names: Sequence[str]
) -> dict[str, int]:
    """``{name: samples of that source among the first consumed blended samples}``.

    With Megatron's sequential (``"single"``) sampler those samples are a prefix of
    each source's stream, so the count is where the source continues.
    """
    if not 0 <= consumed <= len(dataset_index):
        raise ConfigError(
            f"consumed={consumed} is outside the blend of {len(dataset_index)} samples"
        )
    counts = numpy.bincount(numpy.asarray(dataset_index[:consumed]), minlength=len(names))
    return {name: int(counts[i]) for i, name in enumerate(names)}


def mixture_changes(consumed: Mapping[str, int], weights: Mapping[str, float]) -> list[str]:
    """One line per source: ``continues (from sample k)``, ``starts`` or ``stops``."""
    lines = []
    for name in sorted(set(consumed) | set(weights)):
        if name not in weights:
            lines.append(f"{name}: stops (after {consumed[name]} samples)")
        elif consumed.get(name, 0) > 0:
            lines.append(f"{name}: continues (from sample {consumed[name]})")
        else:
            lines.append(f"{name}: starts (at sample 0)")
    return lines


def _normalized(weights: Mapping[str, float]) -> tuple[list[str], numpy.ndarray]:
    names = list(weights)
    values = numpy.asarray([weights[n] for n in names], dtype=numpy.float64)
    if not names or not numpy.all(numpy.isfinite(values)) or numpy.any(values <= 0):
        raise ConfigError(f"weights must be positive and finite per source, got {dict(weights)}")
    return names, values / values.sum()


class ContinuedMixture:
    """``size`` samples blended by the new ``weights``, continuing each source.

    ``sources``: ``{name: dataset}``, for a continuing source the dataset it was drawn
    from in the saved run (its order), for an added one its new dataset. ``consumed``:
    ``{name: samples already drawn}`` (:func:`source_consumed`); a name missing there
    starts at 0. Sample ``j`` is ``sources[name][consumed[name] + r]`` where the new
    greedy blend gives sample ``j`` to ``name`` as its ``r``-th draw.
    """

    def __init__(
        self,
        sources: Mapping[str, Any],
        consumed: Mapping[str, int],
        weights: Mapping[str, float],
        size: int,
    ) -> None:
        self.names, normalized = _normalized(weights)
        missing = [n for n in self.names if n not in sources]
        if missing:
            raise ConfigError(f"weights name sources without a dataset: {missing}")
        self.sources = [sources[n] for n in self.names]
        self.start = numpy.asarray([int(consumed.get(n, 0)) for n in self.names], numpy.int64)
        self.dataset_index, self.dataset_sample_index = build_blending_indices(normalized, size)
        self._check_available()
        for line in mixture_changes(consumed, weights):
            logger.info("mixture change: %s", line)

    def _check_available(self) -> None:
        counts = numpy.bincount(self.dataset_index, minlength=len(self.names))
        for i, name in enumerate(self.names):
            needed, held = int(self.start[i] + counts[i]), len(self.sources[i])
            if needed > held:
                raise ConfigError(
                    f"the new mixture needs {needed} samples of source {name!r} "
                    f"({self.start[i]} consumed + {counts[i]} new), its dataset holds "
                    f"{held} (a source cannot continue past the dataset of the saved run): "
                    "lower its weight or the number of samples after the resume"
                )

    def __len__(self) -> int:
        return len(self.dataset_index)

    def position(self, idx: int) -> tuple[int, int]:
        """``(source id, sample of that source)`` of blended sample ``idx``."""
        if not 0 <= idx < len(self):
            raise IndexError(f"ContinuedMixture index {idx} out of range ({len(self)})")
        source = int(self.dataset_index[idx])
        return source, int(self.start[source] + self.dataset_sample_index[idx])

    def __getitem__(self, idx: int) -> Any:
        source, sample = self.position(idx)
        return self.sources[source][sample]


def old_sources(blended: Any) -> dict[str, Any]:
    """``{path_prefix: dataset}`` of the sources a (Megatron) ``BlendedDataset`` draws
    from, each named by the prefix of the ``.bin``/``.idx`` pair it reads."""
    out: dict[str, Any] = {}
    for dataset in blended.datasets:
        prefixes = list(pair_identities(dataset))
        if len(prefixes) != 1 or prefixes[0] in out:
            raise ConfigError(
                f"a blended source must read exactly one .bin/.idx pair of its own to be "
                f"named by it; {type(dataset).__name__} reads {prefixes}"
            )
        out[prefixes[0]] = dataset
    return out


def continue_blend(
    old: Any,
    consumed_samples: int,
    weights: Mapping[str, float],
    size: int,
    added: Optional[Mapping[str, Any]] = None,
) -> ContinuedMixture:
    """The :class:`ContinuedMixture` after ``consumed_samples`` of the blend ``old``
    (rebuilt from the old config: Megatron users pass their old ``consumed_samples``),
    under ``weights`` by path prefix; ``added``: ``{prefix: dataset}`` of new sources.
    Exact for the sequential (``dataloader_type="single"``) sampler only."""
    sources = old_sources(old)
    counts = source_consumed(old.dataset_index, consumed_samples, list(sources))
    return ContinuedMixture({**dict(added or {}), **sources}, counts, weights, size)

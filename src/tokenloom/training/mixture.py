"""A blend that continues after a mixture change (issue 20 §1, the data-side core).

The rule (docs/mixtures.md): from the resume point on, the blend is the new weights'
greedy blend (megatron-core's rule, :func:`tokenloom.index.build_blending_indices`) as
if it had started there. A continuing source carries on in the order of the dataset it
was drawn from in the saved run, from its next unconsumed sample: a source's order
depends on its ``num_samples``, so a source rebuilt from the new config would be in
another order. An added source starts at its first sample; a removed one is no longer
drawn. A continuing source that the new blend draws more often than its old dataset
holds goes on into a further round of that dataset, in the same order (sample ``k`` of its
stream is ``dataset[k % len(dataset)]``: every sample of a round is served once before any
is served again), with an INFO line naming it; the loader's path does the same. A new
config's ``blend_schedule`` holds from the resume as
:func:`tokenloom.training.continued_blend.tail_schedule` says.

The loader's path (``PretrainingDataLoader.load_state_dict(state,
allow_mixture_change=True)``) is :mod:`tokenloom.training.mixture_resume`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy

from tokenloom.errors import ConfigError
from tokenloom.training.continued_blend import tail_indices
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
    starts at 0. Sample ``j`` is ``sources[name][(consumed[name] + r) % len]`` where the
    new greedy blend gives sample ``j`` to ``name`` as its ``r``-th draw (a stream past
    its dataset starts it over). ``schedule``: the new blend's ``blend_schedule`` (one
    weight per name, in ``weights``' order), followed from global sample ``resume_at``.
    """

    def __init__(
        self,
        sources: Mapping[str, Any],
        consumed: Mapping[str, int],
        weights: Mapping[str, float],
        size: int,
        schedule: Optional[Sequence[Sequence[Any]]] = None,
        resume_at: int = 0,
    ) -> None:
        self.names, normalized = _normalized(weights)
        missing = [n for n in self.names if n not in sources]
        if missing:
            raise ConfigError(f"weights name sources without a dataset: {missing}")
        self.sources = [sources[n] for n in self.names]
        self.start = numpy.asarray([int(consumed.get(n, 0)) for n in self.names], numpy.int64)
        self.dataset_index, self.dataset_sample_index = tail_indices(
            normalized.tolist(), _phases(schedule, len(self.names)), resume_at, size
        )
        self.lengths = numpy.asarray([len(s) for s in self.sources], numpy.int64)
        empty = [n for n, k in zip(self.names, self.lengths) if k == 0]
        if empty:
            raise ConfigError(f"sources {empty} hold no samples: give them weight 0 or drop them")
        for line in mixture_changes(consumed, weights):
            logger.info("mixture change: %s", line)
        self._log_rounds()

    def _log_rounds(self) -> None:
        counts = numpy.bincount(self.dataset_index, minlength=len(self.names))
        for i, name in enumerate(self.names):
            needed, held = int(self.start[i] + counts[i]), int(self.lengths[i])
            if needed > held:
                logger.info(
                    "mixture change: %s runs past its dataset of %d samples (needs %d): its "
                    "stream starts that dataset over in the same order",
                    name,
                    held,
                    needed,
                )

    def __len__(self) -> int:
        return len(self.dataset_index)

    def position(self, idx: int) -> tuple[int, int]:
        """``(source id, sample of that source)`` of blended sample ``idx``."""
        if not 0 <= idx < len(self):
            raise IndexError(f"ContinuedMixture index {idx} out of range ({len(self)})")
        source = int(self.dataset_index[idx])
        stream = int(self.start[source] + self.dataset_sample_index[idx])
        return source, stream % int(self.lengths[source])

    def __getitem__(self, idx: int) -> Any:
        source, sample = self.position(idx)
        return self.sources[source][sample]


def _phases(schedule: Optional[Sequence[Sequence[Any]]], count: int) -> Optional[list[Any]]:
    """``schedule`` with each phase's weights normalised (ConfigError: not one per source)."""
    if schedule is None:
        return None
    phases = []
    for p, phase in enumerate(schedule):
        weights = numpy.asarray(phase[1], numpy.float64)
        if weights.shape != (count,) or not numpy.all(weights >= 0) or not weights.sum() > 0:
            raise ConfigError(
                f"blend_schedule phase {p}: weights {list(phase[1])} must be {count} "
                "values >= 0, one per source of the blend, not all 0"
            )
        phases.append((int(phase[0]), (weights / weights.sum()).tolist(), *phase[2:]))
    return phases


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
    schedule: Optional[Sequence[Sequence[Any]]] = None,
) -> ContinuedMixture:
    """The :class:`ContinuedMixture` after ``consumed_samples`` of the blend ``old``
    (rebuilt from the old config: Megatron users pass their old ``consumed_samples``),
    under ``weights`` (or ``schedule``, followed from ``consumed_samples``) by path
    prefix; ``added``: ``{prefix: dataset}`` of new sources. Exact for the sequential
    (``dataloader_type="single"``) sampler only."""
    sources = old_sources(old)
    counts = source_consumed(old.dataset_index, consumed_samples, list(sources))
    merged = {**dict(added or {}), **sources}
    return ContinuedMixture(merged, counts, weights, size, schedule, consumed_samples)

"""The train split a resumed Megatron run reads after a mixture change
(:func:`tokenloom.training.megatron_resume.continue_train` builds it)."""

from __future__ import annotations

from typing import Any

from tokenloom.attributes import read_attribute
from tokenloom.training.checks import describe, is_integer
from tokenloom.training.mixture import ContinuedMixture

__all__ = ["ContinuedTrainSplit"]


class ContinuedTrainSplit:
    """The train split a resumed Megatron run reads: ``len(old_part) + len(mixture)``
    samples; ``[0, consumed)`` are the old blend's (the sampler skips them),
    ``[consumed, len)`` the :class:`ContinuedMixture`'s, with the new blend's
    ``dataset_id``. ``changes``: one line per source (continues, starts, stops)."""

    def __init__(
        self, old: Any, consumed: int, mixture: ContinuedMixture, changes: list[str]
    ) -> None:
        self.old, self.consumed, self.mixture, self.changes = old, consumed, mixture, changes
        self.datasets = mixture.sources
        self.config = read_attribute(old, "config", None)

    def __len__(self) -> int:
        return self.consumed + len(self.mixture)

    def position(self, idx: int) -> tuple[str, int]:
        """``(source prefix, sample of that source)`` that sample ``idx`` is (at or
        after ``consumed``)."""
        source, sample = self.mixture.position(idx - self.consumed)
        return self.mixture.names[source], sample

    def locate(self, idx: int) -> tuple[Any, int]:
        """``(dataset, its sample)`` that sample ``idx`` is: the old blend's before
        ``consumed``, a source's from there on."""
        if idx < self.consumed:
            return self.old, idx
        source, sample = self.mixture.position(idx - self.consumed)
        return self.mixture.sources[source], sample

    def __getitem__(self, idx: Any) -> Any:
        if not is_integer(idx) or not 0 <= idx < len(self):
            raise IndexError(
                f"ContinuedTrainSplit index {describe(idx)} out of range ({len(self)})"
            )
        if idx < self.consumed:
            return self.old[idx]
        j = idx - self.consumed
        source, sample = self.mixture.position(j)
        return {"dataset_id": self.mixture.dataset_index[j], **self.mixture.sources[source][sample]}

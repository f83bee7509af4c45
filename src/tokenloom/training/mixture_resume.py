"""Per-source counts in the loader state, and a resume over a changed mixture (issue 20 §1).

A loader state (format ``/4``) records, per source of the loader's dataset (named by the
path prefix of its ``.bin``/``.idx`` pair, with the pair's identity), how many samples
of that source's stream have been consumed (``consumed``; None for the random samplers,
whose consumed samples are no prefix of a stream) and what rebuilds the order the stream
follows (``order``: :func:`tokenloom.training.continued_blend.order_of`), plus
``mixture``: the continuation in force (None when the loader serves its dataset as
built).

``load_state_dict(state, allow_mixture_change=True)`` on a loader built over another
blend continues it by the rule of docs/mixtures.md: each source in the saved state and
in the new blend continues its stream (in its saved order) from its next unconsumed
sample; a source new to the blend starts at its sample 0; a saved source missing from
the blend stops (its count is kept in the state, so a later change that adds it back
continues it); a prefix new to the blend whose pair has a stopped source's identity is
that source, moved (:func:`_follow_moves`); from the resume point on the blend is the new
weights' greedy blend as if it had started there
(:class:`~tokenloom.training.continued_blend.ContinuedBlend`). One log line per source
says what continues, starts and stops. Only the sequential
(``"single"``) sampler resumes over a changed mixture; ``"cyclic"`` and ``"elastic"``
are refused with a ConfigError (their consumed samples are random positions of the
blend, not a prefix of each source).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.datasets.blended import BlendedDataset
from tokenloom.errors import ConfigError
from tokenloom.training.continued_blend import ContinuedBlend, order_of, rebuild_source
from tokenloom.training.data_identity import (
    data_changes,
    moved_pairs,
    pair_identities,
    summarize,
)
from tokenloom.training.mixture import mixture_changes, old_sources
from tokenloom.training.samplers import RandomSeedDataset

__all__ = ["SourceBook", "sources_of"]

logger = logging.getLogger(__name__)

_OPT_IN = "load_state_dict(state, allow_mixture_change=True)"


def sources_of(dataset: Any) -> dict[str, Any]:
    """``{path_prefix: source dataset}`` of a loader's dataset: a blend's datasets, or the
    dataset itself when it reads one pair; ``{}`` when its sources cannot be named so."""
    target = dataset.dataset if isinstance(dataset, RandomSeedDataset) else dataset
    if isinstance(read_attribute(target, "datasets", None), (list, tuple)):
        try:
            return old_sources(target)
        except ConfigError:
            return {}
    prefixes = list(pair_identities(target))
    return {prefixes[0]: target} if len(prefixes) == 1 else {}


def _blend_of(dataset: Any) -> tuple[list[float], Optional[list[Any]], Any]:
    """``(weights, schedule, config)`` of the loader's dataset as a blend."""
    if not isinstance(read_attribute(dataset, "datasets", None), (list, tuple)):
        return [1.0], None, dataset.config
    if read_attribute(dataset, "size", None) is None:
        raise ConfigError(
            "a mixture change needs a blend with a size (the greedy blend); this "
            "BlendedDataset takes every sample of its datasets once (size=None)"
        )
    return list(dataset.weights), read_attribute(dataset, "schedule", None), dataset.config


class _Counter:
    """Per-source counts of a prefix of ``index`` (one source per value) on top of
    ``base``, kept between calls so that a later, longer prefix only counts what was
    added (a checkpoint every N steps costs O(N), not O(consumed))."""

    def __init__(self, index: Any, base: Any) -> None:
        self.index, self.base = index, numpy.asarray(base, numpy.int64)
        self.done, self.counts = 0, numpy.zeros(len(self.base), numpy.int64)

    def seed(self, done: int, counts: list[int]) -> None:
        """Start from ``counts`` (a state's, checked to add up) after ``done`` samples."""
        if sum(counts) == int(self.base.sum()) + done:
            self.done, self.counts = done, numpy.asarray(counts, numpy.int64) - self.base

    def at(self, end: int) -> list[int]:
        if end < self.done:
            self.counts[:], self.done = 0, 0
        if end > self.done:
            chunk = numpy.asarray(self.index[self.done : end])
            self.counts += numpy.bincount(chunk, minlength=len(self.counts))
            self.done = end
        return [int(c) for c in self.base + self.counts]


class SourceBook:
    """What a loader serves (its dataset, or a :class:`ContinuedBlend` of it) and what its
    state records per source."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.served: Any = dataset
        self.stopped: dict[str, dict[str, Any]] = {}
        self._sources: Optional[dict[str, Any]] = None
        self._records: dict[str, dict[str, Any]] = {}
        self._counter: Optional[_Counter] = None

    def _names(self) -> dict[str, Any]:
        if self._sources is None:
            self._sources = sources_of(self.dataset)
        return self._sources

    def fields(self, consumed: int, sequential: bool) -> dict[str, Any]:
        """The state's ``sources`` and ``mixture`` after ``consumed`` samples."""
        names, served, counts = list(self._names()), self.served, None
        continued = isinstance(served, ContinuedBlend)
        parts = list(served.datasets) if continued else list(self._names().values())
        if sequential and names:
            counts = self._counts(consumed)
        sources = dict(self.stopped)
        for i, (name, part) in enumerate(zip(names, parts)):
            if name not in self._records:  # order and identity: fixed for the part's life
                files = pair_identities(part).get(name)
                self._records[name] = {"files": files, "order": order_of(part)}
            record = self._records[name]
            sources[name] = {
                "consumed": None if counts is None else counts[i],
                "files": record["files"],
                "order": dict(record["order"]),
            }
        mixture = None
        if isinstance(served, ContinuedBlend):
            start = dict(zip(names, (int(s) for s in served.start)))
            mixture = {"resume_at": served.resume_at, "start": start}
        return {"sources": sources, "mixture": mixture}

    def _make_counter(self) -> Optional[_Counter]:
        """The counter of the served order (None for one dataset, not a blend)."""
        served, sources = self.served, len(self._names())
        if isinstance(served, ContinuedBlend):
            return _Counter(served.dataset_index[served.resume_at :], served.start)
        if not isinstance(read_attribute(self.dataset, "datasets", None), (list, tuple)):
            return None
        return _Counter(self.dataset.dataset_index, [0] * sources)

    def _counts(self, consumed: int) -> list[int]:
        if self._counter is None:
            self._counter = self._make_counter()
        if self._counter is None:
            return [consumed]  # one dataset: every consumed sample is its
        offset = self.served.resume_at if isinstance(self.served, ContinuedBlend) else 0
        return self._counter.at(max(consumed - offset, 0))

    def adopt(
        self, served: Any, stopped: dict[str, dict[str, Any]], saved: Mapping[str, Any]
    ) -> None:
        """Serve ``served`` from now on (what :meth:`plan` returned for ``saved``); the
        counts restart from the saved ones when they add up."""
        if served is not self.served:
            self._records = {}
        self.served, self.stopped, self._counter = served, stopped, None
        names, sources = list(self._names()), saved.get("sources") or {}
        if not names or any((sources.get(n) or {}).get("consumed") is None for n in names):
            return
        consumed, self._counter = saved["consumed_samples"], self._make_counter()
        if self._counter is not None:
            offset = served.resume_at if isinstance(served, ContinuedBlend) else 0
            self._counter.seed(consumed - offset, [int(sources[n]["consumed"]) for n in names])

    def plan(
        self, saved: Mapping[str, Any], kind: str, changed: bool, allow_data_change: bool
    ) -> tuple[Any, dict[str, dict[str, Any]]]:
        """``(served, stopped)`` after loading the checked state ``saved``: the dataset
        itself, or its continuation (a changed mixture, or a saved continuation)."""
        mixture = saved.get("mixture")
        if not changed and mixture is None:
            return self.dataset, {}
        names = self._names()
        sources = saved.get("sources")
        _check_can_continue(kind, sources, names, saved["format"])
        records: dict[str, Any] = dict(sources or {})
        if changed or mixture is None:
            records = _follow_moves(records, names)
            start = {n: records[n]["consumed"] for n in names if n in records}
            resume_at = saved["consumed_samples"]
            _check_files(records, names, allow_data_change)
        else:
            start, resume_at = dict(mixture["start"]), mixture["resume_at"]
            if set(start) != set(names) or resume_at > saved["consumed_samples"]:
                raise ConfigError(
                    f'loader state["mixture"] continues the sources {sorted(start)} from sample '
                    f"{resume_at}; this loader's dataset reads {sorted(names)} and the state "
                    f"consumed {saved['consumed_samples']}: the state is inconsistent"
                )
        served = self._continue(names, records, start, resume_at)
        stopped = {n: dict(r) for n, r in records.items() if n not in names}
        if changed:
            _log_changes(records, names, served)
        return served, stopped

    def _continue(
        self,
        names: Mapping[str, Any],
        saved: Mapping[str, Any],
        start: Mapping[str, int],
        resume_at: int,
    ) -> ContinuedBlend:
        weights, schedule, config = _blend_of(self.dataset)
        parts = [
            rebuild_source(part, saved[name]["order"], name) if start.get(name, 0) else part
            for name, part in names.items()
        ]
        counts = [int(start.get(name, 0)) for name in names]
        prefix = None
        if type(self.dataset) is BlendedDataset and schedule is None:  # its own greedy
            prefix = (self.dataset.dataset_index, self.dataset.dataset_sample_index)
        size = len(self.dataset)
        return ContinuedBlend(parts, weights, schedule, config, counts, resume_at, size, prefix)


def _check_can_continue(
    kind: str, sources: Optional[Mapping[str, Any]], names: Mapping[str, Any], fmt: str
) -> None:
    if kind != "single":
        raise ConfigError(
            f"a mixture change needs dataloader_type='single' (this loader: {kind!r}): the "
            "random samplers' consumed samples are random positions of the blend, not a "
            "prefix of each source's stream, so no source has a next unconsumed sample. "
            "Resume this state over the mixture it was saved with; a run that will change "
            "its mixture needs the sequential sampler (Megatron's default) from its start"
        )
    if sources is None:
        raise ConfigError(
            f"loader state has format {fmt!r}, which does not record how many samples of "
            "each source were consumed: resume it once over the mixture it was saved with "
            "and save a new state, or continue the old blend with "
            "tokenloom.training.mixture.continue_blend (the old config and consumed_samples)"
        )
    if not names:
        raise ConfigError(
            "a mixture change needs a dataset whose sources each read one .bin/.idx pair "
            "(a BlendedDataset of GPTDatasets, or one GPTDataset): this one's cannot be named"
        )
    if any(record["consumed"] is None for record in sources.values()):
        raise ConfigError(
            "loader state records no per-source counts (it was saved by a random sampler): "
            "a mixture change needs a state saved with dataloader_type='single'"
        )


def _follow_moves(saved: dict[str, Any], names: Mapping[str, Any]) -> dict[str, Any]:
    """``saved`` with each moved pair's record under its new prefix: a source new to the
    blend whose pair's identity (sizes, ``mtime_ns`` and ``.idx`` digest, what ``mv`` and
    ``cp -p`` keep) is that of a saved source the blend no longer names continues it."""
    gone = {n: r for n, r in saved.items() if n not in names and r.get("files")}
    if not gone:
        return saved
    current = {n: pair_identities(part).get(n) for n, part in names.items() if n not in saved}
    moves = moved_pairs({n: r["files"] for n, r in gone.items()}, current)
    out = {moves.get(n, n): r for n, r in saved.items()}
    for old, name in moves.items():
        logger.info(
            "mixture change: %s: the pair of %s, moved (same identity): continues (from sample %s)",
            name,
            old,
            out[name]["consumed"],
        )
    for name, files in current.items():
        if (
            name not in out
            and files
            and any(_same_content(r["files"], files) for r in gone.values())
        ):
            logger.warning(
                "mixture change: %s has the sizes and .idx digest of a saved source the "
                "blend no longer names, not its mtime_ns: a new source (starts at 0); "
                "move pairs with mv or cp -p to continue them",
                name,
            )
    return out


def _same_content(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Same parts with the same fields but ``mtime_ns``."""

    def strip(identity: Mapping[str, Any]) -> dict[str, Any]:
        return {p: {k: v for k, v in f.items() if k != "mtime_ns"} for p, f in identity.items()}

    return strip(a) == strip(b)


def _check_files(saved: Mapping[str, Any], names: Mapping[str, Any], allow: bool) -> None:
    """ConfigError (with ``allow``: a warning) when a continuing source's pair changed."""
    old = {n: saved[n]["files"] for n in names if n in saved}
    new = {n: pair_identities(part).get(n) for n, part in names.items() if n in saved}
    changes = data_changes(old, new)
    if not changes:
        return
    message = f"a continuing source's files changed since the state was saved: {summarize(changes)}"
    if not allow:
        raise ConfigError(
            f"{message}; its stream would continue over other tokens. Resume over the saved "
            "files, or, if the change is deliberate, pass allow_data_change=True too "
            "(the source continues from its count in its saved order over the new files)"
        )
    logger.warning("%s; loaded anyway (allow_data_change=True)", message)


def _log_changes(
    saved: Mapping[str, Any], names: Mapping[str, Any], served: ContinuedBlend
) -> None:
    consumed = {n: int(r["consumed"]) for n, r in saved.items()}
    weights = dict(zip(names, served.weights))
    for line in mixture_changes(consumed, weights):
        logger.info("mixture change at sample %d: %s", served.resume_at, line)
    needed = served.needed
    for i, name in enumerate(names):
        if needed[i] > len(served.datasets[i]) > 0:
            logger.info(
                "mixture change: %s runs past its dataset of %d samples (needs %d): its "
                "stream starts that dataset over in the same order",
                name,
                len(served.datasets[i]),
                int(needed[i]),
            )

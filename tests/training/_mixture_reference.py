"""A brute-force reference for a loader resumed over a changed mixture, and helpers.

The reference materialises every source's stream (the tokens of each sample of the
dataset it is drawn from, in order, round after round), pops the streams along the old
blend (megatron-core's greedy, written out readably) for the consumed samples, then
along the new blend for the rest. It shares no code with
tokenloom.training.mixture_resume / continued_blend / mixture (a schedule's greedy is
tokenloom.index.reference's, the readable twin of the blending kernels).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy
from tests.training._data import build_train

from tokenloom.index import reference as index_reference
from tokenloom.training import build_pretraining_data_loader

EOD = 2
SEQ = 16


def build(
    prefixes: Sequence[str],
    weights: Sequence[float],
    samples: int,
    cache: Path,
    *,
    split: str = "100,0,0",
    schedule: Optional[list] = None,
    sequence_length: int = SEQ,
) -> Any:
    """The train split of a blend (a GPTDataset for one prefix without a schedule)."""
    return build_train(
        prefixes,
        cache,
        samples,
        weights=list(weights),
        sequence_length=sequence_length,
        split=split,
        blend_schedule=schedule,
    )


def blend_of(corpora: dict, weights: dict, samples: int, **options: Any) -> Any:
    """``build`` over ``corpora["prefixes"]`` named by ``weights`` (name -> weight), sorted
    by name, cached in ``corpora["cache"]``."""
    names = sorted(weights)
    return build(
        [corpora["prefixes"][n] for n in names],
        [weights[n] for n in names],
        samples,
        corpora["cache"],
        **options,
    )


def parts(dataset: Any) -> dict[str, Any]:
    """``{prefix: source dataset}`` of a blend (or of one GPTDataset)."""
    members = getattr(dataset, "datasets", None) or [dataset]
    return {str(d.dataset_path): d for d in members}


def greedy(weights: Sequence[float], size: int) -> list[int]:
    """megatron-core's rule over normalised weights (a blend's ``weights``): sample t goes
    to the largest ``w * max(t, 1) - count``, the lowest id winning ties."""
    counts, out = [0] * len(weights), []
    for t in range(size):
        errors = [w * max(t, 1) - c for w, c in zip(weights, counts)]
        best = errors.index(max(errors))
        counts[best] += 1
        out.append(best)
    return out


def ramp_tail(phases: list, resume: int, size: int) -> list[int]:
    """The new schedule's blend from global sample ``resume`` on, by docs/mixtures.md:
    the phase in force holds from 0 (inside a ramp: its weights at ``resume`` for one
    sample, then a ramp from sample 1 to where the schedule reaches its weights), the
    later phases shifted; blended by tokenloom.index.reference (the readable greedy)."""
    norm = [(p[0], [w / sum(p[1]) for w in p[1]], *p[2:]) for p in phases]
    active = max(i for i, p in enumerate(norm) if p[0] <= resume)
    tail = [(p[0] - resume, p[1], len(p) == 3) for p in norm[active + 1 :]]
    if len(norm[active]) == 3:
        begin, end = norm[active][0], norm[active + 1][0]
        frac = (resume - begin) / (end - begin)
        here = [a + (b - a) * frac for a, b in zip(norm[active - 1][1], norm[active][1])]
        here = [w / sum(here) for w in here]
        head = [(0, here, False)] + ([(1, norm[active][1], True)] if end - resume > 1 else [])
    else:
        head = [(0, norm[active][1], False)]
    arrays = tuple(numpy.asarray(column) for column in zip(*(head + tail)))
    return index_reference.build_scheduled_blending_indices(arrays, size)[0].tolist()


class Streams:
    """Each source's stream: sample k is ``dataset[k % len(dataset)]``'s tokens."""

    def __init__(self) -> None:
        self.datasets: dict[str, Any] = {}
        self.next: dict[str, int] = {}

    def pop(self, name: str) -> numpy.ndarray:
        dataset, k = self.datasets[name], self.next[name]
        self.next[name] = k + 1
        return numpy.asarray(dataset[k % len(dataset)]["tokens"])


def reference(
    old: Any,
    consumed: int,
    new: Any,
    count: int,
    old_order: Optional[list[int]] = None,
    new_order: Optional[list[int]] = None,
    moved: Optional[dict[str, str]] = None,
) -> tuple[list[numpy.ndarray], Streams]:
    """The ``count`` samples served after ``consumed`` of ``old`` when resumed over ``new``.

    ``old_order``/``new_order``: which source each old / new sample comes from (default:
    the weights' greedy; a schedule passes its own, e.g. :func:`ramp_tail`'s).
    ``moved``: ``{new prefix: old prefix}`` of pairs moved between the runs (their
    streams go on under the new name)."""
    streams = Streams()
    old_parts = parts(old)
    names = list(old_parts)
    if old_order is None:
        old_order = greedy(list(getattr(old, "weights", [1.0])), consumed)
    for name in names:
        streams.datasets[name], streams.next[name] = old_parts[name], 0
    for i in old_order[:consumed]:
        streams.pop(names[i])
    for now, before in (moved or {}).items():
        streams.datasets[now] = streams.datasets.pop(before)
        streams.next[now] = streams.next.pop(before)
    new_parts = parts(new)
    for name, dataset in new_parts.items():
        if streams.next.get(name, 0) == 0:  # added (or never drawn): its new order from 0
            streams.datasets[name], streams.next[name] = dataset, 0
    new_names = list(new_parts)
    order = greedy(list(getattr(new, "weights", [1.0])), count) if new_order is None else new_order
    return [streams.pop(new_names[i]) for i in order], streams


def served(dataset: Any, state: Optional[dict], steps: int, dp: int, **options: Any) -> list:
    """The global order of ``steps`` steps served by every rank of a DP ``dp`` run
    (``"single"``: rank r serves rows r of each step), after loading ``state``."""
    per_rank = []
    allow = options.pop("allow_mixture_change", True)
    for rank in range(dp):
        loader = build_pretraining_data_loader(
            dataset, 0, data_parallel_rank=rank, data_parallel_size=dp, **options
        )
        if state is not None:
            loader.load_state_dict(state, allow_mixture_change=allow)
        batches = []
        for batch in loader:
            batches.append(batch["tokens"].numpy())
            if len(batches) == steps:
                break
        per_rank.append(batches)
    out = []
    for step in range(min(len(b) for b in per_rank)):
        for rank in range(dp):
            out.extend(per_rank[rank][step])
    return out


def state_after(dataset: Any, steps: int, dp: int = 1, **options: Any) -> dict:
    """Rank 0's state after ``steps`` steps from 0 (every rank's state is the same but
    its rank)."""
    loader = build_pretraining_data_loader(dataset, 0, data_parallel_size=dp, **options)
    iterator = iter(loader)
    for _ in range(steps):
        next(iterator)
    return loader.state_dict()


def same(a: Sequence[numpy.ndarray], b: Sequence[numpy.ndarray]) -> bool:
    """Whether two sample lists hold the same tokens, in order."""
    return len(a) == len(b) and all(numpy.array_equal(x, y) for x, y in zip(a, b))

"""The trace's vectorised order (per-rank sampler blocks, one array per random pass)
equals the readable reference: every rank's loader's own ``batch_sampler`` iterated
micro-batch by micro-batch and interleaved micro-step by micro-step, rank by rank, a new
pass where the loader starts one; over the sampler kinds, DP sizes, partial last
batches, resume points and pass ends."""

from __future__ import annotations

import itertools

import numpy
import pytest

from tokenloom.cli._trace_order import Layout, Resume, global_batches, run_order
from tokenloom.training import build_pretraining_data_loader


def _sampler(total, layout, consumed, rank):
    return build_pretraining_data_loader(
        list(range(total)),
        consumed,
        dataloader_type=layout.dataloader_type,
        micro_batch_size=layout.micro_batch_size,
        global_batch_size=layout.global_batch_size,
        data_parallel_rank=rank,
        data_parallel_size=layout.data_parallel_size,
        drop_last=layout.drop_last,
        seed=layout.seed,
        hybrid_context_parallel=layout.hybrid_context_parallel,
        pin_memory=False,
    ).batch_sampler


def _reference(total, layout, steps, start, skip):
    """The loaders' samplers, one micro-batch at a time (the trace before vectorising)."""
    mbs, single = layout.micro_batch_size, layout.dataloader_type == "single"

    def stream(rank):
        begin, left = start, skip
        while not (single and begin >= total):
            got = 0
            for indices in _sampler(total, layout, begin, rank):
                got += 1
                if left:
                    left -= 1
                    continue
                yield from (list(indices[k : k + mbs]) for k in range(0, len(indices), mbs))
            if single or got == 0:
                return
            begin += got * mbs * layout.data_parallel_size

    streams = [stream(rank) for rank in range(layout.data_parallel_size)]
    rows = []
    while len(rows) < steps:
        batch = []
        for _ in range(layout.micro_steps):
            for one in streams:
                indices = next(one, None)
                if indices is None or len(indices) < mbs:
                    return numpy.array(rows, dtype=numpy.int64).reshape(
                        -1, layout.global_batch_size
                    )
                batch.extend(indices)
        rows.append(batch)
    return numpy.array(rows, dtype=numpy.int64).reshape(-1, layout.global_batch_size)


@pytest.mark.parametrize(
    "kind, hybrid, drop_last",
    [
        ("single", False, True),
        ("single", False, False),
        ("single", True, False),
        ("cyclic", False, True),
        ("elastic", False, True),
    ],
)
def test_the_vectorised_order_equals_the_samplers_one_batch_at_a_time(kind, hybrid, drop_last):
    for total, dp, mbs, micro in itertools.product((97, 120), (1, 2, 3), (1, 2), (1, 2)):
        gbs = dp * mbs * micro
        layout = Layout(kind, mbs, gbs, dp, True, 7, drop_last, hybrid)
        steps = total // gbs * 3 + 2  # the random kinds run past two pass ends
        want = _reference(total, layout, steps, 0, 0)
        assert numpy.array_equal(run_order(list(range(total)), layout, steps), want)
        first = max(want.shape[0] // 2, 1)
        if kind == "cyclic":  # a resume in the middle of a pass: the pass start, then skip
            resume = Resume(first * gbs, 0, first * micro)
            got = run_order(list(range(total)), layout, steps - first, first, resume)
            assert numpy.array_equal(got, want[first:]), (total, dp, mbs, micro)
        else:
            got = run_order(list(range(total)), layout, steps - first, first)
            assert numpy.array_equal(got, want[first:]), (total, dp, mbs, micro)
        batch = next(global_batches(list(range(total)), layout, first), None)
        assert batch is None if first >= want.shape[0] else numpy.array_equal(batch, want[first])

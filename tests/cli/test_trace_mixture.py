"""`tokenloom trace --state` follows a mixture change: a run resumed over a new blend
(a source reweighted, one added, one removed, another data-parallel size) with
``load_state_dict(state, allow_mixture_change=True)`` serves, at every step, what the
trace says (real loaders with DataLoader workers); a state saved after the change is
followed without the opt-in, and its manifest equals the first resumed run's."""

from __future__ import annotations

import json

import numpy
import pytest
import torch
from tests.cli._trace_support import SEQ, load_traced, rank_loader, write_config
from tests.training._data import write_corpus

from tokenloom.cli._trace_order import Layout
from tokenloom.cli._trace_ranges import parts
from tokenloom.cli._trace_step import step_records
from tokenloom.cli.main import main


def _config(tmp_path, name: str, weights: dict[str, float], **extra) -> str:
    sizes = {"a": 200, "b": 120, "c": 150}
    data_path = []
    for source, weight in weights.items():
        prefix = tmp_path / source
        if not (tmp_path / f"{source}.idx").exists():
            write_corpus(prefix, sizes[source], seed=len(source) + ord(source))
        data_path += [str(weight), str(prefix)]
    return write_config(tmp_path, name, data_path, **{"train_iters": 16, **extra})


def _run(config: str, state=None, change=False):
    return load_traced(config, state, change)


def _loaders(dataset, layout: Layout, workers: int):
    return [
        rank_loader(dataset, layout, rank, workers) for rank in range(layout.data_parallel_size)
    ]


def _serve(loaders, layout: Layout, steps: int) -> list[list[numpy.ndarray]]:
    iterators = [iter(loader) for loader in loaders]
    out = []
    for _ in range(steps):
        rows = []
        for _ in range(layout.micro_steps):
            for it in iterators:
                rows.extend(numpy.asarray(next(it)["tokens"]))
        out.append(rows)
    return out


def _check(dataset, layout, served, first, resume) -> set[str]:
    """Every served step equals its trace; the sources the trace names."""
    sources = set()
    for offset, rows in enumerate(served):
        records = step_records(dataset, layout, first + offset, resume)
        assert len(records) == len(rows) == layout.global_batch_size
        for record, row in zip(records, rows):
            low_level = parts(dataset)[record["dataset_id"]].dataset
            tokens = numpy.concatenate(
                [numpy.asarray(low_level.get(d, s, e - s)) for d, s, e in record["document_ranges"]]
            )
            assert numpy.array_equal(tokens[:SEQ], row), (first + offset, record["position"])
            sources.add(record["source"].rsplit("/", 1)[-1])
    return sources


@pytest.mark.processes
@pytest.mark.timeout(400)
def test_trace_follows_a_mixture_change_at_a_resume(tmp_path, capsys):
    old = _config(tmp_path, "old.json", {"a": 0.6, "b": 0.4})
    new = _config(tmp_path, "new.json", {"a": 0.3, "c": 0.7}, world_size=4)
    dataset, layout, _, _ = _run(old)
    loaders = _loaders(dataset, layout, workers=2)
    _serve(loaders, layout, 5)
    state_path = tmp_path / "state.pt"
    torch.save(loaders[0].state_dict(), state_path)

    # the run: loaders over the new blend (DP 4) load the state with the opt-in
    new_dataset, new_layout, _, _ = _run(new)
    resumed = _loaders(new_dataset, new_layout, workers=1)
    for loader in resumed:
        loader.load_state_dict(loaders[0].state_dict(), allow_mixture_change=True)
    steps = len(new_dataset) // 8 - 5
    served = _serve(resumed, new_layout, steps)

    traced, layout4, resume, _ = _run(new, str(state_path), change=True)
    assert layout4.data_parallel_size == 4 and resume.consumed_samples == 40
    assert _check(traced, layout4, served, 5, resume) == {"a", "c"}  # b removed, c added

    argv = ["trace", "--config", new, "--state", str(state_path)]
    assert main([*argv, "--step", "5"]) != 0  # the run needed the opt-in, so does the trace
    assert "--allow-mixture-change" in capsys.readouterr().err
    first = tmp_path / "first.manifest"
    assert main([*argv, "--allow-mixture-change", "--manifest", str(first)]) == 0
    c_prefix = str(parts(traced)[1].dataset_path)
    assert main([*argv, "--allow-mixture-change", "--document", f"{c_prefix}:0", "--json"]) == 0
    capsys.readouterr()

    # a state saved after the change holds the continuation: no opt-in needed
    later = _loaders(new_dataset, new_layout, workers=0)
    for loader in later:
        loader.load_state_dict(loaders[0].state_dict(), allow_mixture_change=True)
    _serve(later, new_layout, 3)  # steps 5, 6, 7
    saved = later[0].state_dict()
    assert saved["mixture"] is not None and saved["consumed_samples"] == 64
    after_path = tmp_path / "after.json"
    after_path.write_text(json.dumps(saved))
    second = tmp_path / "second.manifest"
    argv = ["trace", "--config", new, "--state", str(after_path), "--manifest", str(second)]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["trace", "--diff", str(first), str(second)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"no step differs ({steps} and {steps - 3} steps compared)")

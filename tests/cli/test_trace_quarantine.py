"""`tokenloom trace` follows what real loaders do with a blend schedule, skipped steps and
blocked documents: every served batch (DataLoader workers, 2 DP ranks, three sources)
equals the trace of its step, tokens and loss_mask, and the skipped steps are the ones
the loaders never serve; a resumed run (the skips from its saved state, ranges added at
the resume) gives the uninterrupted run's manifest; the hybrid-CP sampler is followed;
one config file serves trace, prepare-cache, preview and plan."""

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

SCHEDULE = [[0, [6, 3, 1]], [40, [1, 1, 8]], [80, [2, 1, 1], "linear"], [120, [0, 1, 1]]]


def _config(tmp_path, name="train.json", **extra) -> str:
    sources = [  # written once: the loader state records the files' identities
        str(tmp_path / f"s{k}")
        if (tmp_path / f"s{k}.idx").exists()
        else write_corpus(tmp_path / f"s{k}", documents, seed=k + 1)
        for k, documents in enumerate((200, 120, 150))
    ]
    data_path = ["1", sources[0], "1", sources[1], "1", sources[2]]
    settings = {"train_iters": 20, "blend_schedule": SCHEDULE, **extra}
    return write_config(tmp_path, name, data_path, **settings)


def _run(config: str, state=None):
    return load_traced(config, state)


def _loaders(dataset, layout: Layout, quarantine, workers: int = 2, **extra):
    return [
        rank_loader(
            dataset,
            layout,
            rank,
            workers,
            hybrid_context_parallel=layout.hybrid_context_parallel,
            block_documents=quarantine.block_documents,
            **extra,
        )
        for rank in range(layout.data_parallel_size)
    ]


def _served(loaders, layout: Layout, steps: int) -> list[list[tuple]]:
    """Per served global batch, ``(tokens, loss_mask)`` rows in global-batch order."""
    iterators = [iter(loader) for loader in loaders]
    out = []
    for _ in range(steps):
        if layout.hybrid_context_parallel:  # one list of samples per rank and global batch
            shares = [next(it) for it in iterators]
            mbs = layout.micro_batch_size
            samples = [
                s for i in range(layout.micro_steps) for r in shares for s in r[i * mbs :][:mbs]
            ]
            out.append(
                [(numpy.asarray(s["tokens"]), numpy.asarray(s["loss_mask"])) for s in samples]
            )
            continue
        rows = []
        for _ in range(layout.micro_steps):
            for it in iterators:
                batch = next(it)
                rows.extend(zip(numpy.asarray(batch["tokens"]), numpy.asarray(batch["loss_mask"])))
        out.append(rows)
    return out


def _expected(dataset, record) -> tuple[numpy.ndarray, numpy.ndarray]:
    """The tokens of a traced sample, read from the .bin, and its loss_mask: 0 on every
    label (text token i + 1) that a range marked blocked gives."""
    low_level = parts(dataset)[record["dataset_id"]].dataset
    pieces = [numpy.asarray(low_level.get(d, s, e - s)) for d, s, e in record["document_ranges"]]
    mask = numpy.ones(SEQ, dtype=numpy.float32)
    start = 0
    for piece, blocked in zip(pieces, record.get("blocked", [False] * len(pieces))):
        if blocked:
            mask[max(start - 1, 0) : min(start + len(piece) - 1, SEQ)] = 0
        start += len(piece)
    return numpy.concatenate(pieces)[:SEQ], mask


def _check(dataset, layout, quarantine, served, first=0, resume=None) -> int:
    """Every served batch equals the trace of the next unskipped step; the masked count."""
    steps = [s for s in range(first, first + 10 * len(served)) if not quarantine.skipped(s)]
    masked = 0
    for step, rows in zip(steps, served):
        records = step_records(dataset, layout, step, resume, quarantine)
        assert len(records) == len(rows) == layout.global_batch_size
        for record, (tokens, loss_mask) in zip(records, rows):
            want_tokens, want_mask = _expected(dataset, record)
            assert numpy.array_equal(tokens, want_tokens), (step, record["position"])
            assert numpy.array_equal(loss_mask, want_mask), (step, record["position"])
            masked += int((want_mask == 0).sum())
    return masked


def _blocked_pair(tmp_path, step=1, **extra) -> list[str]:
    """Two documents of ``step`` of the run (one from each of the first two sources)."""
    dataset, layout, _, quarantine = _run(_config(tmp_path, "probe.json", **extra))
    records = step_records(dataset, layout, step, None, quarantine)
    by_source = {r["source"]: r["document_ranges"][-1][0] for r in records}
    names = [str(p.dataset_path) for p in parts(dataset)]
    return [f"{name}:{by_source[name]}" for name in names[:2] if name in by_source]


@pytest.mark.processes
@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "loader",
    [
        {"dataloader_type": "single"},
        {"dataloader_type": "cyclic"},
        {"dataloader_type": "elastic", "loader_seed": 3},
        {"dataloader_type": "single", "hybrid_context_parallel": True},
    ],
)
def test_served_batches_equal_the_trace_of_a_scheduled_quarantined_run(tmp_path, loader):
    blocked = _blocked_pair(tmp_path)
    skips = [[2, 4], [9, 10]]
    config = _config(tmp_path, skip_batches=skips, block_documents=blocked, **loader)
    dataset, layout, _, quarantine = _run(config)
    assert len(parts(dataset)) == 3 and layout.data_parallel_size == 2
    assert quarantine.skip_batches == ((2, 4), (9, 10)) and quarantine.blocker is not None
    steps = len(dataset) // layout.global_batch_size
    if layout.dataloader_type != "single":
        steps += 4  # past the first pass
    served = _served(_loaders(dataset, layout, quarantine, skip_batches=skips), layout, steps - 3)
    assert _check(dataset, layout, quarantine, served) > 0  # blocked labels were served
    ids = numpy.asarray(dataset.dataset_index[:40])
    assert numpy.bincount(ids, minlength=3)[2] < numpy.bincount(ids, minlength=3)[0]  # phase 0


@pytest.mark.processes
@pytest.mark.timeout(400)
@pytest.mark.parametrize("kind, world", [("cyclic", 2), ("elastic", 4)])  # elastic: DP 2 -> 4
def test_a_resumed_quarantined_run_has_the_uninterrupted_manifest(tmp_path, capsys, kind, world):
    blocked = _blocked_pair(tmp_path)
    before = _config(
        tmp_path,
        "before.json",
        dataloader_type=kind,
        skip_batches=[[2, 3]],
        block_documents=blocked,
    )
    added = [[2, 3], [7, 9]]
    after = _config(
        tmp_path,
        "after.json",
        dataloader_type=kind,
        skip_batches=added,
        block_documents=blocked,
        world_size=world,
    )
    dataset, layout, _, quarantine = _run(before)
    loaders = _loaders(dataset, layout, quarantine, skip_batches=[[2, 3]])
    _served(loaders, layout, 4)  # steps 0, 1, 3, 4
    assert loaders[0].consumed_samples == 5 * 8
    state_path = tmp_path / "state.pt"
    torch.save(loaders[0].state_dict(), state_path)

    # resumed without skip_batches: the loaders keep the saved range, so does the trace
    plain = _config(
        tmp_path, "plain.json", dataloader_type=kind, block_documents=blocked, world_size=world
    )
    _, _, resume, kept = _run(plain, str(state_path))
    assert kept.skip_batches == ((2, 3),) and resume.consumed_samples == 40
    # resumed with a range added: the loaders skip both, and so does the trace
    _, layout_after, resume, both = _run(after, str(state_path))
    assert both.skip_batches == ((2, 3), (7, 9))
    assert layout_after.data_parallel_size == world
    resumed = _loaders(dataset, layout_after, both, workers=1, skip_batches=added)
    for rank, one in enumerate(resumed):  # elastic: any rank's state, at any DP size
        one.load_state_dict(loaders[rank if kind == "cyclic" else 0].state_dict())
    served = _served(resumed, layout_after, 14)  # crosses the end of the first pass
    _check(dataset, layout_after, both, served, first=5, resume=resume)

    whole, cont = tmp_path / "whole.manifest", tmp_path / "resumed.manifest"
    assert main(["trace", "--config", after, "--manifest", str(whole)]) == 0
    argv = ["--config", after, "--state", str(state_path), "--manifest", str(cont)]
    assert main(["trace", *argv]) == 0
    capsys.readouterr()
    assert main(["trace", "--diff", str(whole), str(cont)]) == 0
    assert capsys.readouterr().out.startswith("no step differs")
    data = json.loads(whole.read_text())
    assert data["format"] == "tokenloom-trace-manifest/2"
    assert data["batches"][7] == data["batches"][8] == "skipped"
    assert data["quarantine"]["skip_batches"] == added
    # the run without the added range differs first at step 7, skipped in one only
    first = tmp_path / "before.manifest"
    assert main(["trace", "--config", before, "--manifest", str(first)]) == 0
    capsys.readouterr()
    assert main(["trace", "--diff", str(first), str(whole)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "first differing step: 7" and "step 7: served vs skipped" in out[-1]
    # a block list other than the state's is refused, with the loader's message
    other = _config(tmp_path, "other.json", dataloader_type=kind, skip_batches=added)
    assert main(["trace", "--config", other, "--state", str(state_path), "--step", "9"]) != 0
    assert "block_documents digest" in capsys.readouterr().err


def test_step_and_document_report_skips_and_blocks(tmp_path, capsys):
    blocked = [
        *_blocked_pair(tmp_path, train_iters=80)[:1],
        *_blocked_pair(tmp_path, 0, train_iters=80)[1:],
    ]
    config = _config(tmp_path, skip_batches=[[1, 2]], block_documents=blocked, train_iters=80)
    assert main(["trace", "--config", config, "--step", "1", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body == {"step": 1, "skipped": True, "skip_batches": [1, 2], "samples": []}
    assert main(["trace", "--config", config, "--step", "1"]) == 0
    assert capsys.readouterr().out.startswith("step 1: skipped (skip_batches [1, 2)): ")
    assert main(["trace", "--config", config, "--step", "0", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["skipped"] is False and all("blocked" in s for s in body["samples"])
    assert any(any(s["blocked"]) for s in body["samples"])  # blocked[1] is in step 0
    assert main(["trace", "--config", config, "--step", "0"]) == 0
    assert " blocked (loss_mask 0)" in capsys.readouterr().out
    reports = []
    for document in blocked:
        assert main(["trace", "--config", config, "--document", document, "--json"]) == 0
        reports.append(json.loads(capsys.readouterr().out))
        assert main(["trace", "--config", config, "--document", document]) == 0
        out = capsys.readouterr().out
        assert "is blocked (block_documents: loss_mask 0 on its labels" in out
        assert reports[-1]["blocked"] is True and 1 not in reports[-1]["steps"]
        served = f": served {reports[-1]['count']} time(s) in "
        assert served in out if reports[-1]["count"] else ": not served in" in out
    assert reports[0]["skipped"] >= 1 and reports[1]["count"] >= 1  # in steps 1 and 0
    plain = _config(tmp_path, "plain.json", train_iters=80)
    assert main(["trace", "--config", plain, "--document", blocked[0], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["blocked"] is False


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_one_config_serves_trace_prepare_cache_preview_and_plan(tmp_path, capsys):
    config = _config(
        tmp_path,
        dataloader_type="cyclic",
        data_sharding=True,
        drop_last=True,
        skip_batches=[[1, 2]],
        block_documents=[],
    )
    for argv in (
        ["prepare-cache", "--config", config],
        ["preview", "--config", config, "--samples", "1"],
        ["plan", "--config", config],
        ["trace", "--config", config, "--step", "0"],
    ):
        assert main(argv) == 0, argv
    capsys.readouterr()
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**json.loads(open(config).read()), "skip_batches": [[3, 1]]}))
    assert main(["trace", "--config", str(path), "--step", "0"]) != 0
    assert "skip_batches entry [3, 1]" in capsys.readouterr().err

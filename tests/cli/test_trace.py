"""`tokenloom trace`: the trace of every step equals what real loaders (DataLoader workers,
DP > 1) served, read back from the .bin; resumed and DP-changed runs give equal manifests;
the document scan equals a brute-force scan of every step."""

from __future__ import annotations

import json

import numpy
import pytest
import torch
from tests.cli._trace_support import SEQ, load_traced, rank_loader, write_config
from tests.provenance.provenance_helpers import build
from tests.support.tokenizer_models import hf_path, real_texts  # noqa: F401
from tests.training._data import write_corpus

from tokenloom.cli._trace_document import document_steps
from tokenloom.cli._trace_order import Layout, run_order
from tokenloom.cli._trace_ranges import parts
from tokenloom.cli._trace_step import step_records
from tokenloom.cli.main import main


def _config(tmp_path, name="train.json", **extra) -> str:
    big = write_corpus(tmp_path / "big", 200, seed=1)
    small = write_corpus(tmp_path / "small", 60, seed=2)
    return write_config(tmp_path, name, ["0.7", big, "0.3", small], **{"train_iters": 12, **extra})


def _run(config: str, state=None):
    return load_traced(config, state)


def _loader(dataset, layout: Layout, rank: int, workers: int = 2):
    return rank_loader(dataset, layout, rank, workers, data_sharding=layout.data_sharding)


def _served(loaders, layout: Layout, steps: int) -> list[list[numpy.ndarray]]:
    """Per step, the token rows in global-batch order (micro-step, then rank)."""
    iterators = [iter(loader) for loader in loaders]
    out = []
    for _ in range(steps):
        rows = []
        for _ in range(layout.micro_steps):
            for it in iterators:
                rows.extend(numpy.asarray(next(it)["tokens"]))
        out.append(rows)
    return out


def _tokens_of(dataset, record) -> numpy.ndarray:
    low_level = parts(dataset)[record["dataset_id"]].dataset
    return numpy.concatenate(
        [numpy.asarray(low_level.get(d, s, e - s)) for d, s, e in record["document_ranges"]]
    )


def _check_steps(dataset, layout, served, first=0, resume=None) -> None:
    for offset, rows in enumerate(served):
        records = step_records(dataset, layout, first + offset, resume)
        assert len(records) == layout.global_batch_size == len(rows)
        for record, row in zip(records, rows):
            window = _tokens_of(dataset, record)
            assert window.shape[0] == SEQ + 1
            assert numpy.array_equal(window[:SEQ], row)


@pytest.mark.processes
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "loader",
    [
        {"dataloader_type": "single"},
        {"dataloader_type": "cyclic"},
        {"dataloader_type": "cyclic", "data_sharding": False},
        {"dataloader_type": "elastic", "loader_seed": 5},
    ],
)
def test_every_step_equals_what_the_loaders_served(tmp_path, loader):
    dataset, layout, _, _ = _run(_config(tmp_path, **loader))
    assert len(parts(dataset)) == 2 and layout.data_parallel_size == 2 and layout.micro_steps == 2
    steps = len(dataset) // layout.global_batch_size
    if layout.dataloader_type != "single":
        steps += 3  # past the first pass: the loaders start the next one
    loaders = [_loader(dataset, layout, rank) for rank in range(2)]
    _check_steps(dataset, layout, _served(loaders, layout, steps))


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_resumed_run_traces_and_manifest_equal_the_uninterrupted_run(tmp_path, capsys):
    config = _config(tmp_path, dataloader_type="cyclic")
    dataset, layout, _, _ = _run(config)
    loaders = [_loader(dataset, layout, rank) for rank in range(2)]
    _served(loaders, layout, 5)
    state_path = tmp_path / "state.pt"
    torch.save(loaders[0].state_dict(), state_path)
    json_state = tmp_path / "state.json"
    json_state.write_text(json.dumps(loaders[1].state_dict()))
    resumed = [_loader(dataset, layout, rank) for rank in range(2)]
    for loader, state in zip(resumed, (loaders[0].state_dict(), loaders[1].state_dict())):
        loader.load_state_dict(state)
    served = _served(resumed, layout, 14)  # crosses the end of the first pass
    _, state_layout, resume, _ = _run(config, str(state_path))
    assert resume.consumed_samples == 5 * 8 and state_layout == layout
    _check_steps(dataset, layout, served, first=5, resume=resume)

    steps = len(dataset) // 8
    whole, after = tmp_path / "whole.manifest", tmp_path / "after.manifest"
    assert main(["trace", "--config", config, "--manifest", str(whole)]) == 0
    for state in (state_path, json_state):
        argv = ["--config", config, "--state", str(state), "--manifest", str(after)]
        assert main(["trace", *argv]) == 0
        capsys.readouterr()
        assert main(["trace", "--diff", str(whole), str(after)]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"no step differs ({steps} and {steps - 5} steps compared)")
        assert f"steps covered: 0..{steps - 1} vs 5..{steps - 1}" in out


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_elastic_resume_with_another_data_parallel_size(tmp_path, capsys):
    two = _config(tmp_path, dataloader_type="elastic")
    four = _config(tmp_path, "four.json", dataloader_type="elastic", world_size=4)
    dataset, layout2, _, _ = _run(two)
    loaders = [_loader(dataset, layout2, rank) for rank in range(2)]
    _served(loaders, layout2, 3)
    state_path = tmp_path / "state.pt"
    torch.save(loaders[0].state_dict(), state_path)
    _, layout4, resume, _ = _run(four, str(state_path))
    assert layout4.data_parallel_size == 4 and layout4.micro_steps == 1
    resumed = [_loader(dataset, layout4, rank, workers=1) for rank in range(4)]
    for loader in resumed:
        loader.load_state_dict(loaders[0].state_dict())
    _check_steps(dataset, layout4, _served(resumed, layout4, 4), first=3, resume=resume)
    m2, m4 = tmp_path / "two.manifest", tmp_path / "four.manifest"
    assert main(["trace", "--config", two, "--manifest", str(m2), "--steps", "3:9"]) == 0
    argv = ["--config", four, "--state", str(state_path), "--manifest", str(m4), "--steps", "3:9"]
    assert main(["trace", *argv]) == 0
    capsys.readouterr()
    assert main(["trace", "--diff", str(m2), str(m4)]) == 0
    assert capsys.readouterr().out == "no step differs (6 and 6 steps compared)\n"


def test_diff_names_the_first_differing_step_and_checks_the_checksum(tmp_path, capsys):
    one = _config(tmp_path, dataloader_type="elastic", loader_seed=1)
    other = _config(tmp_path, "other.json", dataloader_type="elastic", loader_seed=2)
    m1, m2 = tmp_path / "1.manifest", tmp_path / "2.manifest"
    assert main(["trace", "--config", one, "--manifest", str(m1)]) == 0
    assert main(["trace", "--config", other, "--manifest", str(m2)]) == 0
    capsys.readouterr()
    assert main(["trace", "--diff", str(m1), str(m2)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "first differing step: 0"
    assert lines[1] == "  layout seed: 1 vs 2"
    assert lines[2].startswith("  step 0: ")
    data = json.loads(m2.read_text())
    data["batches"][3] = "0" * 16
    m2.write_text(json.dumps(data))
    assert main(["trace", "--diff", str(m1), str(m2)]) != 0
    assert "checksum mismatch" in capsys.readouterr().err


def test_document_scan_equals_a_scan_of_every_step(tmp_path, capsys):
    config = _config(tmp_path, dataloader_type="cyclic", train_iters=80)
    dataset, layout, _, _ = _run(config)
    steps = len(dataset) // 8
    order = run_order(dataset, layout, steps)
    small = str(parts(dataset)[1].dataset_path)
    expected: dict[int, list] = {}
    for step in range(steps):
        for record in step_records(dataset, layout, step):
            for d, s, e in record["document_ranges"]:
                if record["source"] == small:
                    expected.setdefault(d, []).append((step, record["position"], s, e))
    for document in (0, 7, 59):
        report = document_steps(dataset, order, small, document)
        got = [(h["step"], h["position"], h["token_start"], h["token_end"]) for h in report["hits"]]
        assert sorted(got) == sorted(expected[document])
        assert report["first_step"] == min(step for step, *_ in expected[document])
        assert len(report["epochs"]) >= 2  # the small source repeats
    assert main(["trace", "--config", config, "--document", f"{small}:7", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["count"] == len(expected[7]) and report["document"] == 7
    assert main(["trace", "--config", config, "--document", f"{small}:7"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.startswith(f"document 7 of {small}: trained on {len(expected[7])} time(s)")
    assert main(["trace", "--config", config, "--document", "nowhere:7"]) != 0
    assert "--document nowhere:7: no source 'nowhere'" in capsys.readouterr().err


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_document_and_manifest_do_not_import_torch(tmp_path):
    """The order comes from the loader's samplers without the loader (numpy only)."""
    import subprocess
    import sys
    from pathlib import Path

    config = _config(tmp_path, dataloader_type="elastic")
    dataset, _, _, _ = _run(config)
    small = str(parts(dataset)[1].dataset_path)
    code = (
        "import sys; from tokenloom.cli.main import main; "
        f"a = main(['trace', '--config', {config!r}, '--document', {small + ':7'!r}]); "
        f"b = main(['trace', '--config', {config!r}, '--manifest', {str(tmp_path / 'm')!r}]); "
        "print(a, b, 'torch' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=240,
        env={"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "0 0 False"


def test_step_json_and_text(tmp_path, capsys):
    config = _config(tmp_path, dataloader_type="cyclic")
    dataset, layout, _, _ = _run(config)
    assert main(["trace", "--config", config, "--step", "3", "--json", "--decode"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["step"] == 3 and len(body["samples"]) == 8
    records = step_records(dataset, layout, 3)
    for got, want in zip(body["samples"], records):
        assert {k: got[k] for k in want} == want
        assert [len(t) for t in got["text"]] == [e - s for _, s, e in want["document_ranges"]]
    assert {s["source"] for s in body["samples"]} <= {str(p.dataset_path) for p in parts(dataset)}
    assert main(["trace", "--config", config, "--step", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("step 3: 8 samples (global_batch_size 8; dataloader_type cyclic")
    assert out.count("\nsample ") == 8
    assert main(["trace", "--config", _config(tmp_path, "one.json"), "--step", "99"]) != 0
    assert "--step 99: the run's loader (single) ends before it" in capsys.readouterr().err


def test_decode_with_the_sidecar_tokenizer_and_a_single_source(
    tmp_path, real_texts, hf_path, capsys
):  # noqa: F811
    prefix = build(tmp_path, real_texts, f"hf:{hf_path}", name="web")
    config = tmp_path / "one.json"
    config.write_text(
        json.dumps(
            {
                "data_path": [prefix],
                "split": "100,0,0",
                "seq_length": SEQ,
                "data_cache_path": str(tmp_path / "cache"),
                "train_iters": 4,
                "eval_interval": 1000,
                "eval_iters": 0,
                "global_batch_size": 4,
            }
        )
    )
    assert main(["trace", "--config", str(config), "--step", "2", "--json", "--decode"]) == 0
    body = json.loads(capsys.readouterr().out)
    texts = "".join(real_texts)
    for sample in body["samples"]:
        assert sample["source"] == prefix and sample["dataset_id"] == 0
        for text in sample["text"]:
            for chunk in text.split("<|endoftext|>"):
                assert chunk.strip() == "" or chunk.strip() in texts
    document = body["samples"][0]["document_ranges"][0][0]
    assert (
        main(["trace", "--config", str(config), "--document", f"{prefix}:{document}", "--json"])
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert 2 in report["steps"] and report["first_step"] <= 2
    starts = [h["token_start"] for h in report["hits"] if h["step"] == 2 and h["position"] == 0]
    assert body["samples"][0]["document_ranges"][0][1] in starts


def test_diff_json_and_bad_arguments(tmp_path, capsys):
    config = _config(tmp_path)
    m1 = tmp_path / "1.manifest"
    assert main(["trace", "--config", config, "--manifest", str(m1), "--steps", "2:5"]) == 0
    assert json.loads(m1.read_text())["steps"] == 3
    capsys.readouterr()
    assert main(["trace", "--diff", str(m1), str(m1), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"first_differing_step": None, "differences": []}
    for argv, message in (
        (["--steps", "5:2", "--manifest", str(m1)], "--steps '5:2': give A:B"),
        (["--document", "no-colon"], "give PREFIX:ID"),
        (["--step", "-1"], "steps are 0-based"),
    ):
        assert main(["trace", "--config", config, *argv]) != 0
        assert message in capsys.readouterr().err
    bad_state = tmp_path / "state.json"
    bad_state.write_text(json.dumps({"format": 1}))
    assert main(["trace", "--config", config, "--state", str(bad_state), "--step", "0"]) != 0
    assert "--state: not a tokenloom loader state_dict()" in capsys.readouterr().err


def test_a_state_of_another_dataset_is_refused(tmp_path, capsys):
    config = _config(tmp_path, dataloader_type="cyclic")
    other = _config(tmp_path, "other.json", dataloader_type="cyclic", seed=4321)
    dataset, layout, _, _ = _run(other)
    state = tmp_path / "other_state.json"
    state.write_text(json.dumps(_loader(dataset, layout, 0, workers=0).state_dict()))
    assert main(["trace", "--config", other, "--state", str(state), "--step", "0"]) == 0
    capsys.readouterr()
    assert main(["trace", "--config", config, "--state", str(state), "--step", "0"]) != 0
    assert "loader state is from another dataset" in capsys.readouterr().err

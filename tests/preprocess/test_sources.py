"""Every input container gives the same bytes and the same counts: JSONL, Parquet, HF datasets,
Python records and texts, byte ranges of a file."""

from __future__ import annotations

import filecmp

import numpy
import pytest
from tests.preprocess._preprocess_helpers import write_jsonl

from tokenloom.errors import PreprocessError
from tokenloom.format import IndexedDataset
from tokenloom.preprocess import Policy, preprocess
from tokenloom.preprocess.sources import FileRange, HFDiskDataset

SKIP_ALL = Policy(on_bad_json="skip", on_missing_key="skip", on_bad_type="skip")
CONTAINERS = ["jsonl", "parquet", "hf_dataset", "hf_disk", "hf_iterable", "records"]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="module")
def records(request) -> list:
    """Real text plus the records the policies act on: missing keys, lists, numbers, empties."""
    from tokenloom.preprocess.stdlib_corpus import stdlib_sources

    texts = [text for _, text in stdlib_sources(max_files=5) if text]
    rows = [{"text": text, "title": f"title {i}"} for i, text in enumerate(texts)]
    rows[1] = {"text": "", "title": "an empty text"}
    rows[2] = {"text": ["first sentence.", "", "third sentence."], "title": "a list"}
    rows.insert(3, {"title": "no text at all"})
    rows.insert(4, {"text": None, "title": "a null text"})
    return rows


def _container(kind: str, rows: list, folder):
    if kind == "jsonl":
        return str(write_jsonl(folder / "in.jsonl", rows))
    if kind == "records":
        return iter(rows)
    if kind == "parquet":
        import pyarrow.parquet

        pyarrow.parquet.write_table(_arrow_table(rows), folder / "in.parquet", row_group_size=3)
        return str(folder / "in.parquet")
    import datasets

    dataset = datasets.Dataset(_arrow_table(rows))
    if kind == "hf_dataset":
        return dataset
    if kind == "hf_iterable":
        return dataset.to_iterable_dataset()
    dataset.save_to_disk(str(folder / "saved"))
    return HFDiskDataset(str(folder / "saved"))


def _arrow_table(rows: list):
    """``text`` as a list-of-strings column (rows come from :func:`_rows_for`)."""
    import pyarrow

    return pyarrow.table(
        {
            "text": pyarrow.array(
                [row["text"] for row in rows], type=pyarrow.list_(pyarrow.string())
            ),
            "title": [row["title"] for row in rows],
        }
    )


def _rows_for(kind: str, rows: list) -> list:
    """Parquet/HF store ``text`` as a list column: the same documents, the same sentences,
    except that a missing key becomes a null (counted as a bad value instead)."""
    if kind in ("jsonl", "records"):
        return rows
    return [
        {
            "text": r["text"]
            if isinstance(r.get("text"), list)
            else (None if r.get("text") is None else [r["text"]]),
            "title": r["title"],
        }
        for r in rows
    ]


@pytest.mark.parametrize("kind", CONTAINERS)
def test_every_container_gives_the_jsonl_bytes_and_counts(tmp_path, records, kind, hf_path):
    rows = _rows_for(kind, records)
    reference = preprocess(
        str(write_jsonl(tmp_path / "ref.jsonl", rows)),
        str(tmp_path / "ref"),
        f"hf:{hf_path}",
        json_keys=["text", "title"],
        append_eod=True,
        policy=SKIP_ALL,
        show_progress=False,
    )
    summary = preprocess(
        _container(kind, rows, tmp_path),
        str(tmp_path / "out"),
        f"hf:{hf_path}",
        json_keys=["text", "title"],
        append_eod=True,
        policy=SKIP_ALL,
        workers=2 if kind == "parquet" else 1,
        show_progress=False,
    )
    assert summary.skipped == reference.skipped and summary.skipped_total > 0
    assert summary.documents == reference.documents and summary.tokens == reference.tokens
    for key in ("text", "title"):
        for ext in ("bin", "idx"):
            assert filecmp.cmp(
                tmp_path / f"ref_{key}_document.{ext}",
                tmp_path / f"out_{key}_document.{ext}",
                shallow=False,
            )
    with IndexedDataset(str(tmp_path / "out_text_document")) as dataset:
        per_document = numpy.diff(dataset.document_indices).tolist()
    assert per_document[1:3] == [0, 2]  # the empty text: no sequence; the list: two


def test_texts_from_python_are_documents(tmp_path):
    texts = ["alpha", "", "beta gamma"]
    summary = preprocess(iter(texts), str(tmp_path / "t"), "bytes", append_eod=True)
    with IndexedDataset(str(tmp_path / "t_text_document")) as dataset:
        assert dataset.document_indices.tolist() == [0, 1, 1, 2]
        assert bytes(numpy.asarray(dataset[1][:-1], dtype=numpy.uint8)) == b"beta gamma"
    assert summary.documents == 3


def test_a_python_text_with_a_lone_surrogate_fails_naming_the_row(tmp_path):
    with pytest.raises(
        PreprocessError,
        match=r"records row 2: key 'text' holds a lone UTF-16 "
        r"surrogate",
    ):
        preprocess(iter(["fine", "bad \ud800 text"]), str(tmp_path / "s"), "bytes")
    assert not list(tmp_path.iterdir())


def test_parquet_without_the_column_names_file_and_key(tmp_path):
    import pyarrow
    import pyarrow.parquet

    pyarrow.parquet.write_table(pyarrow.table({"body": ["a", "b"]}), tmp_path / "x.parquet")
    with pytest.raises(PreprocessError, match=r"x.parquet row 1: JSON key 'text' is missing"):
        preprocess(str(tmp_path / "x.parquet"), str(tmp_path / "o"), "bytes")
    summary = preprocess(
        str(tmp_path / "x.parquet"),
        str(tmp_path / "o"),
        "bytes",
        policy=Policy(on_missing_key="skip"),
    )
    assert summary.skipped == {("missing_key", "text"): 2}


def test_a_dataset_dict_needs_a_split(tmp_path):
    import datasets

    splits = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": ["a"]}),
            "test": datasets.Dataset.from_dict({"text": ["b"]}),
        }
    )
    splits.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(PreprocessError, match=r"splits \['train', 'test'\].*--hf-split"):
        preprocess(HFDiskDataset(str(tmp_path / "dd")), str(tmp_path / "o"), "bytes")
    preprocess(HFDiskDataset(str(tmp_path / "dd"), "test"), str(tmp_path / "o"), "bytes")
    with IndexedDataset(str(tmp_path / "o_text_document")) as dataset:
        assert dataset[0].tolist() == [98]
    with pytest.raises(PreprocessError, match="DatasetDict holds splits"):
        preprocess(splits, str(tmp_path / "p"), "bytes")


@pytest.mark.parametrize("cuts", [[0.5], [0.13, 0.5, 0.77], [0.0, 0.999]])
def test_byte_ranges_together_give_the_whole_file(tmp_path, records, cuts):
    path = write_jsonl(
        tmp_path / "in.jsonl", [r for r in records if isinstance(r.get("text"), str)]
    )
    size = path.stat().st_size
    bounds = [0] + [int(size * cut) for cut in cuts] + [size]
    preprocess(str(path), str(tmp_path / "whole"), "bytes", append_eod=True)
    pieces = []
    for number, (start, stop) in enumerate(zip(bounds, bounds[1:])):
        prefix = str(tmp_path / f"r{number}")
        preprocess(FileRange(str(path), start, stop), prefix, "bytes", append_eod=True)
        with IndexedDataset(f"{prefix}_text_document") as dataset:
            pieces += [dataset[i].tolist() for i in range(len(dataset))]
    with IndexedDataset(str(tmp_path / "whole_text_document")) as dataset:
        assert pieces == [dataset[i].tolist() for i in range(len(dataset))]


def test_byte_range_errors_name_the_real_line(tmp_path):
    path = write_jsonl(
        tmp_path / "in.jsonl", [{"text": "a"}] * 10 + ['{"text": '] + [{"text": "b"}]
    )
    with pytest.raises(PreprocessError, match=r"in.jsonl:11: malformed JSON"):
        preprocess(FileRange(str(path), 30, path.stat().st_size), str(tmp_path / "o"), "bytes")


@pytest.mark.parametrize("sequential", [False, True])
def test_partitions_deal_records_across_files_as_megatron(tmp_path, sequential):
    """Record i of all inputs together goes to part i % P (Megatron's index runs on across
    files); the parts are concatenated in order.  Sequential keeps the input order."""
    rows = [{"text": f"document number {i}"} for i in range(11)]
    first = write_jsonl(tmp_path / "a.jsonl", rows[:5])
    second = write_jsonl(tmp_path / "b.jsonl", rows[5:])
    preprocess(
        [str(first), str(second)],
        str(tmp_path / "p"),
        "bytes",
        partitions=3,
        keep_sequential_samples=sequential,
        workers=2,
        chunk_bytes=30,
    )
    order = (
        list(range(11))
        if sequential
        else [i for part in range(3) for i in range(11) if i % 3 == part]
    )
    with IndexedDataset(str(tmp_path / "p_text_document")) as dataset:
        texts = [
            bytes(numpy.asarray(dataset[i], dtype=numpy.uint8)).decode()
            for i in range(len(dataset))
        ]
    assert texts == [rows[i]["text"] for i in order]
    assert [p.name for p in tmp_path.iterdir() if "partition" in p.name] == []


def test_cli_reads_a_saved_hf_dataset(tmp_path, capsys):
    import datasets
    from tokenloom.cli.main import main

    datasets.Dataset.from_dict({"text": ["one", "", "three"]}).save_to_disk(str(tmp_path / "d"))
    assert (
        main(
            [
                "preprocess",
                "--hf-dataset",
                str(tmp_path / "d"),
                "--output-prefix",
                str(tmp_path / "o"),
                "--tokenizer",
                "bytes",
                "--append-eod",
                "--no-progress",
            ]
        )
        == 0
    )
    assert "3 documents" in capsys.readouterr().out
    with IndexedDataset(str(tmp_path / "o_text_document")) as dataset:
        assert dataset.document_indices.tolist() == [0, 1, 1, 2]

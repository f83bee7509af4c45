"""The run summary's last line: what was read, named as what it is, and a readable rate."""

from __future__ import annotations

import re

import pytest
from tests.preprocess._preprocess_helpers import write_jsonl

from tokenloom.preprocess import preprocess


@pytest.mark.parametrize(
    "nbytes, seconds, text",
    [
        (812, 1.0, "812 B/s"),
        (3_400, 1.0, "3.4 kB/s"),
        (12_500_000, 1.0, "12.5 MB/s"),
        (1_204_000_000, 1.0, "1.20 GB/s"),
        (5_000, 0.5, "10.0 kB/s"),
        (999, 1.0, "999 B/s"),
        (1_000, 1.0, "1.0 kB/s"),
        (0, 0.0, "0 B/s"),
    ],
)
def test_the_rate_takes_the_unit_that_shows_it(nbytes, seconds, text):
    from tokenloom.preprocess.summary import rate_text

    assert rate_text(nbytes, seconds) == text


def _done(summary) -> str:
    return summary.lines()[-1]


def test_a_small_file_gets_a_rate_above_zero(tmp_path, hf_path, corpus_records):
    path = write_jsonl(tmp_path / "in.jsonl", corpus_records[:3])
    done = _done(preprocess(str(path), str(tmp_path / "o"), f"hf:{hf_path}"))
    assert done.startswith("done: 3 documents, ") and " from 3 lines in 1 file, " in done
    rate = re.search(r"\((\d+(?:\.\d+)?) (B|kB|MB|GB)/s, ", done)
    assert rate and float(rate[1]) >= 1, done


def test_records_in_memory_are_not_lines_of_a_file(tmp_path, hf_path, corpus_records):
    records = corpus_records[:206]
    done = _done(preprocess(iter(records), str(tmp_path / "o"), f"hf:{hf_path}"))
    assert f" from {len(records)} records (a Python iterable), " in done, done
    assert " lines " not in done and " file" not in done


def test_a_hugging_face_dataset_is_named_as_one(tmp_path, hf_path, corpus_records):
    datasets = pytest.importorskip("datasets")
    table = {"text": [record["text"] for record in corpus_records]}
    dataset = datasets.Dataset.from_dict(table)
    done = _done(preprocess(dataset, str(tmp_path / "o"), f"hf:{hf_path}"))
    assert f" from {len(dataset)} records (a dataset in memory), " in done, done
    dataset.save_to_disk(str(tmp_path / "saved"))
    from tokenloom.preprocess.sources import HFDiskDataset

    saved = HFDiskDataset(str(tmp_path / "saved"))
    done = _done(preprocess(saved, str(tmp_path / "d"), f"hf:{hf_path}"))
    assert f" records (the dataset saved in {tmp_path / 'saved'}), " in done, done

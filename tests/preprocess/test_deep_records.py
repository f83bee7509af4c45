"""JSONL records nested just below the parser's recursion limit (issue 18, class 5).

A record deep enough that ``json.loads`` fails is a malformed line (tests/preprocess/
test_hostile.py); one a few levels shallower parses, and then the error message's preview
of it must not recurse past the limit either: every such record is counted by the
bad-record policy, whatever depth the parser happened to stop at."""

from __future__ import annotations

import pytest
from tests.preprocess._preprocess_helpers import write_jsonl

from tokenloom.preprocess import Policy, preprocess

DEPTHS = range(850, 1001)


def _lines(keyed: bool) -> list:
    deep = ["[" * n + "]" * n for n in DEPTHS]
    return ['{"text": ' + line + "}" if keyed else line for line in deep]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("keyed", [False, True], ids=["record", "value"])
@pytest.mark.processes
def test_records_near_the_recursion_limit_follow_the_policy(tmp_path, workers, keyed):
    path = write_jsonl(tmp_path / "deep.jsonl", [{"text": "fine"}, *_lines(keyed)])
    policy = Policy(on_bad_json="skip", on_bad_type="skip")
    summary = preprocess(str(path), str(tmp_path / "o"), "bytes", workers=workers, policy=policy)
    assert summary.documents == 1
    assert sum(summary.skipped.values()) == len(DEPTHS)
    assert set(summary.skipped) <= {("bad_json", ""), ("bad_type", "text")}

"""The Ray engine's summary and live counts (no Ray needed)."""

from __future__ import annotations

from pathlib import Path

from tokenloom.preprocess.ray_engine.report import RaySummary, inflight_tokens
from tokenloom.preprocess.summary import OutputStats


def _marker(index: int, docs: int, tokens: int, skipped: list) -> dict:
    return {
        "shard": f"shard-{index:05d}-of-00020",
        "counts": {
            "outputs": {"text": {"documents": docs, "tokens": tokens}},
            "line_count": docs + 1,
            "blank_lines": 1,
            "nbytes": 10,
            "disk_bytes": 10,
            "skipped": skipped,
            "dtype": "uint16",
            "seconds": 0.1 * (index + 1),
        },
    }


def test_summary_adds_shards_and_says_what_was_reused() -> None:
    summary = RaySummary(2, "", {"text": OutputStats("text", "out_text_document")})
    for index in range(20):
        summary.add_shard(
            _marker(index, 3, 30, [["bad_json", "", 1]]),
            f"a.jsonl[{index}]",
            10,
            reused=index < 3,
            attempts=2 if index == 5 else 1,
        )
    assert (summary.documents, summary.tokens, summary.blank_lines) == (60, 600, 20)
    assert summary.skipped[("bad_json", "")] == 20
    assert summary.reused == 3 and summary.retries == 1
    text = "\n".join(summary.lines())
    assert "3 of 20 shards reused, 1 retry" in text
    assert "... 4 more shards; per-shard time min" in text
    assert "2 attempts" in text and "reused" in text
    assert "skipped: 20 malformed JSON lines, 20 blank lines" in text


def test_inflight_tokens_counts_the_temporary_data_files(tmp_path: Path) -> None:
    assert inflight_tokens(str(tmp_path), 2) == 0  # no tmp/ yet
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp" / ".shard-00000-of-00002_text_document.bin.abc.tmp").write_bytes(b"x" * 10)
    (tmp_path / "tmp" / "shard-00001-of-00002.idx.tmp").write_bytes(b"x" * 99)
    assert inflight_tokens(str(tmp_path), 2) == 5

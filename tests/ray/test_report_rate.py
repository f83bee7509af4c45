"""The Ray summary's merge rate takes a unit that shows it (no Ray needed)."""

from __future__ import annotations

from tokenloom.preprocess.ray_engine.report import RaySummary
from tokenloom.preprocess.summary import OutputStats


def test_a_small_merge_is_not_reported_as_zero_gb_per_s() -> None:
    summary = RaySummary(1, "uint16", {"text": OutputStats("text", "out_text_document")})
    summary.merge_bytes, summary.merge_seconds, summary.seconds = 42_620, 0.01, 26.0
    done = summary.lines()[-1]
    assert ", merge 4.3 MB/s; " in done, done
    summary.merge_bytes, summary.merge_seconds = 3_000_000_000, 2.0
    assert ", merge 1.50 GB/s; " in summary.lines()[-1]

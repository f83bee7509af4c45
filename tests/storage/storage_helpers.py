"""Constants and helpers shared by the object-storage tests."""

from __future__ import annotations

from pathlib import Path

BUCKET = "loom-data"
MSC_PROFILE = "loom"
MSC_PROXY_PROFILE = "loomproxy"


def storage_config(tmp_path: Path, **overrides):
    """An ObjectStorageConfig with fast retries for tests."""
    from tokenloom.storage import ObjectStorageConfig, RetryPolicy

    retry = overrides.pop(
        "retry",
        RetryPolicy(
            max_attempts=4,
            initial_backoff_s=0.01,
            max_backoff_s=0.05,
            throttle_backoff_s=0.02,
            connect_timeout_s=2,
            read_timeout_s=2,
        ),
    )
    return ObjectStorageConfig(
        path_to_idx_cache=str(tmp_path / "idx-cache"), retry=retry, **overrides
    )

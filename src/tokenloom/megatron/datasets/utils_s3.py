"""``megatron.core.datasets.utils_s3``: megatron-core's older home of the S3 names."""

from __future__ import annotations

from tokenloom.megatron.datasets.object_storage_utils import S3_PREFIX, S3Client

__all__ = ["S3Client", "S3_PREFIX"]

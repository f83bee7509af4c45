"""``megatron.core.datasets.utils``: Split, blends, and the helpers' (absent) build."""

from __future__ import annotations

import logging
from typing import Any

from tokenloom.datasets.split import Split, normalize
from tokenloom.datasets.utils import get_blend_from_list
from tokenloom.process_caches import ONE_TIME_NOTICES

__all__ = ["Split", "compile_helpers", "get_blend_from_list", "log_single_rank", "normalize"]

logger = logging.getLogger(__name__)


def compile_helpers() -> None:
    """Megatron's runtime C++ build of ``helpers_cpp``: nothing to build here.

    tokenloom's index kernels are numba (compiled on first use, or ahead of time with
    ``tokenloom warmup``), so this is a no-op; it says so once per process.
    """
    if ONE_TIME_NOTICES.get("compile_helpers") is None:
        ONE_TIME_NOTICES.put("compile_helpers", True)
        logger.info(
            "compile_helpers(): nothing to compile, tokenloom's index kernels need no C++ "
            "build (numba; `tokenloom warmup` compiles them ahead of time)"
        )


def log_single_rank(logger: logging.Logger, *args: Any, rank: int = 0, **kwargs: Any) -> None:
    """``logger.log(*args, **kwargs)`` on global rank ``rank`` only (every process when
    torch.distributed is not initialised), as ``megatron.core.utils.log_single_rank``."""
    try:
        import torch.distributed as dist

        here = dist.get_rank() if dist.is_available() and dist.is_initialized() else rank
    except ImportError:
        here = rank
    if here == rank:
        logger.log(*args, **kwargs)

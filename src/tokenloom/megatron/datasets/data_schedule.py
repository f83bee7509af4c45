"""``megatron.core.datasets.data_schedule``: hybrid context parallel scheduling.

``HybridCPDataLoaderWrapper`` and ``BalancedCPScheduler`` are tokenloom's (golden-exact
with megatron-core 0.16.1, CPU/gloo and CUDA/NCCL). ``ProcessGroupCollection`` is
megatron-core's where it is installed, else tokenloom's (``tokenloom.packing``).
"""

from __future__ import annotations

from typing import Any

from tokenloom.packing import BalancedCPScheduler, HybridCPDataLoaderWrapper

__all__ = [
    "BalancedCPScheduler",
    "HybridCPDataLoaderWrapper",
    "ProcessGroupCollection",  # noqa: F822 - module __getattr__
]


def __getattr__(name: str) -> Any:
    """``ProcessGroupCollection``: megatron-core's if importable, else tokenloom's."""
    if name == "ProcessGroupCollection":
        try:
            from megatron.core.process_groups_config import ProcessGroupCollection
        except Exception:  # noqa: BLE001 - no megatron-core here (or it fails to import)
            from tokenloom.packing import ProcessGroupCollection
        return ProcessGroupCollection
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

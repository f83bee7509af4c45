"""``megatron.core.datasets.multimodal_dataset``: megatron-core's mock multimodal dataset.

``MultimodalDatasetConfig`` adds the image size and an optional per-sample function to
``GPTDatasetConfig``; ``MockMultimodalDataset`` is a ``MockGPTDataset`` whose samples
also hold a zero ``image`` tensor ``[3, image_h, image_w]`` (float32), passed through
``preprocess_func``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from tokenloom.errors import ConfigError
from tokenloom.megatron.datasets.gpt_dataset import GPTDatasetConfig, MockGPTDataset
from tokenloom.megatron.errors import translate_errors

__all__ = ["GPTDatasetConfig", "MockGPTDataset", "MockMultimodalDataset", "MultimodalDatasetConfig"]


def _unchanged(x: dict[str, Any]) -> dict[str, Any]:
    return x


@translate_errors("__post_init__")
@dataclass
class MultimodalDatasetConfig(GPTDatasetConfig):
    """Configuration of megatron-core's multimodal datasets."""

    image_h: Optional[int] = None
    """Image height (pixels, >= 1; required)."""

    image_w: Optional[int] = None
    """Image width (pixels, >= 1; required)."""

    preprocess_func: Callable[[dict[str, Any]], dict[str, Any]] = _unchanged
    """Applied to every sample (a dict of tensors) before it is returned."""

    def __post_init__(self) -> None:
        """GPTDatasetConfig's checks, then the image size."""
        super().__post_init__()
        for name in ("image_h", "image_w"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={value!r}: must be a positive integer (pixels)")
        if not callable(self.preprocess_func):
            raise ConfigError(f"preprocess_func={self.preprocess_func!r}: must be callable")


class MockMultimodalDataset(MockGPTDataset):
    """A mock text sample plus a zero image (see the module docstring)."""

    def __getitem__(self, idx: Optional[int]) -> dict[str, Any]:
        """Sample ``idx`` with ``image``, through ``config.preprocess_func``."""
        import torch

        config: Any = self.config
        sample = super().__getitem__(idx)
        sample["image"] = torch.zeros((3, config.image_h, config.image_w), dtype=torch.float32)
        result: dict[str, Any] = config.preprocess_func(sample)
        return result

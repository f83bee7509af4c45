"""``ToTensor`` as torchvision defines it: an HWC image (PIL or numpy) to a CHW tensor."""

from __future__ import annotations

import numpy
import torch


class ToTensor:
    """Convert a PIL image or an ``H x W x C`` numpy array to a ``C x H x W`` tensor;
    ``uint8`` data is scaled to floats in ``[0, 1]``."""

    def __call__(self, picture):  # type: ignore[no-untyped-def]
        array = numpy.array(picture, copy=True)
        if array.ndim == 2:
            array = array[:, :, None]
        tensor = torch.from_numpy(array.transpose(2, 0, 1).copy())
        if tensor.dtype == torch.uint8:
            return tensor.float().div(255)
        return tensor

    def __repr__(self) -> str:
        return "ToTensor()"

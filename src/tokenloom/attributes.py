"""Reading attributes of objects tokenloom does not own: tokenizers, configs, datasets.

``getattr(obj, name, default)`` and ``hasattr`` catch only ``AttributeError``. The
objects users pass are not that polite: every Megatron tokenizer (``_GPT2BPETokenizer``,
``_NullTokenizer``, any ``MegatronTokenizer`` subclass) raises ``NotImplementedError``
from ``pad``, ``bos`` or ``mask`` when it has no such token, and a property may raise
anything. megatron-core's rule is that an attribute whose read raises is absent; the two
functions here apply it, and ``tests/test_attributes.py`` holds every module of the
package to them (a three-argument ``getattr`` or a ``hasattr`` on anything but a
module fails that test).
"""

from __future__ import annotations

from typing import Any

__all__ = ["read_attribute", "has_attribute"]


def read_attribute(obj: Any, name: str, default: Any = None) -> Any:
    """``obj.name``, or ``default`` when it is absent or reading it raises anything.

    ``Exception`` only: ``KeyboardInterrupt`` and ``SystemExit`` still propagate.
    """
    try:
        return getattr(obj, name)
    except Exception:  # noqa: BLE001 - megatron-core's rule: a read that raises is absent
        return default


def has_attribute(obj: Any, name: str) -> bool:
    """Whether ``obj.name`` can be read without raising (``hasattr`` that also treats
    ``NotImplementedError`` and every other exception as absent)."""
    try:
        getattr(obj, name)
    except Exception:  # noqa: BLE001 - as read_attribute
        return False
    return True

"""Started by Python for the Megatron-LM test harness (``scripts/megatron`` on PYTHONPATH).

Megatron-LM main uses ``typing.override`` (Python >= 3.12); the CPU torch build the
project pins is for Python 3.11, so ``typing_extensions.override`` stands in where the
name is missing. Nothing else is changed.
"""

import typing

if not hasattr(typing, "override"):
    try:
        from typing_extensions import override
    except ImportError:
        pass
    else:
        typing.override = override

"""Every public name of megatron-core 0.16.1's datasets modules, with Megatron's signature.

megatron-core's surface (names, signatures, class methods and hooks, dataclass fields,
enum members; ``tests/support/megatron_api.py``) is read in one subprocess, and the
compat layer's under the same names in another (``install()`` first, megatron-core on
the path: the names tokenloom re-exports from megatron-core's other packages are then
megatron-core's own). A call valid for megatron-core's must be valid for tokenloom's:
same parameters in the same order and kinds, defaults where megatron-core has them,
and only defaulted extras. Without megatron-core every name must still exist.
"""

from __future__ import annotations

import json

import pytest
from tests.support.megatron_api import MODULES, differences
from tests.support.megatron_core import require_megatron, run_json

pytestmark = [pytest.mark.megatron, pytest.mark.timeout(600)]

DESCRIBE = r"""
import importlib, json, sys
from tests.support.megatron_api import MODULES, describe_module
names = json.loads(sys.argv[1]) if len(sys.argv) > 1 else None
if names is not None:
    import tokenloom.megatron
    tokenloom.megatron.install()
out = {}
for short in MODULES:
    module = importlib.import_module("megatron.core.datasets." + short)
    out[short] = describe_module(module, short, None if names is None else names[short])
    out[short]["__module__"] = {"kind": "value", "value": module.__name__}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def surfaces():
    require_megatron()
    theirs = run_json(DESCRIBE)
    names = {short: sorted(k for k in theirs[short] if k != "__module__") for short in MODULES}
    ours = run_json(DESCRIBE, json.dumps(names))
    return theirs, ours


def test_the_layer_serves_every_module(surfaces):
    _, ours = surfaces
    for short in MODULES:
        assert ours[short]["__module__"]["value"] == f"tokenloom.megatron.datasets.{short}"


@pytest.mark.parametrize("short", MODULES)
def test_every_public_name_has_megatrons_signature(surfaces, short):
    theirs, ours = surfaces
    their = {k: v for k, v in theirs[short].items() if k != "__module__"}
    problems = differences(their, ours[short], short)
    assert not problems, "\n".join(problems)


def test_every_name_exists_without_megatron_core(surfaces):
    theirs, _ = surfaces
    names = {short: sorted(k for k in theirs[short] if k != "__module__") for short in MODULES}
    missing = run_json(
        r"""
import importlib, json, sys
import tokenloom.megatron
tokenloom.megatron.install()
names = json.loads(sys.argv[1])
print(json.dumps({short: [n for n in wanted if not hasattr(
    importlib.import_module("megatron.core.datasets." + short), n)] for short, wanted in names.items()}))
""",
        json.dumps(names),
        with_megatron=False,
    )
    assert missing == {short: [] for short in MODULES}

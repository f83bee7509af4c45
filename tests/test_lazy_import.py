"""tokenloom's top level is lazy (PEP 562): importing a layer loads that layer, not the
builder, object storage or torch.distributed above or beside it.  Each check runs a
fresh interpreter, since this one has long loaded everything."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import tokenloom

INIT = Path(tokenloom.__file__)
HEAVY = ("tokenloom.builder", "tokenloom.storage", "tokenloom.distributed", "torch")

pytestmark = pytest.mark.timeout(120)


def loaded_after(code: str) -> list[str]:
    """The modules loaded in a fresh interpreter after running ``code``."""
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=100
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def of(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)]


@pytest.mark.processes
def test_import_tokenloom_loads_almost_nothing():
    modules = loaded_after("import tokenloom")
    assert of(modules, ("tokenloom",)) == ["tokenloom", "tokenloom._version"]
    assert of(modules, ("numpy", "torch")) == []


@pytest.mark.processes
def test_import_tokenloom_format_loads_no_builder_storage_or_distributed():
    modules = loaded_after("import tokenloom.format")
    assert "tokenloom.format.reader" in modules  # the check sees the format layer
    assert of(modules, HEAVY) == []


@pytest.mark.processes
def test_reading_a_local_pair_loads_no_storage(tmp_path):
    code = (
        "from tokenloom.format import IndexedDataset, IndexedDatasetBuilder\n"
        f"prefix = {str(tmp_path / 'corpus')!r}\n"
        "builder = IndexedDatasetBuilder(prefix + '.bin')\n"
        "builder.add_document([1, 2, 3], [3])\n"
        "builder.finalize(prefix + '.idx')\n"
        "dataset = IndexedDataset(prefix)\n"
        "assert dataset[0].tolist() == [1, 2, 3] and dataset.file_identity() is not None\n"
        "assert not IndexedDataset.exists(prefix + '-missing')\n"
    )
    assert of(loaded_after(code), HEAVY) == []


@pytest.mark.processes
def test_every_exported_name_is_importable_and_seen_by_type_checkers():
    names = [n for n in tokenloom.__all__ if n != "__version__"]
    code = f"from tokenloom import {', '.join(tokenloom.__all__)}\n"
    modules = loaded_after(code)
    assert "tokenloom.builder" in modules  # the builder came in only when asked for
    for name in names:
        value = getattr(tokenloom, name)
        assert getattr(sys.modules[value.__module__], name) is value
    assert set(tokenloom.__all__) <= set(dir(tokenloom))
    assert tokenloom.__version__ == tokenloom._version.__version__
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        _ = tokenloom.not_a_name  # type: ignore[attr-defined]
    assert sorted(type_checking_names()) == sorted(names)


def type_checking_names() -> list[str]:
    """The names ``tokenloom/__init__.py`` imports under ``if TYPE_CHECKING:``."""
    found = []
    for node in ast.parse(INIT.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for item in node.body:
                if isinstance(item, ast.ImportFrom):
                    found.extend(alias.asname or alias.name for alias in item.names)
    return found


def test_format_knows_the_remote_prefixes_of_storage():
    from tokenloom.format import remote
    from tokenloom.storage.urls import REMOTE_PREFIXES

    assert remote.REMOTE_PREFIXES == REMOTE_PREFIXES
    for path in ("s3://b/k", "msc://p/k", "/data/s3://x", "data", "gs://b/k"):
        assert remote.is_remote(path) == path.startswith(REMOTE_PREFIXES)

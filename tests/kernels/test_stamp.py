"""kernels/stamp.py: a changed kernel source drops numba's cached machine code."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tokenloom.kernels import stamp

HERE = Path(stamp.__file__).resolve().parent


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the kernel sources with a filled cache folder of fake numba files."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    folder = tmp_path / "kernels"
    folder.mkdir()
    for source in HERE.glob("*.py"):
        shutil.copy(source, folder / source.name)
    return folder


def _fill(folder: Path) -> list[Path]:
    cache = folder / "__pycache__"
    cache.mkdir(exist_ok=True)
    files = [cache / "batch.fill_batch-1.py311.nbi", cache / "batch.fill_batch-1.py311.1.nbc"]
    for path in files:
        path.write_bytes(b"machine code")
    (cache / "batch.cpython-311.pyc").write_bytes(b"bytecode")
    return files


def test_first_call_clears_then_unchanged_sources_keep_the_cache(package: Path) -> None:
    files = _fill(package)
    assert sorted(stamp.refresh(package)) == sorted(files)  # no stamp yet
    assert (package / "__pycache__" / "batch.cpython-311.pyc").exists()  # only numba's
    again = _fill(package)
    assert stamp.refresh(package) == []
    assert all(path.exists() for path in again)


def test_a_changed_helper_module_clears_every_kernel_cache(package: Path) -> None:
    stamp.refresh(package)
    files = _fill(package)
    helper = package / "attribution.py"  # called by batch.py: numba would miss this
    helper.write_text(helper.read_text() + "\n# changed\n")
    assert sorted(stamp.refresh(package)) == sorted(files)
    assert not any(path.exists() for path in files)
    assert (package / "__pycache__" / stamp.STAMP_NAME).read_text().strip() == (
        stamp.source_digest(package)
    )


def test_a_cache_dir_elsewhere_or_a_read_only_folder_is_left_alone(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _fill(package)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(package / "elsewhere"))
    assert stamp.refresh(package) == []
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    if os.geteuid() != 0:  # root writes anywhere
        os.chmod(package, 0o555)
        try:
            assert stamp.refresh(package) == []
        finally:
            os.chmod(package, 0o755)
    assert all(path.exists() for path in files)


def test_digest_covers_names_and_bytes(package: Path) -> None:
    before = stamp.source_digest(package)
    (package / "rules.py").rename(package / "rules2.py")
    assert stamp.source_digest(package) != before

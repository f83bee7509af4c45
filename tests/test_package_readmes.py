"""The guide's "a README beside each package's code", held: every folder of
``src/tokenloom`` (the package itself included) has a ``README.md`` whose module table
names exactly the modules and sub-packages that the folder holds.

A module added without a row, a row left behind by a removed or renamed module, and a
package without a README each fail here, naming the folder and the names.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src" / "tokenloom"
_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|", re.MULTILINE)


def packages(root: Path) -> list[Path]:
    """Every package folder under ``root`` (``root`` first): folders with an ``__init__.py``."""
    return sorted(p.parent for p in root.rglob("__init__.py"))


def expected_rows(folder: Path) -> set[str]:
    """What a folder's README must list: its ``.py`` modules and ``name/`` per sub-package."""
    modules = {p.name for p in folder.glob("*.py")}
    subs = {f"{p.name}/" for p in folder.iterdir() if (p / "__init__.py").is_file()}
    return modules | subs


def listed_rows(readme: Path) -> set[str]:
    """The first-column names of the README's table rows (``| `name` | ... |``)."""
    return set(_ROW.findall(readme.read_text(encoding="utf-8")))


def test_the_package_tree_is_found():
    found = {p.relative_to(SOURCE).as_posix() for p in packages(SOURCE)}
    assert {".", "format", "training", "megatron/datasets", "preprocess/ray_engine"} <= found


@pytest.mark.parametrize("folder", packages(SOURCE), ids=lambda p: p.relative_to(SOURCE).as_posix())
def test_every_package_has_a_readme_listing_its_modules(folder: Path):
    readme = folder / "README.md"
    where = folder.relative_to(SOURCE.parent).as_posix()
    assert readme.is_file(), f"{where} has no README.md: add one with a row per module"
    listed, expected = listed_rows(readme), expected_rows(folder)
    assert not expected - listed, f"{where}/README.md lacks rows for {sorted(expected - listed)}"
    assert not listed - expected, (
        f"{where}/README.md lists what is not there: {sorted(listed - expected)}"
    )


def test_the_check_sees_a_missing_and_a_stale_row(tmp_path: Path):
    (tmp_path / "__init__.py").write_text('"""A package."""\n')
    (tmp_path / "kept.py").write_text('"""Kept."""\n')
    (tmp_path / "README.md").write_text("| module | owns |\n| --- | --- |\n| `gone.py` | x |\n")
    assert expected_rows(tmp_path) - listed_rows(tmp_path / "README.md") == {
        "__init__.py",
        "kept.py",
    }
    assert listed_rows(tmp_path / "README.md") - expected_rows(tmp_path) == {"gone.py"}

"""Attributes of user objects are read with tokenloom.attributes, never with hasattr or a
three-argument getattr (both let any exception but AttributeError escape)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tokenloom.attributes import has_attribute, read_attribute

SOURCE = Path(__file__).resolve().parents[1] / "src" / "tokenloom"
MODULES_ALLOWED = {"os", "signal"}  # getattr(os, "O_CLOEXEC", 0): modules, not user objects


def offending_calls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        first = node.args[0] if node.args else None
        if isinstance(first, ast.Name) and first.id in MODULES_ALLOWED:
            continue
        if (node.func.id == "getattr" and len(node.args) == 3) or node.func.id == "hasattr":
            found.append(f"{path.relative_to(SOURCE.parent)}:{node.lineno} {node.func.id}")
    return found


def test_no_module_reads_user_attributes_with_getattr_or_hasattr():
    offending = [
        hit
        for path in sorted(SOURCE.rglob("*.py"))
        if path.name != "attributes.py"
        for hit in offending_calls(path)
    ]
    assert not offending, "use tokenloom.attributes.read_attribute/has_attribute:\n" + "\n".join(
        offending
    )


def test_the_rule_sees_a_violation(tmp_path):
    bad = SOURCE / "__rule_probe__.py"
    try:
        bad.write_text("def f(t):\n    return getattr(t, 'pad', None) or hasattr(t, 'x')\n")
        assert len(offending_calls(bad)) == 2
    finally:
        bad.unlink()


class Rude:
    @property
    def pad(self):
        raise NotImplementedError("no pad")

    @property
    def broken(self):
        raise RuntimeError("broken")

    eod = 7


@pytest.mark.parametrize("name", ["pad", "broken", "missing"])
def test_a_read_that_raises_is_absent(name):
    assert read_attribute(Rude(), name, "default") == "default"
    assert not has_attribute(Rude(), name)


def test_present_attributes_are_read():
    assert read_attribute(Rude(), "eod") == 7 and has_attribute(Rude(), "eod")


def test_interrupts_still_propagate():
    class Interrupting:
        @property
        def pad(self):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        read_attribute(Interrupting(), "pad")

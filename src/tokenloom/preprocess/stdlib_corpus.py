"""Real text that every Python installation has: its own standard library.

Two corpora, used by ``tokenloom demo`` and ``benchmarks/bench_preprocess.py``:

* ``code``: each module's source file is one document;
* ``docs``: each module, class and function docstring (extracted with :mod:`ast`) is
  one document.

Test packages and ``site-packages`` are left out; files are taken in sorted path
order, so the corpora are the same on every run of the same Python.
"""

from __future__ import annotations

import ast
import json
import os
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tokenloom.atomic import atomic_open

_SKIPPED_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}


def stdlib_root() -> Path:
    """Folder of the running interpreter's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_sources(
    max_files: Optional[int] = None, max_bytes: Optional[int] = None
) -> Iterator[tuple[str, str]]:
    """``(relative path, source text)`` of standard-library modules, in sorted order.

    Stops after ``max_files`` files or once ``max_bytes`` characters were yielded.
    Files that are not UTF-8 are left out.
    """
    root = stdlib_root()
    paths = sorted(
        path for path in root.rglob("*.py") if not _SKIPPED_DIRS & set(path.relative_to(root).parts)
    )
    count = size = 0
    for path in paths:
        if max_files is not None and count >= max_files:
            return
        if max_bytes is not None and size >= max_bytes:
            return
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        count += 1
        size += len(text)
        yield path.relative_to(root).as_posix(), text


def docstrings(source: str, filename: str = "<source>") -> list[tuple[str, str]]:
    """``(qualified name, cleaned docstring)`` of a module and its classes and functions."""
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError):
        return []
    found: list[tuple[str, str]] = []

    def visit(node, prefix: str) -> None:
        text = ast.get_docstring(node, clean=True)
        if text:
            found.append((prefix or "<module>", text))
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, f"{prefix}.{child.name}" if prefix else child.name)

    visit(tree, "")
    return found


@dataclass(frozen=True)
class CorpusFiles:
    """The two JSONL files written by :func:`write_stdlib_corpora` and their sizes."""

    code_path: str
    docs_path: str
    code_documents: int
    docs_documents: int
    characters: int


def write_stdlib_corpora(
    out_dir: str, max_files: Optional[int] = None, max_bytes: Optional[int] = None
) -> CorpusFiles:
    """Write ``code.jsonl`` and ``docs.jsonl`` (``{"text", "path"[, "name"]}`` per line)."""
    os.makedirs(out_dir, exist_ok=True)
    code_path, docs_path = os.path.join(out_dir, "code.jsonl"), os.path.join(out_dir, "docs.jsonl")
    code_count = docs_count = characters = 0
    with atomic_open(code_path, "w") as code, atomic_open(docs_path, "w") as docs:
        for rel, text in stdlib_sources(max_files, max_bytes):
            code.write(json.dumps({"text": text, "path": rel}) + "\n")
            code_count += 1
            characters += len(text)
            for name, doc in docstrings(text, rel):
                docs.write(json.dumps({"text": doc, "path": rel, "name": name}) + "\n")
                docs_count += 1
                characters += len(doc)
    return CorpusFiles(code_path, docs_path, code_count, docs_count, characters)


__all__ = ["stdlib_root", "stdlib_sources", "docstrings", "write_stdlib_corpora", "CorpusFiles"]

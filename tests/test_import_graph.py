"""The import graph of tokenloom runs one way: no cycles, counting the imports made
inside function bodies too (read from the source, not from what happens to be loaded)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional

SOURCE = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "tokenloom"


def module_files() -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of the package."""
    modules = {}
    for path in sorted((SOURCE / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SOURCE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> Optional[str]:
    """The longest tokenloom module that ``name`` (a dotted path) names or lies in."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every tokenloom module that ``module`` imports, anywhere in its body."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, module, path.name == "__init__.py")
            # ``from pkg import sub`` imports the submodule when there is one
            targets = [f"{source}.{alias.name}" for alias in node.names] or [source]
            targets = [t if t in modules else source for t in targets]
        else:
            continue
        for target in targets:
            resolved = _resolve(target, modules) if target.startswith(PACKAGE) else None
            if resolved is not None and resolved != module:
                found.add(resolved)
    return found


def graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycle(edges: dict[str, set[str]]) -> Optional[list[str]]:
    """One cycle of the graph (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> Optional[list[str]]:
        state[node] = 1
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_import_graph_has_no_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_cycles_through_function_level_imports(tmp_path):
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    source = "def f():\n    from tokenloom.cache import keys\n"
    path = tmp_path / "m.py"
    path.write_text(source)
    modules = {"tokenloom.cache": path, "tokenloom.cache.keys": path, "tokenloom.m": path}
    assert imports_of("tokenloom.m", path, modules) == {"tokenloom.cache.keys"}


def test_the_graph_sees_the_whole_package():
    edges = graph()
    assert "tokenloom.builder.megatron" in edges and "tokenloom.cache.store" in edges
    assert "tokenloom.cache.keys" in edges["tokenloom.cache.entry"]

"""The import graph of tokenloom runs one way: no cycles, and every import goes down the
ranks of :data:`RANKS`, counting the imports made inside function bodies and under
``if TYPE_CHECKING:`` too (read from the source, not from what happens to be loaded)."""

from __future__ import annotations

import ast
from collections.abc import Iterable
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


# -- ranks ---------------------------------------------------------------------------------
#: The dependency rank of every package and top-level module of tokenloom (the first
#: name after ``tokenloom.``; ``tokenloom`` is the package's own ``__init__``).  A module
#: imports only from its own package and from packages of a *lower* rank; packages of
#: one rank are independent of each other.  docs/architecture.md shows the same table.
RANKS: dict[str, int] = {
    # 0: leaves that import nothing of tokenloom
    "errors": 0,
    "_version": 0,
    # 1: the shared leaves
    "atomic": 1,
    "attributes": 1,
    "process_caches": 1,
    "progress": 1,
    "untrusted_json": 1,
    "plugins": 1,
    # 2: foundations (numba kernels, object storage, tokenizers, rank coordination)
    "kernels": 2,
    "storage": 2,
    "tokenizers": 2,
    "distributed": 2,
    # 3: the token format and the index arrays
    "format": 3,
    "index": 3,
    # 4: the index caches and the provenance sidecar
    "cache": 4,
    "provenance": 4,
    # 5: Megatron's datasets and preprocessing
    "datasets": 5,
    "preprocess": 5,
    # 6: the builder, the training side and sequence packing
    "builder": 6,
    "training": 6,
    "packing": 6,
    # 7: the megatron-core compatibility layer and the command line
    "megatron": 7,
    "cli": 7,
    # 8: the entry points that re-export or run everything
    "tokenloom": 8,
    "__main__": 8,
}


def unit_of(module: str) -> str:
    """The ranked unit ``module`` belongs to: ``tokenloom.format.reader`` → ``format``;
    ``tokenloom`` (the package's ``__init__``) → ``tokenloom``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def unranked(modules: Iterable[str], ranks: dict[str, int]) -> list[str]:
    """The modules whose package (or top-level module) has no rank."""
    return sorted(m for m in modules if unit_of(m) not in ranks)


def rank_violations(edges: dict[str, set[str]], ranks: dict[str, int]) -> list[str]:
    """One line per import against the ranks, naming both modules and both ranks."""
    lines = []
    for module in sorted(edges):
        source = unit_of(module)
        for target in sorted(edges[module]):
            unit = unit_of(target)
            if unit == source or source not in ranks or unit not in ranks:
                continue
            if ranks[unit] >= ranks[source]:
                lines.append(
                    f"{module} ({source}, rank {ranks[source]}) imports {target} "
                    f"({unit}, rank {ranks[unit]}): a module imports only from its own "
                    "package and from lower ranks"
                )
    return lines


def test_every_package_has_a_rank():
    modules = module_files()
    missing = unranked(modules, RANKS)
    assert not missing, (
        "no rank in RANKS (tests/test_import_graph.py and docs/architecture.md) for: "
        + ", ".join(missing)
    )
    units = {unit_of(m) for m in modules}
    assert set(RANKS) <= units, f"ranks of packages that no longer exist: {set(RANKS) - units}"


def test_every_import_goes_down_the_ranks():
    violations = rank_violations(graph(), RANKS)
    assert not violations, "imports against the ranks:\n" + "\n".join(violations)


def test_the_rank_check_sees_function_level_imports_and_new_packages(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from tokenloom.builder import megatron\n")
    modules = {"tokenloom.builder.megatron": path, "tokenloom.format.m": path}
    edges = {"tokenloom.format.m": imports_of("tokenloom.format.m", path, modules)}
    assert rank_violations(edges, RANKS) == [
        "tokenloom.format.m (format, rank 3) imports tokenloom.builder.megatron (builder, "
        "rank 6): a module imports only from its own package and from lower ranks"
    ]
    sideways = {"tokenloom.storage.x": {"tokenloom.distributed.rank0"}}
    assert len(rank_violations(sideways, RANKS)) == 1  # one rank: independent
    downward = {"tokenloom.builder.x": {"tokenloom.storage.urls", "tokenloom.builder.y"}}
    assert rank_violations(downward, RANKS) == []
    assert unranked(["tokenloom.newthing.x", "tokenloom.format"], RANKS) == ["tokenloom.newthing.x"]


def _documented_ranks() -> dict[str, int]:
    """The ranks table of docs/architecture.md: ``| rank | packages |`` rows."""
    doc = SOURCE.parent / "docs" / "architecture.md"
    ranks: dict[str, int] = {}
    for line in doc.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            for name in cells[1].split(","):
                ranks[name.strip().strip("`").removeprefix("tokenloom.") or "?"] = int(cells[0])
    return ranks


def test_the_documented_ranks_are_the_checked_ones():
    assert _documented_ranks() == RANKS

"""The scan behind tests/test_process_caches.py: what in a source tree may hold process
state (module- and class-level mutable values and object instances, ``global``
statements, memoising decorators, fork and exit hooks), and what writes into a name."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

__all__ = ["Finding", "rel", "scan", "scan_tree", "violations", "writes"]

# Calls whose result is immutable (or a type, or a logger): fine at module level.
IMMUTABLE_FACTORIES = {
    "bytes",
    "bytes.maketrans",
    "dataclasses.field",
    "field",
    "frozenset",
    "int",
    "logging.getLogger",
    "MappingProxyType",
    "types.MappingProxyType",
    "namedtuple",
    "NewType",
    "numpy.dtype",
    "numpy.iinfo",
    "numpy.int64",
    "object",
    "range",
    "re.compile",
    "struct.Struct",
    "tuple",
    "TypeVar",
}
MUTABLE_FACTORIES = {
    "bytearray",
    "collections.OrderedDict",
    "Counter",
    "defaultdict",
    "deque",
    "dict",
    "list",
    "OrderedDict",
    "set",
}
REGISTRATIONS = {"register_state", "_declare"}  # module-level calls that register state
ONE_HOME = "process_caches.py"  # the one module that installs fork and exit hooks
HOOKS = {"os.register_at_fork", "atexit.register"}
MEMOISERS = {"cache", "lru_cache", "functools.cache", "functools.lru_cache"}
MUTATORS = {
    "add",
    "append",
    "clear",
    "discard",
    "extend",
    "insert",
    "pop",
    "popitem",
    "remove",
    "setdefault",
    "update",
}


class Finding:
    """One piece of possible process state: where, what kind, and its name."""

    def __init__(self, path: str, line: int, kind: str, name: str) -> None:
        self.path, self.line, self.kind, self.name = path, line, kind, name

    @property
    def key(self) -> str:
        return f"{self.path}:{self.name}"

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind} {self.name}"


def _callee(call: ast.Call) -> str:
    return ast.unparse(call.func)


def _is_mutable_literal(value: ast.AST) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    return isinstance(value, ast.Tuple) and any(_is_mutable_literal(v) for v in value.elts)


def _top_level(body: list[ast.stmt], owner: str = "") -> list[tuple[ast.stmt, str]]:
    """The statements run at import: the module's (and its classes') bodies, including
    the branches of module-level ``if``/``try``/``with``."""
    found: list[tuple[ast.stmt, str]] = []
    for node in body:
        found.append((node, owner))
        if isinstance(node, ast.ClassDef):
            found += _top_level(node.body, f"{owner}{node.name}.")
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            parts = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            parts += [handler.body for handler in getattr(node, "handlers", [])]
            for part in parts:
                found += _top_level(part, owner)
    return found


def _assignment_findings(rel: str, node: ast.stmt, owner: str) -> list[Finding]:
    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
        return []
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    names = [owner + ast.unparse(target) for target in targets]
    if any(name.endswith("__all__") for name in names):
        return []
    value = node.value
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Call):
        value = value.value  # struct.Struct(...).pack: judged by the object it comes from
    if _is_mutable_literal(value) or (
        isinstance(value, ast.Call) and _callee(value) in MUTABLE_FACTORIES
    ):
        return [Finding(rel, node.lineno, "mutable", name) for name in names]
    if isinstance(value, ast.Call) and _callee(value) not in IMMUTABLE_FACTORIES:
        return [Finding(rel, node.lineno, "instance", name) for name in names]
    return []


def scan(path: Path, rel: str) -> list[Finding]:
    """Everything in one module that may hold process state."""
    tree = ast.parse(path.read_text())
    found: list[Finding] = []
    for node, owner in _top_level(tree.body):
        found += _assignment_findings(rel, node, owner)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            name = _callee(node.value)
            if name not in REGISTRATIONS and not name.startswith("__all__."):
                found.append(Finding(rel, node.lineno, "module-level call", name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found += [Finding(rel, node.lineno, "global", name) for name in node.names]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if ast.unparse(target) in MEMOISERS | HOOKS:
                    found.append(Finding(rel, node.lineno, "memoised or hooked", node.name))
        elif isinstance(node, ast.Call) and _callee(node) in HOOKS and rel != ONE_HOME:
            found.append(Finding(rel, node.lineno, "fork/exit hook", _callee(node)))
    found = [f for f in found if not (f.kind == "module-level call" and f.name in HOOKS)]
    return sorted(found, key=lambda f: f.line)


def scan_tree(root: Path) -> list[Finding]:
    return [f for path in sorted(root.rglob("*.py")) for f in scan(path, rel(root, path))]


def rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def violations(
    findings: list[Finding], exempt: dict[str, str], registered: Callable[[Finding], bool]
) -> list[str]:
    """One line per finding that is neither exempt nor registered."""
    return [
        f"{f}: process state outside tokenloom.process_caches; declare it there (a "
        "BoundedCache), register it (register_state), or, if it is no state at all, add "
        "it to EXEMPT in tests/test_process_caches.py with the reason"
        for f in findings
        if f.key not in exempt and not (f.kind == "instance" and registered(f))
    ]


def writes(tree: ast.AST) -> dict[str, list[int]]:
    """The names written into (item assignment or deletion, augmented assignment, a
    mutating method; ``a.b.NAME`` counts as ``NAME``) and the lines that do it."""
    found: dict[str, list[int]] = {}
    for node in ast.walk(tree):
        bases: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            bases = [t.value for t in node.targets if isinstance(t, ast.Subscript)]
        elif isinstance(node, ast.AugAssign):
            target = node.target
            bases = [target.value if isinstance(target, ast.Subscript) else target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
        ):
            bases = [node.func.value]
        for base in bases:
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
            if name is not None:
                found.setdefault(name, []).append(node.lineno)
    return {name: sorted(lines) for name, lines in found.items()}

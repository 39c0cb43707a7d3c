"""The house rules of the code's structure, read from the source with `ast` (nothing is
imported): no function over 80 lines, no class over 400 lines, no import circle among
a package's modules, a domain that imports nothing above it. tests/test_structure.py
applies them to runnerq_cli and to small synthetic packages (so a checker that reports
nothing fails); tests/test_layers.py reads the same imports for the layers.

A function's or a class's length is from its `def`/`class` line to its last line
(decorators left out, its docstring and nested functions counted in).

Which imports count, for circles and for the domain: every one, wherever it is: at
module level, inside a function (a lazy import for start-up cost is still a
dependence: the two modules cannot be understood, tested or moved apart), and under
`if TYPE_CHECKING:` (a type named from another module is knowledge of it: mypy
follows it, and the circle it closes is a design one even when never loaded). Two
refinements keep the graph the real one: `from pkg import module` imports that
module, and a name imported from the package's facade (`from runnerq_cli import
connect`, served lazily by `runnerq_cli/__init__.py`) is an import of the module
defining it (the facade's `_EXPORTS`), not of the facade, whose own imports of every
public module would otherwise close a circle with each of them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

FUNCTION_LINES = 80
CLASS_LINES = 400


@dataclass(frozen=True)
class Import:
    importer: str  # dotted name of the importing module
    target: str  # dotted name of the imported module (a name in a module counts as it)
    type_only: bool  # under `if TYPE_CHECKING:`
    line: int

    def __str__(self) -> str:
        kind = " (TYPE_CHECKING)" if self.type_only else ""
        return f"{self.importer}:{self.line} imports {self.target}{kind}"


class Package:
    """A package's source tree: its modules, their lengths and their imports."""

    def __init__(self, root: Path, facade: Mapping[str, str] | None = None) -> None:
        self.root = root  # the package's folder (holding __init__.py)
        self.name = root.name
        self.facade = dict(facade or {})  # public name -> the module defining it
        self.paths = sorted(root.rglob("*.py"))
        self._trees: dict[Path, ast.Module] = {}
        self._imports: list[Import] | None = None

    def module_name(self, path: Path) -> str:
        parts = path.relative_to(self.root.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def is_module(self, dotted: str) -> bool:
        base = self.root.parent.joinpath(*dotted.split("."))
        return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()

    def _tree(self, path: Path) -> ast.Module:
        if path not in self._trees:  # each file parsed once (the scans share the trees)
            self._trees[path] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        return self._trees[path]

    # ------------------------------------------------------------------ lengths

    def too_long(self, kinds: tuple[type, ...], limit: int) -> list[str]:
        """`path:line name (N lines)` of every definition of `kinds` over `limit` lines."""
        found = []
        for path in self.paths:
            for node in ast.walk(self._tree(path)):
                if isinstance(node, kinds):
                    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > limit:
                        where = path.relative_to(self.root.parent)
                        found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
        return found

    def long_functions(self, limit: int = FUNCTION_LINES) -> list[str]:
        return self.too_long((ast.FunctionDef, ast.AsyncFunctionDef), limit)

    def big_classes(self, limit: int = CLASS_LINES) -> list[str]:
        return self.too_long((ast.ClassDef,), limit)

    # ------------------------------------------------------------------ imports

    def imports_of(self, path: Path) -> list[Import]:
        """Every import in `path` of a module of this package, wherever it is (module
        level, functions, TYPE_CHECKING), each marked type-only or not."""
        name = self.module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: list[Import] = []

        def visit(node: ast.AST, type_only: bool) -> None:
            if isinstance(node, ast.If) and _type_checking(node.test):
                for child in node.body:
                    visit(child, True)
                for child in node.orelse:
                    visit(child, type_only)
                return
            if isinstance(node, ast.Import):
                found.extend(Import(name, a.name, type_only, node.lineno) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:  # `from pkg import module` imports the module
                    sub = f"{base}.{alias.name}"
                    if self.is_module(sub):
                        target = sub
                    elif base == self.name and alias.name in self.facade:
                        target = self.facade[alias.name]  # the facade's name: its module
                    else:
                        target = base
                    found.append(Import(name, target, type_only, node.lineno))
            for child in ast.iter_child_nodes(node):
                visit(child, type_only)

        visit(self._tree(path), False)
        return [i for i in found if under(i.target, self.name)]

    def imports(self) -> list[Import]:
        if self._imports is None:
            self._imports = [i for path in self.paths for i in self.imports_of(path)]
        return self._imports

    def circles(self) -> list[list[str]]:
        """The import circles: each a strongly connected set of two or more modules (a
        cycle through them, every import counted), sorted; with one cycle each as read."""
        return circles(self.imports())

    def domain_reaching_up(self) -> list[str]:
        """Imports by a module of `<package>.backend.domain` of anything above the domain:
        the backend's other layers and root (`store`, `queue`, ..., `api`, `traits`), the
        front ends, the facade. The domain may import itself, the backend package (its
        `__init__` holds the logger's name and imports nothing) and the shared modules
        at the package's root (errors, values, config, ...: below every layer,
        test_layers.py). TYPE_CHECKING imports count: the domain is pure, even its types."""
        domain = f"{self.name}.backend.domain"
        backend = f"{self.name}.backend"
        wrong = []
        for i in self.imports():
            if not under(i.importer, domain) or under(i.target, domain):
                continue
            shared = i.target.count(".") == 1 and not (self.root / i.target.split(".")[1]).is_dir()
            if not (i.target == backend or shared):
                wrong.append(str(i))
        return wrong


def under(dotted: str, prefix: str) -> bool:
    return dotted == prefix or dotted.startswith(prefix + ".")


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def circles(imports: Iterable[Import]) -> list[list[str]]:
    """The strongly connected sets of two or more modules of the import graph (Tarjan's
    algorithm, iterative), each as one cycle through them: `a -> b -> a`."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        if i.importer != i.target:
            graph.setdefault(i.importer, set()).add(i.target)
            graph.setdefault(i.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(_cycle(graph, set(component)))
    return found


def _cycle(graph: Mapping[str, set[str]], members: set[str]) -> list[str]:
    """One cycle through a strongly connected set, from its first module and back: the
    shortest way from it to each next module (breadth first), closed where it can."""
    first = min(members)
    previous: dict[str, str] = {}
    frontier = [first]
    seen = {first}
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == first:
                    path = [node]
                    while path[-1] != first:
                        path.append(previous[path[-1]])
                    return [*reversed(path), first]
                if child not in seen:
                    seen.add(child)
                    previous[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"no cycle through {sorted(members)}")  # a strong set has one

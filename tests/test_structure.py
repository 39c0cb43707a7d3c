"""The house rules of structure (CONTRIBUTING.md, "Rules of the code"), on runnerq_cli:
no function over 80 lines, no class over 400 lines, no import circle among its
modules, and a domain (backend/domain) that imports nothing above it.

Which imports count, and how lengths are measured: tests/structure.py. Every import
counts, those inside functions and under TYPE_CHECKING included. The last tests feed
the checker small synthetic packages breaking each rule once, and one keeping each at
its limit: a checker that reports nothing, or too much, fails here.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import runnerq_cli
from tests.structure import CLASS_LINES, FUNCTION_LINES, Package

PACKAGE = Package(Path(runnerq_cli.__file__).parent, facade=runnerq_cli._EXPORTS)


def test_no_function_is_over_80_lines() -> None:
    assert not PACKAGE.long_functions(), "\n".join(PACKAGE.long_functions())


def test_no_class_is_over_400_lines() -> None:
    assert not PACKAGE.big_classes(), "\n".join(PACKAGE.big_classes())


def test_no_import_circle() -> None:
    found = PACKAGE.circles()
    assert not found, "\n".join(" -> ".join(cycle) for cycle in found)


def test_the_domain_imports_nothing_above_it() -> None:
    assert not PACKAGE.domain_reaching_up(), "\n".join(PACKAGE.domain_reaching_up())


def test_the_checker_reads_the_real_package() -> None:
    """The scans above see the package: modules, functions, imports of every kind."""
    imports = PACKAGE.imports()
    assert len(PACKAGE.paths) > 100
    assert PACKAGE.long_functions(limit=60) and PACKAGE.big_classes(limit=200)
    kinds = {(i.type_only, i.importer, i.target) for i in imports
             if i.importer == "runnerq_cli.cli.state" and i.target == "runnerq_cli.backend.api"}
    assert {k[0] for k in kinds} == {True, False}  # annotations, and inside a function
    # The facade's names are their modules': the worker's `from runnerq_cli import connect`
    seen = {i.target for i in imports if i.importer == "runnerq_cli.worker.api"}
    assert "runnerq_cli.backend.api" in seen and "runnerq_cli" not in seen


# ---------------------------------------------------------------- self-checks


def package(tmp_path: Path, files: dict[str, str]) -> Package:
    """A package `pkg` in `tmp_path` of `files` (paths under it: source)."""
    root = tmp_path / "pkg"
    for name, source in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in path.relative_to(root).parents:  # every folder a package
            (root / folder / "__init__.py").touch()
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return Package(root)


def function_of(lines: int, name: str, indent: str = "") -> str:
    """A function of exactly `lines` lines (def line included)."""
    body = "".join(f"{indent}    x{n} = {n}\n" for n in range(lines - 2))
    return f"{indent}def {name}():\n{body}{indent}    return 0\n"


def test_the_checker_reports_a_long_function_and_not_one_at_the_limit(tmp_path) -> None:
    found = package(tmp_path, {
        "long.py": function_of(FUNCTION_LINES + 1, "too_long")
        + function_of(FUNCTION_LINES, "at_limit")
        + "class Holder:\n" + function_of(FUNCTION_LINES + 1, "method", "    "),
        "sub/deep.py": "async " + function_of(FUNCTION_LINES + 5, "coroutine"),
    }).long_functions()
    assert sorted(found) == [
        f"pkg/long.py:1 too_long ({FUNCTION_LINES + 1} lines)",
        f"pkg/long.py:{2 * FUNCTION_LINES + 3} method ({FUNCTION_LINES + 1} lines)",
        f"pkg/sub/deep.py:1 coroutine ({FUNCTION_LINES + 5} lines)",
    ], found


def test_the_checker_reports_a_big_class_and_not_one_at_the_limit(tmp_path) -> None:
    def class_of(lines: int, name: str) -> str:
        body = "".join(f"    a{n} = {n}\n" for n in range(lines - 1))
        return f"class {name}:\n{body}"

    found = package(tmp_path, {"big.py": class_of(CLASS_LINES + 1, "Big")
                               + class_of(CLASS_LINES, "AtLimit")}).big_classes()
    assert found == [f"pkg/big.py:1 Big ({CLASS_LINES + 1} lines)"], found


@pytest.mark.parametrize(("a", "b"), [
    ("import pkg.b\n", "import pkg.a\n"),  # module level
    ("from pkg import b\n", "def f():\n    from pkg.a import name\n"),  # inside a function
    ("from . import b\n", "from .a import name\n"),  # relative
    ("from pkg.b import x\n",  # a type only, named for annotations
     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import T\n"),
])
def test_the_checker_reports_a_two_module_circle(tmp_path, a, b) -> None:
    found = package(tmp_path, {"a.py": a, "b.py": b, "c.py": "import pkg.a\n"}).circles()
    assert found == [["pkg.a", "pkg.b", "pkg.a"]], found


def test_the_checker_reports_a_longer_circle_once_and_no_chain(tmp_path) -> None:
    found = package(tmp_path, {
        "x/one.py": "from pkg.x import two\n", "x/two.py": "from pkg.y.three import f\n",
        "y/three.py": "def f():\n    import pkg.x.one\n",
        "chain_a.py": "import pkg.chain_b\n", "chain_b.py": "import pkg.x.one\n",
    }).circles()
    assert found == [["pkg.x.one", "pkg.x.two", "pkg.y.three", "pkg.x.one"]], found


def test_the_checker_resolves_the_facade_to_the_defining_module(tmp_path) -> None:
    """`from pkg import name` of a facade name is an import of the name's module: the
    facade importing it back (for type checkers) closes no circle."""
    files = {"__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                            "    from pkg.api import connect\n    from pkg.user import use\n",
             "api.py": "def connect(): ...\n", "user.py": "from pkg import connect\n"}
    root = package(tmp_path, files).root
    assert Package(root, facade={"connect": "pkg.api"}).circles() == []
    assert Package(root).circles() == [["pkg", "pkg.user", "pkg"]]


@pytest.mark.parametrize("source", [
    "from pkg.backend.store.context import QueueContext\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
    "    from pkg.backend.store.context import QueueContext\n",
    "def f():\n    from pkg.backend.queue import queue\n",
    "from ..store import context\n",
    "from pkg.cli import words\n",
    "from pkg import api_name\n",  # the facade: everything
])
def test_the_checker_reports_the_domain_importing_above_it(tmp_path, source) -> None:
    found = package(tmp_path, {
        "backend/domain/shapes.py": source, "backend/domain/models.py": "",
        "backend/store/context.py": "", "backend/queue/queue.py": "", "cli/words.py": "",
        "errors.py": "",
    }).domain_reaching_up()
    assert len(found) == 1 and found[0].startswith("pkg.backend.domain.shapes:"), found


def test_the_checker_lets_the_domain_import_itself_and_what_is_below(tmp_path) -> None:
    found = package(tmp_path, {
        "backend/domain/shapes.py": "from pkg.backend.domain.models import A\n"
                                    "from pkg.backend import LOGGER\nfrom pkg import errors\n"
                                    "from . import models\n",
        "backend/domain/models.py": "", "errors.py": "",
    }).domain_reaching_up()
    assert found == [], found

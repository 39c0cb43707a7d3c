"""The layers (docs/reference.md, "Layers"): every import of every module, read from its
source (ast: imports inside functions and under TYPE_CHECKING included), runs downward.

Within `runnerq_cli/backend/` a module's layer is its folder:
domain < store < queue < views < ops < diagnosis < the backend's root (`api.py`,
`producer.py`, `traits.py`); a module imports its own layer or those below. An import under
`if TYPE_CHECKING:` is exempt from that order (it names a type for annotations and is
never loaded: inspection.py annotates with `Control`), but not from the rules on the
front ends below, nor from the domain's: the domain imports nothing above it, not even
for a type, and no import closes a circle (tests/test_structure.py).

The backend knows no front end: it never imports `runnerq_cli.cli`, `.console` or
`.worker`, not even for a type. The worker depends on `QueueBackend`: it imports the
backend's traits and domain only, plus the exceptions listed with their reasons. The
CLI and the console use the public API: at run time `backend.api`, `backend.producer`,
`backend.traits` and `backend.domain`; any part class for annotations (TYPE_CHECKING);
again plus the listed exceptions, each a debt to pay by moving the name to the domain or
a part's method.

Without the layer folders every test below fails (the first names the missing folder):
a layering that is gone is a failure, never a skip.
"""

from __future__ import annotations

import ast
from pathlib import Path

import runnerq_cli
from tests.structure import Import, Package, under

PACKAGE = Path(runnerq_cli.__file__).parent
BACKEND = PACKAGE / "backend"
ORDER = ("domain", "store", "queue", "views", "ops", "diagnosis")
TOP = len(ORDER)  # api.py, producer.py and traits.py: the backend's root, above every layer
ROOT = ("api", "producer", "traits")

# The worker's imports from the backend beyond traits and domain: (importer, imported),
# each with its reason. None left (issue 32): a name a front end needs moves to the domain.
WORKER_EXCEPTIONS: dict[tuple[str, str], str] = {}

# The CLI's and the console's run-time imports of the backend beyond the public API.
FRONT_EXCEPTIONS: dict[tuple[str, str], str] = {}
# The package's public names (runnerq_cli/__init__.py) re-export the API: none left
# outside it (EventCursor and EventFilter are the domain's now).
FACADE_EXCEPTIONS: set[str] = set()


# The package's imports, read by tests/structure.py (its circles and lengths are
# test_structure.py's): here without resolving the facade's names, so an import of
# `runnerq_cli` by a module is seen as what it is written as.
LAYOUT = Package(PACKAGE)
ALL = LAYOUT.imports()
module_name = LAYOUT.module_name


def layer_of(dotted: str) -> int | None:
    """A backend module's layer (its index in ORDER; TOP for api and traits), or None for
    the packages themselves (`runnerq_cli.backend`, `...backend.store`: nothing to load)
    and for a module left outside the folders."""
    parts = dotted.split(".")[2:]
    if not parts:
        return None
    if parts[0] in ORDER:
        return ORDER.index(parts[0]) if len(parts) > 1 else None
    return TOP if parts[0] in ROOT else None


def from_backend(importer_prefix: str) -> list[Import]:
    assert all((BACKEND / layer).is_dir() for layer in ORDER), "the layer folders are gone"
    return [i for i in ALL if under(i.importer, importer_prefix)
            and under(i.target, "runnerq_cli.backend") and i.target != "runnerq_cli.backend"]


def public(target: str) -> bool:
    return target in {f"runnerq_cli.backend.{name}" for name in ROOT} or under(
        target, "runnerq_cli.backend.domain")


def test_the_parser_sees_imports_in_functions_and_under_type_checking() -> None:
    # cli/state.py imports RunnerQ both for annotations and inside the function that
    # connects: both are seen, one marked type-only.
    seen = {i.type_only for i in ALL
            if i.importer == "runnerq_cli.cli.state" and i.target == "runnerq_cli.backend.api"}
    assert seen == {True, False}


def test_the_layer_folders_exist_and_hold_every_module() -> None:
    missing = [layer for layer in ORDER if not (BACKEND / layer / "__init__.py").is_file()]
    assert not missing, f"runnerq_cli/backend has no layer folder {', '.join(missing)}"
    flat = sorted(p.name for p in BACKEND.glob("*.py"))
    assert flat == ["__init__.py", *(f"{name}.py" for name in ROOT)], flat


def test_backend_imports_run_downward() -> None:
    upward = [str(i) for i in from_backend("runnerq_cli.backend") if not i.type_only
              and (low := layer_of(i.target)) is not None
              and (high := layer_of(i.importer)) is not None and low > high]
    assert not upward, "\n".join(upward)


def test_backend_imports_no_front_end() -> None:
    fronts = ("runnerq_cli.cli", "runnerq_cli.console", "runnerq_cli.worker", "runnerq_cli.aio")
    wrong = [str(i) for i in ALL if under(i.importer, "runnerq_cli.backend")
             and any(under(i.target, f) for f in fronts)]
    assert not wrong, "\n".join(wrong)


def test_the_worker_depends_on_the_queue_backend_trait() -> None:
    wrong = [str(i) for i in from_backend("runnerq_cli.worker")
             if not (i.target == "runnerq_cli.backend.traits"
                     or under(i.target, "runnerq_cli.backend.domain"))
             and (i.importer, i.target) not in WORKER_EXCEPTIONS]
    assert not wrong, "\n".join(wrong)


def test_the_cli_and_the_console_use_the_public_api() -> None:
    # runnerq_cli.aio (the asyncio API) too: it awaits the public API, nothing below it.
    wrong = [str(i) for prefix in ("runnerq_cli.cli", "runnerq_cli.console", "runnerq_cli.aio")
             for i in from_backend(prefix) if not i.type_only and not public(i.target)
             and (i.importer, i.target) not in FRONT_EXCEPTIONS]
    assert not wrong, "\n".join(wrong)


def test_shared_modules_at_the_root_use_the_domain_only() -> None:
    # errors.py, values.py, config.py ... sit below every front end and the backend;
    # __init__.py is the package's public names (the API, plus FACADE_EXCEPTIONS).
    root = {module_name(p) for p in PACKAGE.glob("*.py")}
    shared = [i for i in ALL if i.importer in root
              and under(i.target, "runnerq_cli.backend") and i.target != "runnerq_cli.backend"]
    wrong = [str(i) for i in shared if not public(i.target)
             and not (i.importer == "runnerq_cli" or i.target in FACADE_EXCEPTIONS)]
    wrong += [str(i) for i in shared if i.importer != "runnerq_cli" and not under(
        i.target, "runnerq_cli.backend.domain")]
    assert not wrong, "\n".join(wrong)


def test_no_exception_is_left() -> None:
    """The debts are paid: a new one is a move to make, not a line to add here."""
    assert not WORKER_EXCEPTIONS and not FRONT_EXCEPTIONS and not FACADE_EXCEPTIONS


def test_every_exception_is_still_needed() -> None:
    """An exception no import uses any more is removed (the list shrinks, never rots)."""
    pairs = {(i.importer, i.target) for i in ALL}
    stale = [p for p in [*WORKER_EXCEPTIONS, *FRONT_EXCEPTIONS] if p not in pairs]
    assert not stale, stale


def test_front_ends_never_reach_into_the_backend_by_attribute() -> None:
    """The imports above are one way past the public API; an attribute is the other:
    `rq.context.activities` from the console read the collection itself (its search box,
    now `rq.inspector.ids_starting_with`). No front end names `.context`, `._ctx` or
    `.db`: what it needs is a part's method."""
    internals = {"context", "_ctx", "db"}
    wrong = []
    for folder in ("cli", "console", "worker"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and node.attr in internals:
                    wrong.append(f"{path.relative_to(PACKAGE)}:{node.lineno} .{node.attr}")
    assert not wrong, "\n".join(wrong)

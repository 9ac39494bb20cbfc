"""The house's dependency arrows (design.md): each subpackage imports only the rooms below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "mlxd"
LEAVES = {"errors", "ids", "json_types", "json_out", "heap"}
ALLOWED = {
    "config": set(),
    "schemas": set(),
    "compat": {"config"},
    "engine": {"config"},
    "api": {"engine", "config", "schemas"},
    "admin": {"config", "schemas"},
    "web": {"api", "config", "schemas"},
    "daemon": {"admin", "api", "web", "engine", "config", "schemas", "compat"},
    "dev": {"engine", "config"},
}


def _imported_rooms(path: Path) -> set[str]:
    rooms: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "mlxd" and len(parts) > 1:
                rooms.add(parts[1])
    return rooms


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_imports_point_down(room: str) -> None:
    allowed = ALLOWED[room] | LEAVES | {room, "__version__"}
    offenders = {
        f"{path.relative_to(PACKAGE.parent)} imports mlxd.{other}"
        for path in (PACKAGE / room).rglob("*.py")
        for other in _imported_rooms(path) - allowed
    }
    assert not offenders, sorted(offenders)


# Rooms that reach another only through its public face (its __init__), not into its modules.
FACES = {"daemon": {"api", "web", "engine"}, "admin": {"api"}, "web": {"api"}, "api": {"engine"}}


def _modules_reached(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return out


@pytest.mark.parametrize("room", sorted(FACES))
def test_rooms_meet_at_public_faces(room: str) -> None:
    offenders = {
        f"{path.relative_to(PACKAGE.parent)} imports {module}"
        for path in (PACKAGE / room).rglob("*.py")
        for module in _modules_reached(path)
        for other in FACES[room]
        if module.startswith(f"mlxd.{other}.")
    }
    assert not offenders, sorted(offenders)


def test_the_engine_face_names_what_it_loads() -> None:
    # The face loads its names lazily from a table; mypy reads the imports under TYPE_CHECKING. Both must agree, and
    # importing the face must not import mlx (the BLAS is chosen before mlx loads).
    import subprocess
    import sys

    import mlxd.engine as engine

    tree = ast.parse((PACKAGE / "engine" / "__init__.py").read_text())
    typed = {
        (alias.asname or alias.name): (node.module, alias.name)
        for guard in tree.body if isinstance(guard, ast.If)
        for node in guard.body if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    assert typed == engine._EXPORTS
    for name in engine.__all__:
        assert getattr(engine, name) is not None
    probe = "import sys, mlxd.engine; assert 'mlx' not in sys.modules and 'mlx.core' not in sys.modules"
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_every_room_is_known() -> None:
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == set(ALLOWED)


# The serving state and its generation (design principle 3): one writer, mlxd/daemon/controller.py.
OWNER = PACKAGE / "daemon" / "controller.py"
SERVING_FIELDS = {"model", "pool", "config", "sleeping", "sleeper", "controller"}
OWNED_ANYWHERE = {"generation", "last_error", "overrides", "resolved"}  # the owner's own record of what runs


def _holder(node: ast.expr) -> str | None:
    """The name an attribute hangs on: ``serving`` for ``self.serving.model`` and ``serving.model``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and getattr(node, "value", None) is not None:
        found = [node.target]
    else:
        return []
    out: list[ast.expr] = []
    while found:
        target = found.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            found.extend(target.elts)
        else:
            out.append(target)
    return out


def _writes(path: Path) -> list[str]:
    """Assignments in ``path`` to the serving state (``*.serving.FIELD``, ``state.FIELD``, ``setattr(serving,
    ...)``) or to a controller's generation and record."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        for target in _targets(node):
            if not isinstance(target, ast.Attribute):
                continue
            holder = _holder(target.value)
            if (holder in ("serving", "state") and target.attr in SERVING_FIELDS) or \
                    (holder in ("controller", "owner") and target.attr in OWNED_ANYWHERE) or \
                    (path == OWNER and holder == "self" and target.attr in OWNED_ANYWHERE):
                out.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} assigns {holder}.{target.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and node.args and _holder(node.args[0]) in ("serving", "controller"):
            out.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} calls setattr on the serving state")
    return out


def test_only_the_owner_writes_the_serving_state() -> None:
    offenders = [w for path in sorted(PACKAGE.rglob("*.py")) if path != OWNER for w in _writes(path)]
    assert not offenders, offenders


def test_the_owner_check_sees_the_owners_writes() -> None:
    # The check itself finds what it looks for: the owner assigns every serving field it is named for.
    written = {w.rsplit(".", 1)[-1] for w in _writes(OWNER)}
    assert {"model", "pool", "config", "sleeping", "sleeper", "generation"} <= written, written


# The router's pool membership (which models are loaded) is serving state too: the pool changes it only as its
# owner's typed changes. Outside the pool itself, only the owner calls its mutating methods; inside, what runs
# without the owner (a request, a load's task, the idle watch) reaches no mutation except through the owner.
ROUTER = PACKAGE / "daemon" / "router.py"
POOL_MUTATORS = {"execute", "load", "unload", "apply", "start", "close", "take_steps", "_make_room", "_start_load",
                 "_settle", "_stop", "_await_thread", "_set"}
POOL_PUBLIC_MUTATORS = {m for m in POOL_MUTATORS if not m.startswith("_")}
POOL_UNOWNED = {"acquire", "release", "_ensure_loaded", "_load", "_watch_idle"}  # not called by the owner
GATEWAY = "_change"  # the pool's one way to its owner (PoolOwner.pool_change)


def _pool_class() -> ast.ClassDef:
    tree = ast.parse(ROUTER.read_text(), str(ROUTER))
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelPool")


def _self_calls(function: ast.AST) -> set[str]:
    """The methods a function calls on ``self`` (``self.x(...)``)."""
    return {node.func.attr for node in ast.walk(function)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"}


def _pool_methods() -> dict[str, ast.AST]:
    return {n.name: n for n in _pool_class().body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_only_the_owner_calls_the_pools_mutating_methods() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in (OWNER, ROUTER):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in POOL_PUBLIC_MUTATORS and "pool" in (_holder(node.func.value) or ""):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} calls pool.{node.func.attr}")
    assert not offenders, offenders


def test_the_pool_changes_itself_only_through_its_owner() -> None:
    methods = _pool_methods()
    assert POOL_MUTATORS | POOL_UNOWNED | {GATEWAY} <= set(methods), "the check names methods the pool lacks"
    reached: set[str] = set()
    frontier = set(POOL_UNOWNED)
    while frontier:  # everything the unowned entry points run, following self-calls but not the owner's gateway
        name = frontier.pop()
        reached.add(name)
        frontier |= {c for c in _self_calls(methods[name]) if c in methods and c != GATEWAY} - reached
    assert not reached & POOL_MUTATORS, sorted(reached & POOL_MUTATORS)
    # The gateway hands the change to the owner and does nothing itself.
    assert _self_calls(methods[GATEWAY]) == set()
    owner_calls = {n.func.attr for n in ast.walk(methods[GATEWAY])
                   if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    assert owner_calls == {"pool_change"}
    # And the check sees what it looks for: the request path, a load's task and the idle watch ask the owner.
    assert all(GATEWAY in _self_calls(methods[m]) for m in ("_ensure_loaded", "_load", "_watch_idle"))


TRIGGERS = ("reload", "patch", "replace_overrides", "set_lora_scales", "load_pool_model", "unload_pool_model",
            "pool_change", "sleep", "wake")


def _owner_methods() -> dict[str, ast.AsyncFunctionDef | ast.FunctionDef]:
    tree = ast.parse(OWNER.read_text(), str(OWNER))
    owner = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Controller")
    return {n.name: n for n in owner.body if isinstance(n, (ast.AsyncFunctionDef, ast.FunctionDef))}


def _calls(node: ast.AST) -> set[str]:
    return {n.func.attr for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}


def _holds_the_lock(node: ast.AST) -> bool:
    return any(isinstance(i.context_expr, ast.Attribute) and i.context_expr.attr == "lock"
               for w in ast.walk(node) if isinstance(w, ast.AsyncWith) for i in w.items)


def test_every_trigger_is_one_typed_action_through_the_one_path() -> None:
    """Design principle 3: each trigger builds an action for ``change``, which alone takes the lock (besides
    startup and the final close) and checks If-Match; the pool's own changes are executed and committed there."""
    methods = _owner_methods()
    for name in TRIGGERS:
        assert "change" in _calls(methods[name]) and not _holds_the_lock(methods[name]), name
    assert {name for name, m in methods.items() if _holds_the_lock(m)} == {"change", "start", "close"}
    assert "_check_etag" in _calls(methods["change"])
    assert {"execute", "take_steps", "_commit_steps"} <= _calls(methods["_pool_request"])


def _runtime_imports(path: Path) -> set[str]:
    """Modules ``path`` imports at run time: at its top or inside a function, not under ``if TYPE_CHECKING``."""
    out: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return out


@pytest.mark.parametrize("room", ["admin", "config"])
def test_a_room_has_no_import_cycle(room: str) -> None:
    """Modules of one room import each other one way, counting imports inside functions (where a cycle hides)."""
    modules = {".".join(("mlxd", *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__"): p
               for p in (PACKAGE / room).rglob("*.py")}
    edges = {m: {d for d in _runtime_imports(p) if d in modules and d != m} for m, p in modules.items()}
    # A package imports its own submodules from its __init__; that is how it shows its face, not a cycle.
    for module in modules:
        edges[module] = {d for d in edges[module] if not module.startswith(d + ".")}
    seen: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        seen[module] = 1
        for dep in sorted(edges[module]):
            assert seen.get(dep) != 1, " -> ".join([*path, module, dep])
            if dep not in seen:
                visit(dep, [*path, module])
        seen[module] = 2

    for module in sorted(modules):
        if module not in seen:
            visit(module, [])

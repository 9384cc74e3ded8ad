"""The floor plan of docs/design.md, checked on the import graph computed from the sources.

Imports are read with ``ast`` (module level and inside functions, where a lazy import still
makes one module depend on another); those under ``if TYPE_CHECKING:`` are left out, as they
never run. ``from package import name`` counts as importing the submodule ``package.name``
when there is one, and the package otherwise.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("storage", "graphs", "evaluation", "training", "app")
"""bottom to top: a package imports only itself and the packages before it"""

GRAPHS_LAYERS = (
    ("kit", ("graphs", "graphs.options", "graphs.seats", "graphs.seeds", "graphs.credit", "graphs.metrics",
             "graphs.tasks", "graphs.judges", "graphs.sandbox", "graphs.policies")),
    ("episode", ("graphs.context", "graphs.contract", "graphs.judging")),
    ("games", ()),  # every other package under graphs/
    ("registry", ("graphs.registry", "graphs.episodes")),
)
"""bottom to top, inside graphs/: a module imports only its own layer and those before it"""


@cache
def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _owner(name: str) -> str | None:
    """The project module ``name`` is, or lies in (a function or class imported from it)."""
    known = modules()
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except the bodies of ``if TYPE_CHECKING:`` blocks."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def _imported(module: str, path: Path, node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        for alias in node.names:
            yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules() else base


@cache
def import_graph() -> dict[str, frozenset[str]]:
    graph = {}
    for module, path in modules().items():
        targets = set()
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            for name in _imported(module, path, node):
                owner = _owner(name) if name.split(".")[0] in PACKAGES else None
                if owner is not None and owner != module:
                    targets.add(owner)
        graph[module] = frozenset(targets)
    return graph


def _graphs_layer(module: str) -> int:
    for rank, (_, prefixes) in enumerate(GRAPHS_LAYERS):
        if any(module == p or (p != "graphs" and module.startswith(p + ".")) for p in prefixes):
            return rank
    return 2  # a game


def _game(module: str) -> str | None:
    return module.split(".")[1] if module.startswith("graphs.") and _graphs_layer(module) == 2 else None


def test_packages_import_downwards_only() -> None:
    upward = [f"{module} -> {target}" for module, targets in import_graph().items() for target in targets
              if PACKAGES.index(target.split(".")[0]) > PACKAGES.index(module.split(".")[0])]
    assert not upward, "imports against the order " + " < ".join(PACKAGES) + ":\n" + "\n".join(sorted(upward))


def test_no_module_imports_itself_through_others() -> None:
    graph, cycles = import_graph(), []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*path[path.index(target):], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_inside_graphs_the_kit_knows_no_episode_no_game_and_no_registry() -> None:
    names = [name for name, _ in GRAPHS_LAYERS]
    upward = [f"{module} ({names[_graphs_layer(module)]}) -> {target} ({names[_graphs_layer(target)]})"
              for module, targets in import_graph().items() if module.startswith("graphs")
              for target in targets if target.startswith("graphs") and _graphs_layer(target) > _graphs_layer(module)]
    assert not upward, "upward imports inside graphs/:\n" + "\n".join(sorted(upward))


def test_a_game_imports_no_other_game() -> None:
    crossing = [f"{module} -> {target}" for module, targets in import_graph().items() if _game(module)
                for target in targets if _game(target) not in (None, _game(module))]
    assert not crossing, "games importing each other:\n" + "\n".join(sorted(crossing))


def test_the_rules_see_what_they_check() -> None:
    """The graph holds what the rules are about: games, their kit, and every package."""
    graph = import_graph()
    assert {"graphs.debate.game", "graphs.math_reflection.game", "graphs.registry"} <= set(graph)
    assert {"graphs.contract", "graphs.debate.bots", "graphs.tasks"} <= graph["graphs.debate.game"]
    assert {"graphs.metrics.run_metrics", "storage.metric_rows"} <= graph["graphs.math_reflection.metrics"]
    assert {_game(m) for m in graph} >= {"debate", "ensemble", "discussion", "math_reflection", "story",
                                         "negotiation", "retrieval", "code_debug", "textarena_games"}
    assert {m.split(".")[0] for m in graph} == set(PACKAGES)


def test_reading_the_game_registry_loads_no_graph_engine_and_no_model_library() -> None:
    """Every command reads every game's spec (its options are CLI options): a spec names its graph
    by module, and LangGraph, torch and transformers load only when a game is played."""
    probe = ("import sys; from graphs.registry import game_registry; game_registry(); "
             "print(sorted(m for m in ('langgraph', 'torch', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


SQL_NAMES_OUTSIDE_STORAGE = frozenset({"Engine", "Connection", "make_url"})
"""what a module outside storage/ may take from sqlalchemy (besides ``sqlalchemy.exc``): the
types of what storage hands out, and URL parsing; queries and writes live in storage/"""


STORE_CALLS = frozenset({"connect", "begin", "execute", "exec_driver_sql", "scalar", "scalars", "raw_connection"})
"""methods of an engine or connection that run SQL"""


def test_sql_lives_in_storage() -> None:
    """Outside storage/ (and in bench/), modules ask storage for rows: no select, insert, update,
    table or function of SQLAlchemy's, at module level or inside functions."""
    found = []
    paths = [p for package in (*PACKAGES, "bench") if package != "storage" for p in (ROOT / package).rglob("*.py")]
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "sqlalchemy" for a in node.names):
                found.append(f"{path.relative_to(ROOT)}: import sqlalchemy")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
                if node.module == "sqlalchemy.exc":
                    continue
                names = {a.name for a in node.names} - SQL_NAMES_OUTSIDE_STORAGE
                if node.module != "sqlalchemy" or names:
                    found.append(f"{path.relative_to(ROOT)}: from {node.module} import {', '.join(sorted(names))}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STORE_CALLS
                  and ast.unparse(node.func.value).split(".")[-1] in ("engine", "conn", "connection")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node.func)}(...)")
    assert not found, "SQL outside storage/:\n" + "\n".join(sorted(found))


COMMAND_BODY_LINES = 60
"""the most lines a command function's body may have (its options and docstring aside)"""


def test_commands_stay_thin() -> None:
    """A command parses, calls the Python API (app.api) and formats: its body stays short."""
    long = []
    for path in sorted((ROOT / "app" / "commands").glob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            lines = body[-1].end_lineno - body[0].lineno + 1 if body else 0
            if lines > COMMAND_BODY_LINES:
                long.append(f"{path.relative_to(ROOT)}: {node.name}() has {lines} lines")
    assert not long, f"command functions over {COMMAND_BODY_LINES} lines:\n" + "\n".join(long)

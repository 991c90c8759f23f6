"""The package's rooms import one way: each only from rooms on a lower floor.

Every import counts: at module level, inside functions, under ``TYPE_CHECKING``, and a
module named in a string (``"rsr_async.x.y"`` or ``"rsr_async.x.y:attribute"``, as a
table of plugins names them to import later). A room is a top-level module or folder of
``rsr_async`` (``__init__`` is the public namespace, which imports the rooms it
re-exports, so nothing inside may import it). A new room must be given a floor here.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rsr_async"

FLOORS: tuple[frozenset[str], ...] = (
    # 0. the ground floor: records and errors every room may use
    frozenset({"_version", "_layout", "errors", "schema", "lifeline", "run_lock"}),
    # 1. settings and the resume policy over them, per-phase timing, output folders, the
    #    pure native functions
    frozenset({"config", "resume", "phases", "output_dirs", "_native"}),
    # 2. the services: the generic engine, sandboxes, model clients
    frozenset({"engine", "sandbox", "llm"}),
    # 3. task formats, loading, verification
    frozenset({"tasks"}),
    # 4. the agent harnesses
    frozenset({"harness"}),
    # 5. generic readers and runners built on them: export, the viewer, the Ray cluster
    frozenset({"export", "viewer", "cluster"}),
    # 6. analysis (counts what an export keeps)
    frozenset({"analysis"}),
    # 7. the pipeline, the fakes that ship with the package, the benchmarks' runner
    frozenset({"rsr", "testing", "benchmarks"}),
    # 8. the command line
    frozenset({"cli"}),
    # 9. `python -m rsr_async` and the public namespace
    frozenset({"__main__", "__init__"}),
)


_NAMED = re.compile(r"rsr_async(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?")
"""A string that names a module (and maybe an attribute of it) to import later."""


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@functools.cache
def _exists(module: str) -> bool:
    path = PACKAGE.parent.joinpath(*module.split("."))
    return path.is_dir() or path.with_suffix(".py").exists() or any(path.parent.glob(f"{path.name}.*.so"))


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The ``rsr_async`` modules one AST node imports (``module`` is the importer)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "rsr_async"]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join(package + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        if base.split(".")[0] != "rsr_async":
            return []
        if node.module is None or base == "rsr_async":  # from . import x: x may be a module
            return [f"{base}.{a.name}" if _exists(f"{base}.{a.name}") else base for a in node.names]
        return [base]
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and _NAMED.fullmatch(node.value):
        named = node.value.partition(":")[0]
        return [named] if _exists(named) else []  # not Docker labels such as "rsr_async.run"
    return []


@functools.cache
def _edges() -> dict[tuple[str, str], list[str]]:
    """(importing room, imported room) → where, for every import across rooms."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        source = _room(module)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, module, is_package):
                if (room := _room(target)) != source:
                    edges[(source, room)].append(f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', 0)}")
    return edges


def _floor(room: str) -> int:
    for level, rooms in enumerate(FLOORS):
        if room in rooms:
            return level
    raise AssertionError(f"rsr_async/{room} has no floor in tests/test_layers.py FLOORS: give it one")


def test_every_room_has_a_floor() -> None:
    rooms = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    assert rooms, "no rooms found: the test would check nothing"
    for room in rooms:
        _floor(room)


def test_rooms_import_only_lower_floors() -> None:
    edges = _edges()
    assert len(edges) > 30, "the import scan found too few edges: it is broken"
    upward = [
        f"{source} (floor {_floor(source)}) imports {target} (floor {_floor(target)}) at {', '.join(where[:3])}"
        for (source, target), where in sorted(edges.items())
        if _floor(target) >= _floor(source)
    ]
    assert not upward, "imports against the floors:\n" + "\n".join(upward)


def test_no_circle_between_rooms() -> None:
    # Implied by the floors, but said directly, with the circle named if one appears.
    graph: dict[str, set[str]] = defaultdict(set)
    for source, target in _edges():
        graph[source].add(target)

    def reach(start: str) -> set[str]:
        seen, stack = set(), [start]
        while stack:
            for nxt in graph[stack.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    circles = sorted(room for room in list(graph) if room in reach(room))
    assert not circles, f"rooms on an import circle: {circles}"


def test_the_scan_sees_imports_inside_functions_and_named_modules() -> None:
    # Controls: cli.py imports its version inside a function, and names the command
    # modules it imports by string; the scan must see both.
    edges = _edges()
    assert ("cli", "_version") in edges
    assert ("cli", "rsr") in edges

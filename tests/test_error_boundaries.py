"""Each third-party library's errors are mapped in one place (issue 32): a handler of
aiodocker's, aiohttp's or httpx's exceptions anywhere else in the package fails here.

A handler is an ``except`` clause, a ``contextlib.suppress(...)`` or an
``isinstance(exc, ...)`` test that names one of those libraries' exception types (through
the module, ``aiohttp.ClientError``, or a name imported from it). The places that may
name them are the two mapping modules and the deliberate exceptions below, each with its
reason; a new ad-hoc handler belongs in a mapping table instead.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import rsr_async

LIBRARIES = ("aiodocker", "aiohttp", "httpx", "httpcore")
MAPPING_MODULES = {
    "sandbox/docker_errors.py",  # aiodocker and the aiohttp client under it -> SandboxError
    "llm/http_errors.py",  # aiohttp -> httpx (our transport); httpx -> LLMError (the client)
}
DELIBERATE = {
    ("llm/transport.py", "httpx.RequestNotRead"):
        "httpx's signal that a streamed request body has not been read yet: the transport "
        "reads it and goes on; no failure to map",
    ("viewer/server.py", "web.HTTPNotFound"):
        "the viewer's own aiohttp server answers 404 through aiohttp's exception: routing "
        "of our server, not an error of a library we call",
}

PACKAGE = Path(rsr_async.__file__).parent


def _exception_names() -> frozenset[str]:
    """The names of the libraries' exception classes (``isinstance(x, web.Response)`` is
    no error handling)."""
    names: set[str] = set()
    for module in ("aiodocker", "aiodocker.exceptions", "aiohttp", "aiohttp.web", "httpx", "httpcore"):
        for name, value in vars(importlib.import_module(module)).items():
            if isinstance(value, type) and issubclass(value, BaseException):
                names.add(name)
    return frozenset(names)


EXCEPTION_NAMES = _exception_names()


def _library_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> what it names in a library (``hx`` -> ``httpx``, ``Streamed`` ->
    ``aiodocker.exceptions.DockerStreamError``)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in LIBRARIES:
                    local = alias.asname or alias.name.split(".")[0]
                    aliases[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in LIBRARIES:
                for alias in node.names:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _named_types(node: ast.AST | None) -> list[str]:
    if node is None:
        return []
    if isinstance(node, ast.Tuple):
        return [name for element in node.elts for name in _named_types(element)]
    name = _dotted(node)
    return [name] if name else []


def library_handlers(source: str) -> list[tuple[int, str]]:
    """(line, exception type) of every handler in ``source`` naming a library's type."""
    tree = ast.parse(source)
    aliases = _library_aliases(tree)
    found: list[tuple[int, str]] = []

    def check(line: int, types: list[str]) -> None:
        for name in types:
            head, _, rest = name.partition(".")
            if head in aliases:
                full = f"{aliases[head]}.{rest}" if rest else aliases[head]
                if full.split(".")[-1] in EXCEPTION_NAMES:
                    found.append((line, name))

    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler):
            check(node.lineno, _named_types(node.type))
        elif isinstance(node, ast.Call):
            func = _dotted(node.func)
            if func in ("contextlib.suppress", "suppress"):
                for arg in node.args:
                    check(node.lineno, _named_types(arg))
            elif func == "isinstance" and len(node.args) == 2:
                check(node.lineno, _named_types(node.args[1]))
    return sorted(found)


def test_library_errors_are_handled_only_in_the_mapping_modules() -> None:
    stray: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where in MAPPING_MODULES:
            continue
        for line, name in library_handlers(path.read_text()):
            if (where, name) in DELIBERATE:
                used.add((where, name))
            else:
                stray.append(f"rsr_async/{where}:{line} handles {name}")
    assert not stray, (
        "library errors handled outside their mapping module (map them in "
        "sandbox/docker_errors.py or llm/http_errors.py, or list a deliberate exception "
        "with its reason):\n" + "\n".join(stray)
    )
    assert used == set(DELIBERATE), f"deliberate exceptions no longer needed: {set(DELIBERATE) - used}"


def test_the_check_finds_each_kind_of_handler() -> None:
    # The detector itself, on the shapes it must catch (and a name it must not).
    source = '''
import contextlib
import aiohttp
import httpx as hx
from aiodocker import DockerError
from aiodocker.exceptions import DockerStreamError as Streamed

async def f():
    try:
        pass
    except (aiohttp.ClientError, OSError):
        pass
    except DockerError:
        pass
    except Streamed:
        pass
    except ValueError:
        pass
    with contextlib.suppress(hx.HTTPError, TimeoutError):
        pass
    if isinstance(exc, (OSError, aiohttp.ServerDisconnectedError)):
        pass
    if isinstance(reply, aiohttp.web.Response):
        pass
'''
    assert library_handlers(source) == [
        (11, "aiohttp.ClientError"), (13, "DockerError"), (15, "Streamed"),
        (19, "hx.HTTPError"), (21, "aiohttp.ServerDisconnectedError"),
    ]

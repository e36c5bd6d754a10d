"""The layer contract (DESIGN's layers; docs/decisions.md, "Layers"): every import of app/, the lazy
ones inside functions included, read from the source with ast.

- storage imports nothing from the rest of chunkmq (a library you could publish on its own);
- the wire module imports only the standard library and numpy;
- the client imports only the wire module and its own files (and its own dependencies);
- the API and the console never import storage (they go through the broker).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1] / "app"
STDLIB = sys.stdlib_module_names
CLIENT_DEPENDENCIES = {"httpx", "orjson", "websockets"}


def _module(path: Path) -> str:
    parts = path.relative_to(APP).with_suffix("").parts
    return ".".join(("chunkmq", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def imports(package: str) -> Iterator[tuple[str, str]]:
    """(module, imported name) for every import in the package's files, relative ones resolved."""
    folder = APP / package.removeprefix("chunkmq.").replace(".", "/")
    for path in sorted(folder.rglob("*.py")):
        module = _module(path)
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield module, alias.name
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".")[: len(module.split(".")) - node.level + is_package]
                    name = ".".join([*base, node.module] if node.module else base)
                else:
                    name = node.module or ""
                if name == "__future__":
                    continue
                yield module, name
                for alias in node.names:  # `from chunkmq import storage` imports chunkmq.storage
                    yield module, f"{name}.{alias.name}"


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _violations(package: str, allowed: tuple[str, ...], outside: set[str] | None) -> list[str]:
    """Imports of chunkmq modules not under `allowed`; with `outside`, also other top-level names
    that are neither the standard library nor in `outside`."""
    bad = []
    for module, name in imports(package):
        top = name.split(".")[0]
        if name == "chunkmq":  # the top package itself (its __init__ imports nothing)
            continue
        if top == "chunkmq":
            if not any(_inside(name, a) for a in allowed):
                bad.append(f"{module} imports {name}")
        elif outside is not None and top not in STDLIB and top not in outside:
            bad.append(f"{module} imports {name}")
    return bad


def test_storage_imports_nothing_from_the_rest_of_chunkmq() -> None:
    assert _violations("chunkmq.storage", ("chunkmq.storage",), None) == []


def test_the_wire_module_imports_only_the_standard_library_and_numpy() -> None:
    assert _violations("chunkmq.wire", ("chunkmq.wire",), {"numpy"}) == []


def test_the_client_imports_only_the_wire_module_and_its_own_files() -> None:
    assert _violations("chunkmq.client", ("chunkmq.client", "chunkmq.wire"), CLIENT_DEPENDENCIES) == []


@pytest.mark.parametrize("package", ["chunkmq.api", "chunkmq.web"])
def test_the_api_and_the_console_never_import_storage(package: str) -> None:
    assert [f"{m} imports {n}" for m, n in imports(package) if _inside(n, "chunkmq.storage")] == []


def test_the_walk_sees_what_it_checks() -> None:
    """The walk finds lazy imports and resolves relative ones (a contract checked on nothing passes)."""
    found = set(imports("chunkmq.broker"))
    assert ("chunkmq.broker.arrow", "pyarrow") in found  # imported inside a function
    assert ("chunkmq.broker.message", "chunkmq.wire.batch") in found  # `from chunkmq.wire import batch`
    assert any(_inside(n, "chunkmq.storage") for _, n in found)
    assert _violations("chunkmq.broker", ("chunkmq.broker",), None) != []

"""The layer contract (DESIGN's layers; docs/decisions.md, "Layers"): every import of app/, the lazy
ones inside functions included, read from the source with ast.

- storage imports nothing from the rest of chunkmq (a library you could publish on its own);
- the wire module imports only the standard library and numpy;
- the client imports only the wire module and its own files (and its own dependencies);
- the API and the console never import storage (they go through the broker);
- the API, the console and the alerts never read the broker's internals (queues, routing, meta,
  store...): reads go through app/broker/views.py, writes through the broker's operations;
- no import cycle anywhere in chunkmq: a module never needs, even lazily or for its types only, a
  module that needs it back;
- the HTTP server (app/http) imports only the API it serves, the wire module and the settings (and
  uvicorn, httptools, websockets): it never reaches the broker or the storage but through the API,
  and the API never imports it.
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


def _folder(package: str) -> Path:
    """chunkmq -> app/, chunkmq.broker -> app/broker/."""
    return APP.joinpath(*package.split(".")[1:])


# Every module of chunkmq, the compiled ones (app/broker/_blobc*.so) included.
MODULES = {_module(p) for p in APP.rglob("*.py")} | {_module(p.with_name(p.name.split(".")[0] + ".py"))
                                                     for p in APP.rglob("*.so")}


def file_imports(tree: ast.Module, module: str, is_package: bool) -> Iterator[str]:
    """The names a module's source imports, relative ones resolved. `from p import x` imports the
    module p.x when there is one (p's __init__ is then only the parent every submodule has), else the
    name x from p: a dependency on p's __init__, whose re-export it needs."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + is_package]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if name == "__future__":
                continue
            for alias in node.names:
                sub = f"{name}.{alias.name}"
                yield sub if sub in MODULES else name


def imports(package: str) -> Iterator[tuple[str, str]]:
    """(module, imported name) for every import in the package's files, relative ones resolved."""
    for path in sorted(_folder(package).rglob("*.py")):
        module = _module(path)
        for name in file_imports(ast.parse(path.read_text(), str(path)), module, path.name == "__init__.py"):
            yield module, name


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


HTTP_ALLOWED = ("chunkmq.http", "chunkmq.api", "chunkmq.wire", "chunkmq.config")
HTTP_DEPENDENCIES = {"uvicorn", "httptools", "websockets"}


def test_the_http_server_imports_only_the_api_the_wire_module_and_the_settings() -> None:
    assert _violations("chunkmq.http", HTTP_ALLOWED, HTTP_DEPENDENCIES) == []
    assert ("chunkmq.http.protocol", "chunkmq.api.hot_routes") in set(imports("chunkmq.http"))  # lazy ones seen


def test_the_api_never_imports_the_http_server() -> None:
    assert [f"{m} imports {n}" for m, n in imports("chunkmq.api") if _inside(n, "chunkmq.http")] == []


def test_the_walk_sees_what_it_checks() -> None:
    """The walk finds lazy imports and resolves relative ones (a contract checked on nothing passes)."""
    found = set(imports("chunkmq.broker"))
    assert ("chunkmq.broker.arrow", "pyarrow") in found  # imported inside a function
    assert ("chunkmq.broker.message", "chunkmq.wire.batch") in found  # `from chunkmq.wire import batch`
    assert any(_inside(n, "chunkmq.storage") for _, n in found)
    assert _violations("chunkmq.broker", ("chunkmq.broker",), None) != []


# What the presenters never read on the broker: its internals, behind app/broker/views.py (reads) and
# the broker's operations (writes).
BROKER_INTERNALS = {"queues", "queues_by_id", "routing", "meta", "store", "stats", "disk", "dedup", "committer"}
PRESENTERS = ("api", "web", "alerts")


def _broker_expression(node: ast.expr) -> bool:
    """`broker`, `self.broker`, `app.state.broker`, `broker_of(request)`: the broker, however it is reached."""
    if isinstance(node, ast.Name):
        return node.id == "broker"
    if isinstance(node, ast.Attribute):
        return node.attr == "broker"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id == "broker_of"
    return False


def internal_reads(package: str) -> list[str]:
    """`broker.<internal>` attribute accesses in the package's files, as 'path:line .attr'."""
    found = []
    for path in sorted((APP / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in BROKER_INTERNALS and _broker_expression(node.value):
                found.append(f"{path.relative_to(APP)}:{node.lineno} .{node.attr}")
    return found


@pytest.mark.parametrize("package", PRESENTERS)
def test_presenters_read_the_broker_only_through_its_views_and_operations(package: str) -> None:
    assert internal_reads(package) == []


def test_the_internal_reads_check_sees_what_it_checks(tmp_path: Path) -> None:
    """The check finds every way a presenter reaches the broker (one that finds nothing proves nothing)."""
    assert internal_reads("broker")  # the broker itself reads its own state, of course
    source = ("broker.queues\nself.broker.store\nrequest.app.state.broker.meta\nbroker_of(request).routing\n"
              "broker.queue('q')\nother.queues\n")
    lines = [n.lineno for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Attribute)
             and n.attr in BROKER_INTERNALS and _broker_expression(n.value)]
    assert lines == [1, 2, 3, 4]


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (TYPE_CHECKING and lazy imports too)."""
    modules = {_module(p) for p in _folder(package).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, name in imports(package):
        if name in modules and name != module:
            graph[module].add(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_cycle() -> None:
    """A lazy import or one for the types only is no circle at import time, but it is one in the
    design: counted (docs/decisions.md, "Layers")."""
    assert cycles(import_graph("chunkmq")) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert "chunkmq.broker.views" in import_graph("chunkmq.broker")["chunkmq.broker.history"]


def test_the_package_graph_sees_what_it_checks() -> None:
    """The whole package's graph holds every module and its imports across packages, lazy ones too;
    one import back closes a circle it finds."""
    graph = import_graph("chunkmq")
    assert {"chunkmq", "chunkmq.cli", "chunkmq.storage.store", "chunkmq.web.pages"} <= graph.keys()
    assert any(_inside(n, "chunkmq.storage") for n in graph["chunkmq.broker.broker"])
    assert "chunkmq.main" in graph["chunkmq.start"]  # imported inside a function (the second stage)
    graph["chunkmq.storage.chunk"].add("chunkmq.storage.store")
    assert any({"chunkmq.storage.chunk", "chunkmq.storage.store"} <= set(c) for c in cycles(graph))


def test_an_import_of_a_submodule_is_not_one_of_its_package() -> None:
    """`from . import files` needs storage/files.py; `from chunkmq.storage import Store` needs the
    package's __init__ (its re-export), and `from .store import Store` store.py."""
    source = "from . import files\nfrom chunkmq.storage import Store\nfrom .store import Store as S\n"
    found = list(file_imports(ast.parse(source), "chunkmq.storage.gc", False))
    assert found == ["chunkmq.storage.files", "chunkmq.storage", "chunkmq.storage.store"]

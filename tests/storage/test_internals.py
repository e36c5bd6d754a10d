"""app/storage/internals.py: the store's interface that recovery, retention and gc take."""

from __future__ import annotations

import ast
from pathlib import Path

import chunkmq.storage as storage_package
from chunkmq.storage import Store
from chunkmq.storage.internals import StoreInternals


def test_recovery_retention_and_gc_use_the_stores_internal_interface_only(tmp_path: Path) -> None:
    """recovery.py, retention.py and gc.py reach the store through internals.StoreInternals (the
    Protocol they take instead of importing store.py), never through its private attributes."""
    folder = Path(storage_package.__file__).parent
    members = {n for n in vars(StoreInternals) if not n.startswith("_")} | set(StoreInternals.__annotations__)
    reaches = []
    for name in ("recovery.py", "retention.py", "gc.py"):
        for node in ast.walk(ast.parse((folder / name).read_text())):
            if isinstance(node, ast.Attribute) and not node.attr.startswith("__"):
                owner = node.value
                if ((isinstance(owner, ast.Name) and owner.id == "store") or
                        (isinstance(owner, ast.Attribute) and owner.attr == "store")) and node.attr not in members:
                    reaches.append(f"{name}:{node.lineno} {node.attr}")
    assert reaches == []
    assert {"chunk_size", "writer_lock", "adopt", "forget", "floors_changed"} <= members
    assert [m for m in members if f"``{m}" not in (StoreInternals.__doc__ or "")] == []
    with Store.open(tmp_path / "s") as store:
        assert [m for m in members if not hasattr(store, m)] == []

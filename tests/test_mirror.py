"""Tests mirror the package: every module app/<package>/<module>.py has its own test file
tests/<package>/test_<module>.py (app/x.py: tests/test_x.py), with the module's leading and trailing
underscores dropped (app/client/_batch.py: tests/client/test_batch.py; app/meta/__main__.py:
tests/meta/test_main.py). Package __init__ files are tested through their modules."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"


def mirror_of(module: Path) -> Path:
    """The test file of an app/ module, by the convention above."""
    relative = module.relative_to(APP)
    return ROOT / "tests" / relative.parent / f"test_{module.stem.strip('_')}.py"


def _modules() -> list[Path]:
    return sorted(p for p in APP.rglob("*.py") if p.name != "__init__.py")


def test_every_module_has_a_test_file_of_its_own() -> None:
    missing = [f"{m.relative_to(ROOT)} -> {mirror_of(m).relative_to(ROOT)}" for m in _modules()
               if not mirror_of(m).is_file()]
    assert missing == [], "modules without their test file:\n" + "\n".join(missing)


def test_the_convention_maps_the_names_it_should() -> None:
    """The walk sees the whole package, and the names map as the docstring says."""
    assert len(_modules()) > 100
    assert mirror_of(APP / "storage" / "chunk.py") == ROOT / "tests" / "storage" / "test_chunk.py"
    assert mirror_of(APP / "client" / "_batch.py") == ROOT / "tests" / "client" / "test_batch.py"
    assert mirror_of(APP / "meta" / "__main__.py") == ROOT / "tests" / "meta" / "test_main.py"
    assert mirror_of(APP / "config.py") == ROOT / "tests" / "test_config.py"

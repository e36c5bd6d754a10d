"""tests/ran_all.py: a run in which a collected test never ran fails, even with no failure reported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SUITE = """
def test_one():
    pass

def test_two():
    pass
"""

# Drops test_two without a report, as a lost worker does.
DROP = """
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    return True if item.name == "test_two" else None
"""


def _run(where: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.ran_all",
                           "-c", str(where / "pytest.ini"), "-n", "0", str(where)],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=300)


def test_a_run_where_every_collected_test_ran_passes(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_suite.py").write_text(SUITE)
    out = _run(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_run_that_lost_a_test_fails_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "conftest.py").write_text(DROP)
    out = _run(tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "only 1 of 2 collected tests ran" in out.stdout

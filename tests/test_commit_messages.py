""".ci/commit-messages on throwaway git repositories: it fails on a bad message, passes a good one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "commit-messages"
ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull,
}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], env=ENV, check=True, capture_output=True,
                          text=True).stdout.strip()


def _commit(repo: Path, message: str) -> str:
    _git(repo, "commit", "-q", "--allow-empty", "--cleanup=verbatim", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def _check(repo: Path, baseline: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--repo", str(repo), "--baseline", baseline],
                          capture_output=True, text=True)


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose baseline commit has a message the check would refuse: it is not checked."""
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q")
    return path, _commit(path, "x" * 200 + "\nno blank line before this body")


GOOD = "Add the thing\n\nBecause the reader needs it; wrapped at 72.\n"
URL = "Link the spec\n\nSee https://example.com/" + "a" * 80 + "\n\n    quoted output " + "b" * 80 + "\n"


@pytest.mark.parametrize("message", [GOOD, "Fix a typo", URL])
def test_a_good_message_passes(repo: tuple[Path, str], message: str) -> None:
    path, baseline = repo
    _commit(path, message)
    result = _check(path, baseline)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("message", "problem"), [
    ("A" * 73 + "\n\nwhy\n", "subject is 73 characters (at most 72)"),
    ("Add the thing\nwhy, with no blank line\n", "subject is not followed by a blank line"),
    ("Add the thing\n\n" + "word " * 15 + "\n", "line 3 is 75 columns (at most 72)"),
])
def test_a_bad_message_fails_and_says_why(repo: tuple[Path, str], message: str, problem: str) -> None:
    path, baseline = repo
    _commit(path, GOOD)
    sha = _commit(path, message)
    _commit(path, GOOD)
    result = _check(path, baseline)
    assert result.returncode == 1
    assert f"{sha[:12]} " in result.stderr and problem in result.stderr
    assert result.stderr.count(": ") == 2  # the one bad commit's line and the summary


def test_a_shallow_clone_without_the_baseline_fails_clearly(repo: tuple[Path, str], tmp_path: Path) -> None:
    path, baseline = repo
    _commit(path, GOOD)
    clone = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", path.as_uri(), str(clone)], env=ENV, check=True)
    result = _check(clone, baseline)
    assert result.returncode == 2
    assert "is not in this clone" in result.stderr and "git fetch --unshallow" in result.stderr


def test_outside_a_git_checkout_there_is_nothing_to_check(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--repo", str(tmp_path)], capture_output=True, text=True,
                            env={**ENV, "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)})
    assert result.returncode == 0 and "not a git checkout" in result.stdout

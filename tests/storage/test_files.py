"""Files of the data directory are owner-only whatever the process umask (an embedding application
may not set one), and a directory left readable by others is tightened."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from chunkmq.storage import Store, files
from chunkmq.storage.files import private_dir, restrict_tree

from .conftest import SMALL, msgs


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0)  # the widest: every mode the code asks for is what the file gets
    try:
        yield
    finally:
        os.umask(old)


def modes(root: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(os.stat(root).st_mode)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            found[os.path.relpath(path, root)] = stat.S_IMODE(os.lstat(path).st_mode)
    return found


def owner_only(root: Path) -> dict[str, str]:
    """What is not 0700 (directories) or 0600 (files) under root."""
    return {name: oct(mode) for name, mode in modes(root).items()
            if mode != (0o700 if (root / name).is_dir() else 0o600)}


def test_store_files_are_owner_only_under_an_open_umask(tmp_path: Path, open_umask: None) -> None:
    root = tmp_path / "store"
    with Store.open(root, SMALL) as s:
        s.create_queue(1)
        s.create_queue(2)
        for _ in range(20):  # several chunks and index files
            s.append(msgs(1, 10) + msgs(2, 5))
        s.flush()
    found = modes(root)
    assert any(n.endswith(".chunk") for n in found) and any(n.endswith(".idx") for n in found)
    assert "checkpoint" in found
    assert owner_only(root) == {}


def test_our_entries_of_an_existing_directory_are_tightened(tmp_path: Path, open_umask: None) -> None:
    root = tmp_path / "data"
    (root / "sub").mkdir(parents=True, mode=0o755)
    (root / "sub" / "file").write_text("x")
    (root / "sub" / "file").chmod(0o644)
    (root / "own-file").write_text("x")
    (root / "foreign").write_text("not ours")
    (root / "link").symlink_to(tmp_path)  # a symlink is not followed (its target is not ours)
    for path in (root / "own-file", root / "foreign", tmp_path):
        path.chmod(0o755)
    private_dir(root)
    names = ["sub", "own-file", "link", "missing"]
    assert restrict_tree(root, names) == 3
    assert restrict_tree(root, names) == 0
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755
    assert owner_only(root) == {"foreign": "0o755", "link": "0o777"}
    private_dir(root / "new" / "deeper")
    assert stat.S_IMODE((root / "new" / "deeper").stat().st_mode) == 0o700


def test_punch_hole_frees_whole_blocks_and_keeps_the_size(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * (4 * 4096))
    fd = os.open(path, os.O_RDWR)
    try:
        assert files.punch_hole(fd, 4096, 2 * 4096)
        assert not files.punch_hole(fd, 4096, 0)  # nothing to do
    finally:
        os.close(fd)
    data = path.read_bytes()
    assert data == b"x" * 4096 + bytes(2 * 4096) + b"x" * 4096
    assert os.stat(path).st_blocks * 512 <= 2 * 4096

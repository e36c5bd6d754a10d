from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chunkmq.storage import FsyncMode, NewMessage, Store, StoreOptions

# Tiny chunks and index files so that roll-overs happen within a few hundred records.
SMALL = StoreOptions(
    chunk_size=8 * 1024,
    index_chunk_entries=16,
    fsync=FsyncMode.NEVER,
    checkpoint_interval_ms=3_600_000,  # tests decide when a recovery point is written
    max_message_bytes=2048,
    max_batch_bytes=8 * 1024,
    tail_cache_bytes=4096,
)


def msgs(queue: int, n: int, prefix: str = "m", **kw: object) -> list[NewMessage]:
    return [NewMessage(f"{prefix}-{i}".encode(), [queue], **kw) for i in range(n)]  # type: ignore[arg-type]


def crash_image(src: Path, dst: Path) -> Path:
    """Copy a live store's files as a crash would leave them (page cache content, no final flush)."""
    shutil.copytree(src, dst)
    return dst


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., Store]]:
    opened: list[Store] = []

    def _open(directory: Path | None = None, options: StoreOptions = SMALL) -> Store:
        s = Store.open(directory or tmp_path / "store", options)
        opened.append(s)
        return s

    yield _open
    for s in opened:
        s.close()


@pytest.fixture(scope="module", params=["compiled", "python"])
def codec(request: pytest.FixtureRequest) -> Iterator[str]:
    """A test of the record codec runs twice: on the compiled twin (whatever CHUNKMQ_PURE_PYTHON
    says), then on the pure-Python path, in each module that chooses between them."""
    from chunkmq.storage import _recordc, record_columns, record_encode

    with pytest.MonkeyPatch.context() as mp:
        for module in (record_encode, record_columns):
            mp.setattr(module, "_recordc", _recordc if request.param == "compiled" else None)
        yield request.param

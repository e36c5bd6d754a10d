from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from chunkmq.broker.broker import Broker
from chunkmq.config import Settings
from chunkmq.meta import MetaStore, upgrade


def settings(tmp_path: Path, **overrides: Any) -> Settings:
    defaults: dict[str, Any] = {"data_dir": tmp_path / "data", "chunk_size": 1 << 20, "index_chunk_entries": 1000,
                                "history_interval_seconds": 0.25, "history_coarse_step_seconds": 1.0}
    return Settings(**{**defaults, **overrides})


def with_broker(tmp_path: Path, work: Callable[[Broker], Awaitable[Any]], **overrides: Any) -> Any:
    """Open a real broker on tmp_path (as the server does), run `work` on an event loop, close it.
    `overrides`: settings other than the tests' defaults."""
    s = settings(tmp_path, **overrides)
    s.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(s.meta_url)

    async def run() -> Any:
        meta = MetaStore(s.meta_url)
        broker = Broker.open(s, meta)
        await broker.history.load()
        try:
            return await work(broker)
        finally:
            await broker.history.close()
            broker.close()
            meta.close()

    return asyncio.run(run())

"""The tier manifest in the metadata database: which sealed chunk file is which object in the
bucket, and how far its upload got (models.TierChunk; docs/storage.md "Tiered storage").

`TierManifest` shares the MetaStore's engine. Every method runs in its own short transaction, so it
is safe to call from worker threads; the uploader (app/broker/tier.py) calls it from its thread,
never on the publish or pull path.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.orm import sessionmaker

from chunkmq.meta import models as m
from chunkmq.meta.engine import IMMEDIATE
from chunkmq.meta.repository import MetaStore

LOCAL, UPLOADING, UPLOADED, EVICTED = m.TIER_STATES


@dataclass(frozen=True, slots=True)
class TierChunkRow:
    number: int
    last: int
    object_key: str
    size: int
    md5: str
    state: str
    updated_ms: int


def _row(r: m.TierChunk) -> TierChunkRow:
    return TierChunkRow(r.number, r.last, r.object_key, r.size, r.md5, r.state, r.updated_ms)


class TierManifest:
    def __init__(self, meta: MetaStore) -> None:
        self._sessions = sessionmaker(meta.engine, expire_on_commit=False)
        self._writes = sessionmaker(meta.engine.execution_options(**{IMMEDIATE: True}), expire_on_commit=False)

    def rows(self) -> dict[int, TierChunkRow]:
        """Every row, by chunk number."""
        with self._sessions() as s:
            return {r.number: _row(r) for r in s.scalars(select(m.TierChunk).order_by(m.TierChunk.number))}

    def put(self, number: int, last: int, object_key: str, size: int, md5: str, state: str) -> TierChunkRow:
        """Insert or replace the row of chunk `number`."""
        if state not in m.TIER_STATES:
            raise ValueError(f"tier state must be one of {m.TIER_STATES}, not {state!r}")
        now = time.time_ns() // 1_000_000
        with self._writes.begin() as s:
            row = s.get(m.TierChunk, number)
            if row is None:
                row = m.TierChunk(number=number)
                s.add(row)
            row.last, row.object_key, row.size, row.md5, row.state, row.updated_ms = (
                last, object_key, size, md5, state, now)
        return TierChunkRow(number, last, object_key, size, md5, state, now)

    def remove(self, numbers: Iterable[int]) -> None:
        numbers = list(numbers)
        if numbers:
            with self._writes.begin() as s:
                s.execute(delete(m.TierChunk).where(m.TierChunk.number.in_(numbers)))

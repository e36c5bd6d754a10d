"""Group commit of consumer-group state (app/broker/committer.py): a waiter is resolved only by a
round that started after it, a burst of waiters shares one round, a failed round fails its waiters
with 503 unavailable, and the background task retries until the write works."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from chunkmq.broker.committer import Committer
from chunkmq.broker.errors import Unavailable


class GroupTable:
    """Group positions in a real SQLite file, written in one transaction a round (as the broker's)."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path)
        self.db.execute("CREATE TABLE groups (name TEXT PRIMARY KEY, next_offset INTEGER)")
        self.pending: dict[str, int] = {}
        self.rounds = 0
        self.fail = 0
        self.gate: asyncio.Event | None = None

    def ack(self, name: str, offset: int) -> None:
        self.pending[name] = offset

    async def commit(self) -> int:
        snapshot, self.pending = self.pending, {}  # before the first await, as the contract says
        self.rounds += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            self.fail -= 1
            self.pending = {**snapshot, **self.pending}
            raise sqlite3.OperationalError("database is locked")
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO groups VALUES (?, ?)", snapshot.items())
        return len(snapshot)

    def stored(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT name, next_offset FROM groups").fetchall())


@pytest.fixture
def table(tmp_path: Path) -> GroupTable:
    return GroupTable(tmp_path / "meta.db")


def test_a_round_writes_what_changed_and_resolves_its_waiters(table: GroupTable) -> None:
    async def main() -> None:
        committer = Committer(table.commit, interval=60)
        table.ack("g", 5)
        waiter = committer.durable()
        assert await committer.round() == 1
        assert waiter.done() and waiter.result() is None
        assert table.stored() == {"g": 5}
        assert await committer.round() == 0  # nothing changed since

    asyncio.run(main())


def test_a_burst_of_acks_shares_one_round_and_later_acks_wait_for_the_next(table: GroupTable) -> None:
    async def main() -> None:
        committer = Committer(table.commit, interval=60)
        task = asyncio.create_task(committer.run())
        table.gate = asyncio.Event()
        try:
            first = []
            for i in range(20):
                table.ack(f"g{i}", i)
                first.append(committer.durable())
            await asyncio.sleep(0.01)  # the round started and waits on the gate
            table.ack("late", 99)
            late = committer.durable()  # arrives during the round: not covered by it
            table.gate.set()
            await asyncio.wait_for(asyncio.gather(*first), 5)
            await asyncio.wait_for(late, 5)
            assert table.rounds == 2  # twenty acks, one round; the late one needed its own
            assert table.stored() == {**{f"g{i}": i for i in range(20)}, "late": 99}
        finally:
            task.cancel()

    asyncio.run(main())


def test_a_failed_round_fails_its_waiters_and_the_task_retries(table: GroupTable) -> None:
    async def main() -> None:
        committer = Committer(table.commit, interval=60)
        table.ack("g", 1)
        table.fail = 1
        waiter = committer.durable()
        with pytest.raises(sqlite3.OperationalError):
            await committer.round()
        with pytest.raises(Unavailable, match="could not be made durable"):
            waiter.result()
        assert Unavailable.status == 503 and table.stored() == {}

        table.fail = 2  # the background task: two failures, then the write works
        committer = Committer(table.commit, interval=0.05)
        task = asyncio.create_task(committer.run())
        try:
            again = committer.durable()
            with pytest.raises(Unavailable):
                await asyncio.wait_for(again, 5)
            deadline = asyncio.get_running_loop().time() + 5
            while table.stored() != {"g": 1} and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.02)
            assert table.stored() == {"g": 1}  # kept pending and written by a later round
        finally:
            task.cancel()

    asyncio.run(main())


def test_the_interval_writes_behind_without_waiters(table: GroupTable) -> None:
    async def main() -> None:
        committer = Committer(table.commit, interval=0.02)
        task = asyncio.create_task(committer.run())
        try:
            table.ack("g", 7)
            deadline = asyncio.get_running_loop().time() + 5
            while table.stored() != {"g": 7} and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.01)
            assert table.stored() == {"g": 7}
        finally:
            task.cancel()

    asyncio.run(main())

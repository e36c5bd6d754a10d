"""The audit log's recorder (app/broker/audit.py): what it stamps, and that a failure to write
never fails the action."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from chunkmq.broker.audit import DAY_MS, AuditLog
from chunkmq.meta import MetaStore, upgrade
from chunkmq.meta.audit import AuditRecord, AuditRepository


@pytest.fixture
def meta(tmp_path: Path) -> MetaStore:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    upgrade(url)
    return MetaStore(url)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_record_is_stamped_by_the_clock_and_read_back(meta: MetaStore) -> None:
    log = AuditLog(AuditRepository(meta), clock=lambda: 1234.5678)
    await log.record("api", "ops", "10.1.2.3", "queue.purge", "orders")
    log.record_now("cli", "root", "local", "token.delete", "7", "token_not_found")
    rows = await log.entries()
    assert [(r.at_ms, r.source, r.who, r.action, r.resource, r.result) for r in rows] == [
        (1234567, "cli", "root", "token.delete", "7", "token_not_found"),
        (1234567, "api", "ops", "queue.purge", "orders", "ok")]


@pytest.mark.anyio
async def test_prune_keeps_the_days_asked_for(meta: MetaStore) -> None:
    now = 100 * DAY_MS
    repo = AuditRepository(meta)
    for days_ago in (91, 89, 1):
        repo.add(AuditRecord(now - days_ago * DAY_MS, "api", "ops", "", "queue.purge", "q", "ok"))
    log = AuditLog(repo, clock=lambda: now / 1000)
    assert await log.prune(90) == 1
    assert len(await log.entries()) == 2


@pytest.mark.anyio
async def test_a_failure_to_write_is_logged_and_not_raised(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    unmigrated = MetaStore(f"sqlite:///{tmp_path / 'empty.db'}")  # no audit_log table
    log = AuditLog(AuditRepository(unmigrated))
    with caplog.at_level(logging.ERROR, logger="chunkmq.audit"):
        await log.record("console", "admin", "127.0.0.1", "queue.delete", "q")
    assert "could not record queue.delete q by 'admin'" in caplog.text
    unmigrated.close()

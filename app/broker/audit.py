"""Recording the audit log: the one hook the API (app/api/audit.py), the console (app/web/audit.py)
and the CLI call for every state-changing action. The table and its queries are below, in
app/meta/audit.py.

A record is written before the action's answer goes out, so an answered action is in the log. A
failure to write it is logged and does not fail the action: the log must not become a way to stop
the broker. Callers pass names and codes only, never a secret (token values, passwords, bodies).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from chunkmq.meta.audit import AuditRecord, AuditRepository, AuditRow

log = logging.getLogger("chunkmq.audit")

OK = "ok"
DAY_MS = 86_400_000


class AuditLog:
    """Appends to and reads the audit log; its methods run the SQL in a worker thread."""

    def __init__(self, repo: AuditRepository, clock: Callable[[], float] = time.time) -> None:
        self.repo = repo
        self.clock = clock

    def _record(self, source: str, who: str, address: str, action: str, resource: str, result: str) -> AuditRecord:
        return AuditRecord(int(self.clock() * 1000), source, who, address, action, resource, result)

    def record_now(self, source: str, who: str, address: str, action: str, resource: str = "",
                   result: str = OK) -> None:
        """Synchronously (the CLI); an error is logged, not raised."""
        try:
            self.repo.add(self._record(source, who, address, action, resource, result))
        except Exception:
            log.exception("could not record %s %s by %r in the audit log", action, resource, who)

    async def record(self, source: str, who: str, address: str, action: str, resource: str = "",
                     result: str = OK) -> None:
        """From the event loop (the API and the console); an error is logged, not raised."""
        await asyncio.to_thread(self.record_now, source, who, address, action, resource, result)

    async def entries(self, *, who: str | None = None, action: str | None = None, since_ms: int | None = None,
                      until_ms: int | None = None, before_id: int | None = None, limit: int = 100) -> list[AuditRow]:
        return await asyncio.to_thread(self.repo.entries, who=who, action=action, since_ms=since_ms,
                                       until_ms=until_ms, before_id=before_id, limit=limit)

    async def prune(self, days: float) -> int:
        """Delete the entries older than `days` (CHUNKMQ_AUDIT_DAYS): a periodic job (app/main.py)."""
        before = int(self.clock() * 1000 - days * DAY_MS)
        return await asyncio.to_thread(self.repo.prune, before)

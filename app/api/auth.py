"""Bearer tokens on every /api/v1 call: who is calling, and may they do this to that resource."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chunkmq.api.errors import code_of
from chunkmq.auth.permissions import Action, Permissions
from chunkmq.auth.tokens import hash_token
from chunkmq.broker.errors import Forbidden, Unauthorized
from chunkmq.wire import codes

if TYPE_CHECKING:
    from chunkmq.meta import MetaStore
    from chunkmq.meta.plain import PlainMeta

# A token's answer is kept this long: a token deleted by `chunkmq token delete` (another process)
# stops working within it; one revoked in the console stops at once (`forget`).
CACHE_SECONDS = 5.0
_OUTAGE_RETRY_SECONDS = 1.0  # while the database is unreachable, a known token's answer is kept this long
_ALL = Permissions(is_admin=True)


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    permissions: Permissions
    token_id: int | None = None  # None: anonymous (auth off)

    def may(self, action: Action, resource: str) -> bool:
        return self.permissions.allows(action, resource)

    def sees(self, resource: str) -> bool:
        """Whether lists show `resource`: the token has some permission on it (admins see all)."""
        p = self.permissions
        return p.is_admin or any(p.allows(action, resource) for action in ("configure", "write", "read"))

    def check_admin(self) -> None:
        if not self.permissions.is_admin:
            raise Forbidden(f"the token {self.name!r} is not an administrator's")


NOBODY = Principal("anyone", Permissions())  # the caller of a route that needs no token
ANONYMOUS = Principal("anonymous", _ALL)  # every caller when tokens are off (immutable: one for all)


class TokenAuth:
    """Resolves tokens through a small in-memory cache, so no request after the first for a token
    runs SQL (the publish path stays free of it): a known token costs its sha256 and a dict probe,
    about a microsecond. Its answer is looked up again after `cache_seconds`."""

    def __init__(self, meta: MetaStore | PlainMeta, enabled: bool, cache_seconds: float = CACHE_SECONDS) -> None:
        self.meta = meta  # a staged start's first stage finds tokens without the ORM (app/start.py)
        self.enabled = enabled
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, Principal | None]] = {}
        self._used: set[int] = set()  # token ids used since the last flush (`chunkmq token list`)

    def forget(self) -> None:
        """Drop every cached token (one was revoked from the console: it stops working at once)."""
        self._cache.clear()

    def known(self, token: str | None) -> Principal | None:
        """The caller, when no lookup is needed (tokens off, or a valid token in the cache); None
        otherwise (`principal` then looks it up or refuses it): the hot routes ask this first."""
        if not self.enabled:
            return ANONYMOUS
        if not token:
            return None
        cached = self._cache.get(hash_token(token))
        if cached is None or cached[0] < time.monotonic() or cached[1] is None:
            return None
        principal = cached[1]
        if principal.token_id is not None:
            self._used.add(principal.token_id)  # a set add: no SQL on the hot path
        return principal

    async def principal(self, token: str | None) -> Principal:
        known = self.known(token)
        if known is not None:
            return known
        if not token:
            raise Unauthorized("a bearer token is required (Authorization: Bearer <token>)")
        key = hash_token(token)
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is None or cached[0] < now:
            cached = await self._lookup(token, key, now, cached)
        principal = cached[1]
        if principal is None:
            raise Unauthorized("the token is not valid")
        if principal.token_id is not None:
            self._used.add(principal.token_id)  # a set add: no SQL on the hot path
        return principal

    async def _lookup(
        self, token: str, key: str, now: float, stale: tuple[float, Principal | None] | None
    ) -> tuple[float, Principal | None]:
        try:
            row = await asyncio.to_thread(self.meta.find_token, token)
        except Exception as exc:
            if code_of(exc) != codes.UNAVAILABLE:
                raise
            # The database is unreachable (docs/metadata.md): a token checked before keeps its answer
            # until it is back (revoking one needs the database too); a new one gets 503 unavailable.
            if stale is None:
                raise
            # retried once a second, not by every request (each try can wait on a connect timeout)
            self._cache[key] = (now + _OUTAGE_RETRY_SECONDS, stale[1])
            return self._cache[key]
        principal = Principal(row.name, Permissions.of(row), row.id) if row is not None else None
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[key] = (now + self.cache_seconds, principal)
        return self._cache[key]

    async def flush_last_used(self) -> int:
        """Write the last-used time of the tokens used since the last call (a background job, every
        few seconds, and on shutdown): the time is the flush's, at most that period late."""
        used, self._used = self._used, set()
        if used:
            try:
                await asyncio.to_thread(lambda: [self.meta.touch_token(i) for i in sorted(used)])  # type: ignore[union-attr]
            except BaseException:
                self._used |= used  # e.g. the database is unreachable: the next flush writes them
                raise
        return len(used)


def bearer(header: str | None) -> str | None:
    if header and header[:7].lower() == "bearer ":
        return header[7:].strip()
    return None

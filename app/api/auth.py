"""Bearer tokens on every /api/v1 call: who is calling, and may they do this to that resource."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from fastapi import Request, WebSocket

from app.auth.permissions import Action, Permissions
from app.auth.tokens import hash_token
from app.broker.errors import Forbidden, Unauthorized
from app.meta import MetaStore

log = logging.getLogger("chunkmq.api")

_CACHE_SECONDS = 30.0  # a token deleted from the CLI stops working within this time
_ALL = Permissions(is_admin=True)


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    permissions: Permissions

    def check(self, action: Action, resource: str) -> None:
        if not self.permissions.allows(action, resource):
            raise Forbidden(f"{self.name!r} may not {action} {resource!r}")

    def check_admin(self) -> None:
        if not self.permissions.is_admin:
            raise Forbidden(f"{self.name!r} is not an administrator")


class TokenAuth:
    """Resolves tokens through a small in-memory cache, so no request after the first for a token
    runs SQL (the publish path stays free of it)."""

    def __init__(self, meta: MetaStore, enabled: bool) -> None:
        self.meta = meta
        self.enabled = enabled
        self._cache: dict[str, tuple[float, Principal | None]] = {}
        self._touching: set[asyncio.Future[None]] = set()

    def _touch(self, token_id: int) -> None:
        try:
            self.meta.touch_token(token_id)
        except Exception:  # a busy database costs a "last used" time, never the request
            log.warning("could not record the use of token %d", token_id, exc_info=True)

    def forget(self) -> None:
        """Drop every cached token (one was revoked from the console: it stops working at once)."""
        self._cache.clear()

    async def principal(self, token: str | None) -> Principal:
        if not self.enabled:
            return Principal("anonymous", _ALL)
        if not token:
            raise Unauthorized("a bearer token is required (Authorization: Bearer <token>)")
        key = hash_token(token)
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is None or cached[0] < now:
            row = await asyncio.to_thread(self.meta.find_token, token)
            principal = Principal(row.name, Permissions.of(row)) if row is not None else None
            if row is not None:
                # "Last used" (console, token list) to within the cache period; not waited for.
                self._touching.add(asyncio.ensure_future(asyncio.to_thread(self._touch, row.id)))
                for done in [t for t in self._touching if t.done()]:
                    self._touching.discard(done)
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[key] = (now + _CACHE_SECONDS, principal)
            cached = self._cache[key]
        if cached[1] is None:
            raise Unauthorized("the token is not valid")
        return cached[1]


def bearer(header: str | None) -> str | None:
    if header and header[:7].lower() == "bearer ":
        return header[7:].strip()
    return None


async def authenticate(request: Request) -> Principal:
    auth: TokenAuth = request.app.state.auth
    return await auth.principal(bearer(request.headers.get("authorization")))


async def authenticate_ws(websocket: WebSocket) -> Principal:
    auth: TokenAuth = websocket.app.state.auth
    token = bearer(websocket.headers.get("authorization")) or websocket.query_params.get("token")
    return await auth.principal(token)

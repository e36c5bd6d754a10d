"""Console logins: server-side sessions behind an HttpOnly cookie, CSRF tokens, failed-login limits.

Sessions live in memory (a restart logs everyone out, which is fine for an admin console and keeps
every secret off the disk). The cookie holds only a random session id. Every form carries the
session's CSRF token and every POST checks it; the login form, which has no session yet, uses a
double-submit cookie instead.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from fastapi import Request
from starlette.responses import Response

SESSION_COOKIE = "chunkmq_session"
LOGIN_COOKIE = "chunkmq_login"


class LoginRequired(Exception):
    """Raised by a console route when the request has no live session."""


class CsrfFailed(Exception):
    """Raised when a POST lacks the session's CSRF token."""


@dataclass(slots=True)
class Session:
    id: str
    user: str
    is_admin: bool
    csrf: str
    last_seen: float
    flashes: list[tuple[str, str]] = field(default_factory=list)  # (kind "ok"|"error", text)

    def flash(self, kind: str, text: str) -> None:
        self.flashes.append((kind, text))

    def take_flashes(self) -> list[tuple[str, str]]:
        out, self.flashes = self.flashes, []
        return out


class SessionStore:
    def __init__(self, idle_seconds: float) -> None:
        self.idle_seconds = idle_seconds
        self._sessions: dict[str, Session] = {}

    def create(self, user: str, is_admin: bool) -> Session:
        self._expire()
        session = Session(secrets.token_urlsafe(32), user, is_admin, secrets.token_urlsafe(32), time.monotonic())
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        session = self._sessions.get(session_id or "")
        if session is None:
            return None
        now = time.monotonic()
        if now - session.last_seen > self.idle_seconds:
            del self._sessions[session.id]
            return None
        session.last_seen = now
        return session

    def drop(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def drop_user(self, user: str) -> None:
        """End every session of `user` (deleted, or password changed elsewhere)."""
        for sid in [s.id for s in self._sessions.values() if s.user == user]:
            del self._sessions[sid]

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.idle_seconds
        for sid in [s.id for s in self._sessions.values() if s.last_seen < cutoff]:
            del self._sessions[sid]


class LoginLimiter:
    """At most `attempts` failed logins per key (client address, user name) within `window` seconds."""

    def __init__(self, attempts: int, window: float) -> None:
        self.attempts = attempts
        self.window = window
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, key: str, now: float) -> deque[float]:
        failures = self._failures.get(key)
        if failures is None:
            return deque()  # not stored: reads must not grow the table
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        if not failures:
            del self._failures[key]
        return failures

    def retry_after(self, keys: tuple[str, ...]) -> int:
        """Seconds until another attempt is allowed; 0 when it is allowed now."""
        now = time.monotonic()
        waits = [
            failures[0] + self.window - now
            for key in keys
            if len(failures := self._recent(key, now)) >= self.attempts
        ]
        return max(1, round(max(waits))) if waits else 0

    def failed(self, keys: tuple[str, ...]) -> None:
        now = time.monotonic()
        if len(self._failures) > 100_000:  # bounded memory under a spray of names
            self._failures.clear()
        for key in keys:
            recent = self._recent(key, now)
            recent.append(now)
            self._failures[key] = recent

    def succeeded(self, keys: tuple[str, ...]) -> None:
        for key in keys:
            self._failures.pop(key, None)


def sessions_of(request: Request) -> SessionStore:
    return request.app.state.web_sessions  # type: ignore[no-any-return]


def current_session(request: Request) -> Session:
    """The logged-in session of this request (a FastAPI dependency); LoginRequired otherwise."""
    session = sessions_of(request).get(request.cookies.get(SESSION_COOKIE))
    if session is None:
        raise LoginRequired()
    return session


def check_csrf(expected: str, given: object) -> None:
    if not isinstance(given, str) or not hmac.compare_digest(expected.encode(), given.encode()):
        raise CsrfFailed()


def check_same_site(request: Request) -> None:
    """A state-changing request must come from this console's own pages: a browser says where a
    request came from in `Sec-Fetch-Site` (all current browsers) and `Origin` (on every POST). Either
    naming another site refuses it, whatever its CSRF token; a client that sends neither (curl, an
    old browser) still needs the token."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):  # none: typed or bookmarked by the user
        raise CsrfFailed()
    origin = request.headers.get("origin")
    if origin is not None and (origin == "null" or urlsplit(origin).netloc.lower() != request.headers.get(
            "host", "").lower()):
        raise CsrfFailed()


def set_cookie(request: Request, response: Response, name: str, value: str, max_age: int | None = None) -> None:
    """HttpOnly, SameSite=Strict, and Secure whenever the browser came over https."""
    response.set_cookie(
        name, value, max_age=max_age, httponly=True, samesite="strict", path="/",
        secure=request.url.scheme == "https",
    )

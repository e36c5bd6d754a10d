"""Console logins: server-side sessions behind an HttpOnly cookie, CSRF tokens, failed-login limits.

Sessions live in memory (a restart logs everyone out, which is fine for an admin console and keeps
every secret off the disk). The cookie holds only a random session id. Every form carries the
session's CSRF token and every POST checks it; the login form, which has no session yet, uses a
double-submit cookie instead.
"""

from __future__ import annotations

import hmac
import json
import math
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
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
    # (kind "ok"|"error", text, the API's error code or "")
    flashes: list[tuple[str, str, str]] = field(default_factory=list)

    def flash(self, kind: str, text: str, code: str = "") -> None:
        self.flashes.append((kind, text, code))

    def take_flashes(self) -> list[tuple[str, str, str]]:
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


UNLOCKS_FILE = "console-unlocks"  # in the data directory: `chunkmq user unlock` appends to it


def request_unlock(data_dir: Path, user: str) -> None:
    """Ask the running server to unlock `user` (`chunkmq user unlock`): one JSON line, read by the
    server's LoginLimiter when that user next tries to log in. The last 100 lines are kept."""
    path = data_dir / UNLOCKS_FILE
    lines = path.read_text().splitlines()[-99:] if path.exists() else []
    lines.append(json.dumps({"user": user, "at": time.time()}))
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.chmod(tmp, 0o600)
    tmp.replace(path)


@dataclass(slots=True)
class _Strikes:
    """A user's failed logins in a row: how many, and when the latest was (monotonic)."""

    count: int = 0
    last: float = 0.0


class LoginLimiter:
    """Failed console logins, limited so that guessing slows down without letting an attacker lock
    anyone else out (an office behind one NAT shares one address):

    - per user name, from any addresses: after `attempts` failures in a row the user must wait
      `lock_seconds` after the latest one, twice as long after each further failure, up to
      `max_lock_seconds`; the right password after the wait logs in and clears the count. A user's
      failures are forgotten `window` seconds after their wait ends. Other users, from the same
      address or any other, are not slowed at all;
    - per address, only for guesses across many names: an address that failed for `address_names`
      different user names within `window` seconds is refused, whatever the user and password,
      until the oldest of those failures is `window` old;
    - refused attempts count for nothing, so they cannot make a wait longer;
    - `chunkmq user unlock NAME` (request_unlock) ends a user's wait at once.
    """

    def __init__(self, attempts: int, window: float, lock_seconds: float, unlocks: Path | None = None, *,
                 address_names: int = 10, max_lock_seconds: float = 900.0) -> None:
        self.attempts = attempts
        self.window = window
        self.lock_seconds = lock_seconds
        self.max_lock_seconds = max(max_lock_seconds, lock_seconds)
        self.address_names = address_names
        self.unlocks = unlocks
        self._users: dict[str, _Strikes] = {}
        self._addresses: dict[str, dict[str, float]] = {}  # address -> user name -> its latest failure there
        self._locked_at: dict[str, float] = {}  # user -> wall time of the failure that locked it

    def lock_for(self, failures: int) -> float:
        """How long a user waits after `failures` failures in a row."""
        if failures < self.attempts:
            return 0.0
        return float(min(self.lock_seconds * 2 ** min(failures - self.attempts, 32), self.max_lock_seconds))

    def _strikes(self, user: str, now: float) -> _Strikes | None:
        strikes = self._users.get(user)
        if strikes is not None and now - strikes.last > self.lock_for(strikes.count) + self.window:
            del self._users[user]  # forgotten (reads must not grow the table)
            self._locked_at.pop(user, None)
            return None
        return strikes

    def _names(self, address: str, now: float) -> dict[str, float]:
        names = self._addresses.get(address)
        if names is None:
            return {}
        for name in [n for n, at in names.items() if at <= now - self.window]:
            del names[name]
        if not names:
            del self._addresses[address]
        return names

    def address_wait(self, address: str) -> int:
        """Seconds until `address` may try again; 0 when it may now."""
        now = time.monotonic()
        names = self._names(address, now)
        if len(names) < self.address_names:
            return 0
        return max(1, math.ceil(min(names.values()) + self.window - now))

    def user_wait(self, user: str) -> int:
        """Seconds until `user` may try again; 0 when it may now."""
        now = time.monotonic()
        strikes = self._strikes(user, now)
        if strikes is None:
            return 0
        wait = strikes.last + self.lock_for(strikes.count) - now
        if wait <= 0:
            return 0
        if self._unlock_requested(user):
            self.unlock(user)
            return 0
        return max(1, math.ceil(wait))

    def failed(self, address: str, user: str) -> None:
        now = time.monotonic()
        if len(self._users) + len(self._addresses) > 100_000:  # bounded memory under a spray of names
            self._users.clear()
            self._addresses.clear()
            self._locked_at.clear()
        strikes = self._strikes(user, now)
        if strikes is None:
            strikes = self._users[user] = _Strikes()
        strikes.count += 1
        strikes.last = now
        names = self._names(address, now)
        names[user] = now
        self._addresses[address] = names
        if strikes.count >= self.attempts:
            self._locked_at[user] = time.time()

    def succeeded(self, user: str) -> None:
        """The user's failures are forgotten; the address's stay (one good account must not reset
        the limit of an address that guesses at others)."""
        self.unlock(user)

    def unlock(self, user: str) -> None:
        self._users.pop(user, None)
        self._locked_at.pop(user, None)

    def _unlock_requested(self, user: str) -> bool:
        """Whether `chunkmq user unlock` asked for `user` since it was locked."""
        if self.unlocks is None or user not in self._locked_at:
            return False
        try:
            lines = self.unlocks.read_text().splitlines()
        except OSError:
            return False
        since = self._locked_at[user]
        for line in lines:
            try:
                entry = json.loads(line)
                if entry["user"] == user and float(entry["at"]) >= since:
                    return True
            except (ValueError, KeyError, TypeError):
                continue  # a damaged line is ignored
        return False


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

"""Sessions and failed-login limits (app/web/session.py), on their own clock."""

from __future__ import annotations

import pytest

from chunkmq.web import session as session_module
from chunkmq.web.session import CsrfFailed, LoginLimiter, SessionStore, check_csrf


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(session_module.time, "monotonic", lambda: now[0])
    return now


def test_sessions_end_when_idle_and_per_user(clock: list[float]) -> None:
    store = SessionStore(idle_seconds=60)
    a, b = store.create("alice", True), store.create("bob", False)
    assert a.id != b.id and a.csrf != b.csrf and len(a.id) >= 40
    clock[0] += 59
    assert store.get(a.id) is a  # and its idle time starts again
    clock[0] += 59
    assert store.get(a.id) is a
    assert store.get(b.id) is None  # 118 s unused
    store.drop_user("alice")
    assert store.get(a.id) is None and store.get(None) is None and store.get("forged") is None


def test_limiter_blocks_per_key_for_the_window(clock: list[float]) -> None:
    limiter = LoginLimiter(attempts=3, window=300)
    keys = ("addr:1.2.3.4", "user:admin")
    for _ in range(3):
        assert limiter.retry_after(keys) == 0
        limiter.failed(keys)
    assert limiter.retry_after(keys) == 300
    assert limiter.retry_after(("addr:5.6.7.8", "user:admin")) == 300  # the user name is limited too
    assert limiter.retry_after(("addr:5.6.7.8", "user:other")) == 0
    clock[0] += 200
    assert limiter.retry_after(keys) == 100
    clock[0] += 101
    assert limiter.retry_after(keys) == 0
    limiter.failed(keys)
    limiter.succeeded(keys)
    assert limiter._failures == {}


def test_csrf_check() -> None:
    check_csrf("abc", "abc")
    for given in ("abd", "", None, ["abc"]):
        with pytest.raises(CsrfFailed):
            check_csrf("abc", given)

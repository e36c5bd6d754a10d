"""Sessions and failed-login limits (app/web/session.py), on their own clock."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from chunkmq.web import session as session_module
from chunkmq.web.session import (
    UNLOCKS_FILE,
    CsrfFailed,
    LoginLimiter,
    SessionStore,
    check_csrf,
    request_unlock,
)


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


def test_an_address_that_guesses_across_names_is_refused_for_the_window(clock: list[float]) -> None:
    limiter = LoginLimiter(attempts=3, window=300, lock_seconds=30, address_names=3)
    for user in ("a", "b", "c"):  # three names: no user reaches the limit
        assert limiter.address_wait("1.2.3.4") == 0
        limiter.failed("1.2.3.4", user)
    assert limiter.address_wait("1.2.3.4") == 300
    assert limiter.address_wait("5.6.7.8") == 0 and limiter.user_wait("a") == 0
    clock[0] += 200
    assert limiter.address_wait("1.2.3.4") == 100
    clock[0] += 101
    assert limiter.address_wait("1.2.3.4") == 0


def test_wrong_passwords_for_one_user_never_slow_another(clock: list[float]) -> None:
    limiter = LoginLimiter(attempts=3, window=300, lock_seconds=30, address_names=3)
    for _ in range(3):
        limiter.failed("6.6.6.6", "admin")
        clock[0] += 31
        limiter.failed("6.6.6.6", "admin")  # after each wait, again: the office's attacker
    assert limiter.address_wait("6.6.6.6") == 0  # one name: the address is not refused
    assert limiter.user_wait("alice") == 0  # alice behind the same address logs in
    assert limiter.user_wait("admin") > 0


def test_the_attacked_user_waits_longer_after_each_failure(clock: list[float]) -> None:
    limiter = LoginLimiter(attempts=3, window=300, lock_seconds=30, max_lock_seconds=200)
    for _ in range(2):
        limiter.failed("6.6.6.6", "admin")
        assert limiter.user_wait("admin") == 0  # below the limit: no wait
    waits = []
    for address in ("1.1.1.1", "2.2.2.2", "3.3.3.3", "4.4.4.4", "5.5.5.5"):  # from any address
        limiter.failed(address, "admin")
        waits.append(limiter.user_wait("admin"))
        clock[0] += waits[-1]  # a try right after the wait ends
        assert limiter.user_wait("admin") == 0
    assert waits == [30, 60, 120, 200, 200]  # doubling, up to the maximum
    limiter.succeeded("admin")  # the right password after the wait: the count starts again
    limiter.failed("1.1.1.1", "admin")
    assert limiter.user_wait("admin") == 0


def test_a_users_failures_are_forgotten_a_window_after_the_wait(clock: list[float]) -> None:
    limiter = LoginLimiter(attempts=2, window=300, lock_seconds=30)
    limiter.failed("1.1.1.1", "admin")
    limiter.failed("1.1.1.1", "admin")
    assert limiter.user_wait("admin") == 30
    clock[0] += 30 + 301
    limiter.failed("1.1.1.1", "admin")  # counted as the first again
    assert limiter.user_wait("admin") == 0
    limiter.failed("1.1.1.1", "admin")
    assert limiter.user_wait("admin") == 30


def test_chunkmq_user_unlock_ends_a_lock(clock: list[float], tmp_path: Path) -> None:
    limiter = LoginLimiter(attempts=2, window=300, lock_seconds=600, unlocks=tmp_path / UNLOCKS_FILE)
    request_unlock(tmp_path, "admin")  # before the lock: it does not count
    for _ in range(2):
        limiter.failed("6.6.6.6", "admin")
        limiter.failed("6.6.6.6", "bob")
    assert limiter.user_wait("admin") == 600
    request_unlock(tmp_path, "admin")
    assert limiter.user_wait("admin") == 0
    assert limiter.user_wait("bob") == 600  # only the user named
    assert stat.S_IMODE((tmp_path / UNLOCKS_FILE).stat().st_mode) == 0o600


def test_csrf_check() -> None:
    check_csrf("abc", "abc")
    for given in ("abd", "", None, ["abc"]):
        with pytest.raises(CsrfFailed):
            check_csrf("abc", given)

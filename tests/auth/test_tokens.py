"""API tokens through MetaStore: shown once, stored as a hash, found again by the plain text."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from chunkmq.auth.permissions import Permissions
from chunkmq.auth.tokens import generate_token, hash_token
from chunkmq.meta import AlreadyExists, InvalidValue, MetaStore, NotFound


def test_generated_tokens() -> None:
    tokens = {generate_token() for _ in range(100)}
    assert len(tokens) == 100
    for t in tokens:
        assert re.fullmatch(r"cmq_[A-Za-z0-9_-]{43}", t)
        assert hash_token(t) == hashlib.sha256(t.encode()).hexdigest()


def test_create_and_find(store: MetaStore) -> None:
    row, plain = store.create_token("ci", configure="", write=r"orders\..*", read=".*")
    assert plain.startswith("cmq_") and row.prefix == plain[:8]
    assert (row.name, row.is_admin, row.write, row.read, row.last_used_at) == ("ci", False, r"orders\..*", ".*", None)
    assert store.find_token(plain) == row
    perms = Permissions.of(row)
    assert perms.allows("write", "orders.eu") and not perms.allows("configure", "orders.eu")


def test_wrong_tokens_are_not_found(store: MetaStore) -> None:
    _, plain = store.create_token("ci")
    assert store.find_token(plain[:-1]) is None
    assert store.find_token(plain + "x") is None
    assert store.find_token(generate_token()) is None
    assert store.find_token("") is None
    assert store.find_token(hash_token(plain)) is None  # the stored hash is not a credential


def test_only_the_hash_is_stored(sqlite_url: str) -> None:
    with MetaStore(sqlite_url) as store:  # closing checkpoints the WAL into the main file
        _, plain = store.create_token("ci")
    db = Path(sqlite_url.removeprefix("sqlite:///"))
    content = b"".join(p.read_bytes() for p in db.parent.glob("meta.db*"))
    assert plain.encode() not in content
    assert hash_token(plain).encode() in content


def test_list_touch_delete(store: MetaStore) -> None:
    assert not store.has_tokens()
    a, _ = store.create_token("a", is_admin=True)
    b, plain_b = store.create_token("b", read="q")
    assert store.has_tokens()
    assert store.list_tokens() == [a, b]
    store.touch_token(b.id)
    touched = store.find_token(plain_b)
    assert touched is not None and touched.last_used_at is not None
    assert touched.last_used_at >= touched.created_at
    store.delete_token(b.id)
    assert store.find_token(plain_b) is None
    assert store.list_tokens() == [a]
    with pytest.raises(NotFound):
        store.delete_token(b.id)
    store.touch_token(b.id)  # deleted meanwhile: ignored


@pytest.mark.parametrize("field", ["configure", "write", "read"])
def test_invalid_pattern_is_refused(store: MetaStore, field: str) -> None:
    with pytest.raises(InvalidValue, match=f"invalid {field} pattern"):
        store.create_token("bad", **{field: "(unclosed"})  # type: ignore[arg-type]
    assert not store.has_tokens()


def test_users_and_passwords(store: MetaStore) -> None:
    admin = store.create_user("alice", "correct horse", is_admin=True)
    assert (admin.name, admin.is_admin) == ("alice", True)
    assert store.check_password("alice", "correct horse") == admin
    assert store.check_password("alice", "correct horse ") is None
    assert store.check_password("bob", "correct horse") is None
    assert store.list_users() == [admin]


def test_user_errors(store: MetaStore) -> None:
    store.create_user("alice", "a long password")
    with pytest.raises(AlreadyExists):
        store.create_user("alice", "another long one")
    with pytest.raises(InvalidValue):
        store.create_user("bob", "")
    with pytest.raises(InvalidValue, match="at least 12 characters"):
        store.create_user("bob", "eleven char")
    with pytest.raises(InvalidValue, match="at least 12 characters"):
        store.set_password("alice", "short")

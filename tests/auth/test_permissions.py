"""RabbitMQ-style permissions: fullmatch regexes per action; "" nothing, ".*" everything."""

from __future__ import annotations

import pytest

from chunkmq.auth.permissions import Action, InvalidPattern, Permissions

CASES: list[tuple[Permissions, Action, str, bool]] = [
    (Permissions(), "configure", "orders", False),
    (Permissions(), "write", "", False),
    (Permissions(), "read", "orders", False),
    (Permissions(configure=".*", write=".*", read=".*"), "configure", "anything:at.all", True),
    (Permissions(configure=".*"), "configure", "", True),
    (Permissions(configure=".*"), "write", "orders", False),
    (Permissions(write=r"orders\..*"), "write", "orders.eu", True),
    (Permissions(write=r"orders\..*"), "write", "orders", False),
    # fullmatch, not search: a pattern does not match a longer name by a prefix or a suffix.
    (Permissions(read="orders"), "read", "orders", True),
    (Permissions(read="orders"), "read", "orders-archive", False),
    (Permissions(read="orders"), "read", "old-orders", False),
    (Permissions(read="eu|us"), "read", "us", True),
    (Permissions(read="eu|us"), "read", "eu|us", False),
    (Permissions(read="^amq\\.gen-.*$"), "read", "amq.gen-x1", True),
    (Permissions(is_admin=True), "configure", "orders", True),
    (Permissions(is_admin=True), "write", "", True),
    (Permissions(is_admin=True, read=""), "read", "x", True),
]


@pytest.mark.parametrize(("perms", "action", "resource", "allowed"), CASES)
def test_matrix(perms: Permissions, action: Action, resource: str, allowed: bool) -> None:
    assert perms.allows(action, resource) is allowed


def test_invalid_pattern_names_the_action_and_pattern() -> None:
    with pytest.raises(InvalidPattern, match=r"invalid write pattern '\[a-'") as info:
        Permissions(write="[a-")
    assert (info.value.action, info.value.pattern) == ("write", "[a-")
    assert isinstance(info.value, ValueError)


def test_of_a_token_shaped_object() -> None:
    class Row:
        is_admin = False
        configure = ""
        write = "w.*"
        read = "r"

    perms = Permissions.of(Row())
    assert perms == Permissions(False, "", "w.*", "r")
    assert perms.allows("write", "wx") and not perms.allows("read", "rx")

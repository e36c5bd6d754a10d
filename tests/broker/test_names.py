"""Names clients choose (app/broker/names.py): API.md's alphabet and length, `.`/`..` refused, the
reserved `amq.` prefix for new exchanges and queues, and `amq.default` for the default exchange."""

from __future__ import annotations

from typing import Any

import pytest

from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.names import DEFAULT_EXCHANGE, check_name, check_new_name, exchange_from_path
from chunkmq.wire import codes


@pytest.mark.parametrize("name", ["q", "a" * 200, "orders.eu-1:v2_x", "amq.default"])
def test_valid_names(name: str) -> None:
    assert check_name(name, "queue name") == name


@pytest.mark.parametrize("name", ["", "a" * 201, "a/b", "a b", "é", ".", "..", "q\n", 7])
def test_invalid_names_are_invalid_name(name: Any) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_name(name, "queue name")
    assert refused.value.code == codes.INVALID_NAME and "queue name" in refused.value.message


def test_new_names_may_not_take_the_reserved_prefix() -> None:
    assert check_new_name("amqp", "queue") == "amqp"
    with pytest.raises(InvalidInput, match="reserved") as refused:
        check_new_name("amq.mine", "exchange")
    assert refused.value.code == codes.INVALID_NAME


def test_the_default_exchange_is_addressed_as_amq_default() -> None:
    assert exchange_from_path("amq.default") == DEFAULT_EXCHANGE == ""
    assert exchange_from_path("orders") == "orders"
    with pytest.raises(InvalidInput):
        exchange_from_path("bad/name")

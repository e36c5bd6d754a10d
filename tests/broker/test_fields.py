"""Strict body fields (app/broker/fields.py): each check names the field and why it is refused."""

from __future__ import annotations

import pytest

from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.fields import MAX_INT, boolean, non_negative_int, reject_unknown
from chunkmq.wire import codes


def test_reject_unknown_names_every_unknown_field_and_what_is_allowed() -> None:
    reject_unknown({"a": 1}, ("a", "b"))
    with pytest.raises(InvalidInput) as one:
        reject_unknown({"a": 1, "requeu": True}, ("a", "requeue"))
    assert one.value.message == "unknown field requeu; allowed: a, requeue" and one.value.code == codes.INVALID_BODY
    with pytest.raises(InvalidInput, match=r"^messages\[2\]: unknown fields x, y; allowed: none$"):
        reject_unknown({"y": 1, "x": 2}, (), where="messages[2]")


@pytest.mark.parametrize("value", [-1, MAX_INT + 1, 1.0, "1", True, None])
def test_non_negative_int_refuses_what_is_not_a_64_bit_count(value: object) -> None:
    with pytest.raises(InvalidInput, match=r"^up_to must be a non-negative integer$"):
        non_negative_int({"up_to": value}, "up_to")


def test_non_negative_int_and_boolean_take_good_values() -> None:
    assert non_negative_int({"n": 0}, "n") == 0 and non_negative_int({"n": MAX_INT}, "n") == MAX_INT
    assert boolean({}, "requeue", True) is True and boolean({"requeue": False}, "requeue", True) is False
    for bad in (0, 1, "false", None):
        with pytest.raises(InvalidInput, match=r"^requeue must be true or false$"):
            boolean({"requeue": bad}, "requeue", True)

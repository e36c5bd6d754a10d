"""Form values into broker bodies (app/web/forms.py)."""

from __future__ import annotations

import pytest

from chunkmq.broker.errors import InvalidInput
from chunkmq.web.forms import confirmed, json_object, queue_settings, utc_ms


def test_queue_settings_blank_means_no_limit() -> None:
    body = queue_settings({"max_messages": " 10 ", "max_bytes": "", "dead_letter_exchange": "dlx",
                           "dead_letter_routing_key": "", "ack_timeout_ms": "", "overflow": "reject_publish"})
    assert body == {"max_messages": 10, "max_bytes": None, "max_age_seconds": None, "max_deliveries": None,
                    "message_ttl_seconds": None, "dead_letter_exchange": "dlx", "dead_letter_routing_key": None,
                    "overflow": "reject_publish"}
    with pytest.raises(InvalidInput, match=r"^Max bytes: must be a whole number, not '1e6'$"):
        queue_settings({"max_bytes": "1e6"})


def test_every_bad_queue_field_is_named_in_words() -> None:
    form = {"max_messages": "x", "max_bytes": "0", "ack_timeout_ms": "99999999999", "message_ttl_seconds": "0",
            "dead_letter_exchange": "a b",
            "dead_letter_routing_key": "k" * 256, "overflow": "zz"}
    with pytest.raises(InvalidInput) as raised:
        queue_settings(form, new_name="bad name")
    assert raised.value.message.split("; ") == [
        "invalid queue name 'bad name': use 1-200 characters of A-Z a-z 0-9 . _ - :",
        "Max messages: must be a whole number, not 'x'",
        "Max bytes: must be 1 or more",
        "Ack timeout (ms): must be at most 86,400,000",
        "Message TTL (s): must be 1 or more",
        "Dead-letter exchange: invalid exchange name 'a b': use 1-200 characters of A-Z a-z 0-9 . _ - :",
        "Dead-letter routing key: must be at most 255 characters",
        "Overflow: must be drop_head or reject_publish",
    ]
    settings = queue_settings({"dead_letter_exchange": "amq.default"}, new_name="fine")
    assert settings["dead_letter_exchange"] == "amq.default"


def test_times_are_utc() -> None:
    assert utc_ms("1970-01-01T00:00:01") == 1000
    assert utc_ms("1970-01-01T01:00:00+01:00") == 0
    assert utc_ms("1732150000123") == 1732150000123
    with pytest.raises(InvalidInput, match="not a time"):
        utc_ms("noon")


def test_json_objects_and_confirmation() -> None:
    assert json_object("", "headers") == {}
    assert json_object('{"a": "b"}', "headers") == {"a": "b"}
    with pytest.raises(InvalidInput, match="must be a JSON object"):
        json_object("[1]", "headers")
    confirmed({"confirm": "yes"})
    with pytest.raises(InvalidInput, match="confirmation"):
        confirmed({})

"""Form values into broker bodies (app/web/forms.py)."""

from __future__ import annotations

import pytest

from chunkmq.broker.errors import InvalidInput
from chunkmq.web.forms import confirmed, json_object, queue_settings, utc_ms


def test_queue_settings_blank_means_no_limit() -> None:
    body = queue_settings({"max_messages": " 10 ", "max_bytes": "", "dead_letter_exchange": "dlx",
                           "dead_letter_routing_key": "", "ack_timeout_ms": "", "overflow": "reject_publish"})
    assert body == {"max_messages": 10, "max_bytes": None, "max_age_seconds": None, "max_deliveries": None,
                    "dead_letter_exchange": "dlx", "dead_letter_routing_key": None, "overflow": "reject_publish"}
    with pytest.raises(InvalidInput, match="max_bytes must be a whole number"):
        queue_settings({"max_bytes": "1e6"})


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

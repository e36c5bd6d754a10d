"""app/wire/codes.py: the one table of error codes and their statuses, which docs/api.md documents
and the client turns into exception classes."""

from __future__ import annotations

import re
from http import HTTPStatus
from pathlib import Path

from chunkmq.client import errors
from chunkmq.wire import codes

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _constants() -> dict[str, str]:
    return {name: value for name, value in vars(codes).items() if name.isupper() and isinstance(value, str)}


def test_every_code_constant_is_in_the_status_table_and_no_other() -> None:
    constants = _constants()
    assert len(set(constants.values())) == len(constants), "two constants share a code"
    assert set(constants.values()) == set(codes.STATUS)


def test_codes_are_snake_case_and_statuses_are_http_errors() -> None:
    for code, status in codes.STATUS.items():
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", code), code
        assert 400 <= HTTPStatus(status).value < 600, (code, status)  # a known HTTP error status


def test_the_documented_table_puts_every_code_under_its_status() -> None:
    rows = re.findall(r"^\| (\d{3}) \| (.+) \|$", API_DOC.read_text(), re.MULTILINE)
    documented = {code: int(status) for status, text in rows for code in re.findall(r"`([a-z_]+)`", text)}
    assert {code: documented.get(code) for code in codes.STATUS} == codes.STATUS


def test_the_client_raises_the_class_of_each_codes_status() -> None:
    """A stream's error frame carries only the code: the client finds the status in this table."""
    for code, status in codes.STATUS.items():
        error = errors.api_error(code, "m")
        assert error.status == status and error.code == code, code
        if status in (400, 401, 403, 404, 409, 413, 422, 429, 503, 507):
            assert type(error) is not errors.ApiError, code  # a typed subclass for these statuses
    assert type(errors.api_error("no_such_code", "m")) is errors.ApiError
    assert errors.api_error("no_such_code", "m").status == 0

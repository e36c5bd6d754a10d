"""The client's error table is the server's (app/wire/codes.py): every code gets the right class."""

from __future__ import annotations

import pickle

from chunkmq.client import errors
from chunkmq.wire import codes


def test_every_server_code_maps_to_its_status_and_class() -> None:
    for code, status in codes.STATUS.items():
        error = errors.api_error(code, "message")  # a stream error frame carries no status
        assert error.status == status, code
        expected = errors._BY_STATUS.get(status, errors.ApiError)
        assert type(error) is expected, code


def test_client_classes_cover_the_client_error_statuses() -> None:
    client_statuses = {s for s in codes.STATUS.values() if 400 <= s < 500 and s not in (405, 415)}
    assert client_statuses <= errors._BY_STATUS.keys() | {400}, client_statuses - errors._BY_STATUS.keys()


def test_the_errors_a_caller_may_retry_unchanged_say_so() -> None:
    retryable = {code for code in codes.STATUS if errors.api_error(code, "m").retryable}
    assert retryable == {codes.QUEUE_FULL, codes.UNAVAILABLE, codes.OVERLOADED, codes.STORAGE_FULL}
    assert errors.ConnectionFailed("gone").retryable
    assert not errors.ChunkmqError("x").retryable


def test_api_errors_survive_a_pickle_round_trip() -> None:
    """A multiprocessing pool hands a worker's error to its parent pickled."""
    for code in codes.STATUS:
        error = errors.api_error(code, "why it failed")
        error.retry_after = 2.5  # what the client sets on a 429/503 with Retry-After (any attribute)
        copy = pickle.loads(pickle.dumps(error))
        assert (type(copy), copy.code, copy.status, copy.message, str(copy)) == (
            type(error), error.code, error.status, error.message, str(error))
        assert copy.retry_after == 2.5

"""The broker's error tree (app/broker/errors.py): each class's code is in the one table with the
class's status, and the repr names code and message."""

from __future__ import annotations

import inspect

from chunkmq.broker import errors
from chunkmq.wire import codes


def test_every_class_carries_a_code_of_the_table_with_its_status() -> None:
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass)
               if issubclass(c, errors.BrokerError) and c.__module__ == errors.__name__]
    assert len(classes) == 11
    for cls in classes:
        assert codes.STATUS[cls.code] == cls.status, cls
    assert len({c.code for c in classes}) == len(classes)  # one class per code


def test_a_code_given_on_raise_refines_the_class_code() -> None:
    error = errors.NotFound("queue 'q' not found", code=codes.QUEUE_NOT_FOUND)
    assert (error.status, error.code, error.message, str(error)) == (
        404, codes.QUEUE_NOT_FOUND, "queue 'q' not found", "queue 'q' not found")
    assert errors.NotFound("x").code == codes.NOT_FOUND
    assert repr(error) == "NotFound(code='queue_not_found', message=\"queue 'q' not found\")"

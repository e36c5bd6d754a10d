"""The error map (app/api/errors.py): every exception class of app/storage, app/meta, app/broker,
app/alerts, app/auth and app/spark has an entry, and each reaches a client as API.md's error shape
with the status of its code."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from fastapi import FastAPI

import chunkmq
from chunkmq.api import errors
from chunkmq.broker.errors import BrokerError
from chunkmq.wire import codes

LAYERS = ("chunkmq.storage", "chunkmq.meta", "chunkmq.broker", "chunkmq.alerts", "chunkmq.auth", "chunkmq.spark")


def _modules(package: str) -> list[ModuleType]:
    root = importlib.import_module(package)
    found = [root]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        found.append(importlib.import_module(info.name))
    return found


def exception_classes() -> list[type[BaseException]]:
    """Every public exception class defined (not just imported) in the layers. A private one
    (`_Name`, such as the collector's `_Aborted`) is caught inside its own module and never reaches
    a request."""
    classes: dict[str, type[BaseException]] = {}
    for package in LAYERS:
        for module in _modules(package):
            for _, cls in inspect.getmembers(module, inspect.isclass):
                public = not cls.__name__.startswith("_")
                if issubclass(cls, BaseException) and cls.__module__.startswith(package) and public:
                    classes[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return list(classes.values())


def test_the_walk_finds_the_known_classes() -> None:
    names = {cls.__name__ for cls in exception_classes()}
    assert {"CorruptChunk", "UnknownQueue", "AlreadyExists", "InvalidValue", "QueueFull", "Forbidden",
            "RuleNotFound", "MailError", "InvalidPattern", "OptionError", "ChunkmqError", "DataLoss"} <= names


@pytest.mark.parametrize("cls", exception_classes(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_exception_class_has_a_mapping(cls: type[BaseException]) -> None:
    if issubclass(cls, BrokerError):  # broker errors carry their code; it must be in the table
        assert cls.code in codes.STATUS, cls
        if cls is not BrokerError:
            assert codes.STATUS[cls.code] == cls.status, cls
    else:
        assert cls in errors.ERROR_MAP, f"{cls} has no entry in app/api/errors.py ERROR_MAP"


def _instance(cls: type[BaseException]) -> BaseException:
    for args in (("boom",), (7,), ("read", "(", "boom"), (502, codes.QUEUE_NOT_FOUND, "boom")):
        try:
            return cls(*args)
        except TypeError:
            continue
    raise AssertionError(f"cannot build {cls}")


def test_each_class_is_answered_in_the_error_shape() -> None:
    """A route raising each class, served by the app's own handlers (in process, over ASGI)."""
    application = FastAPI()
    errors.install(application)
    classes = exception_classes()

    @application.get("/raise/{i}")
    async def raise_it(i: int) -> None:
        raise _instance(classes[i])

    async def main() -> None:
        transport = httpx.ASGITransport(app=application, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for i, cls in enumerate(classes):
                response = await client.get(f"/raise/{i}")
                error = response.json()["error"]
                assert set(error) == {"code", "message"}, (cls, error)
                assert codes.STATUS[error["code"]] == response.status_code, (cls, error)
                assert error["message"] and "Traceback" not in error["message"], (cls, error)

    asyncio.run(main())


def test_most_specific_entry_wins_and_entities_refine_not_found() -> None:
    from chunkmq.meta import errors as meta
    from chunkmq.storage import errors as storage

    assert errors.api_error(storage.UnknownQueue(3)).code == codes.QUEUE_NOT_FOUND
    assert errors.api_error(storage.StoreClosed("closed")).status == 503
    assert errors.api_error(meta.AlreadyExists("x", entity="queue", key="q")).status == 409
    assert errors.api_error(meta.NotFound("x", entity="exchange", key="e")).code == codes.EXCHANGE_NOT_FOUND
    internal = errors.api_error(storage.CorruptChunk("chunk 3: record CRC mismatch at /secret/path", chunk=3))
    assert internal.status == 500 and internal.code == codes.CORRUPT_CHUNK
    assert "/secret/path" not in internal.message  # server details stay in the log


def test_every_code_is_a_constant_of_the_table() -> None:
    """No error code is written as a string where it is used: each is a name of app/wire/codes.py,
    and every name there has a status."""
    root = Path(chunkmq.__file__).parent
    used: set[str] = set()
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert not re.findall(r'\bcode\s*=\s*"[a-z_]+"', text), f"{path}: a code written as a string"
        used |= set(re.findall(r"\bcodes\.([A-Z][A-Z_]+)\b", text))
    assert len(used) > 20, "the scan found too little"
    assert used - {"STATUS"} <= {name for name in dir(codes) if name.isupper()}, used
    for name in dir(codes):
        if name.isupper() and name != "STATUS":
            assert getattr(codes, name) in codes.STATUS, name
    assert len(set(codes.STATUS)) == len([n for n in dir(codes) if n.isupper() and n != "STATUS"])  # unique

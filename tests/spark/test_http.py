"""Pages: Arrow pages over one keep-alive connection, the API's errors, a dropped connection reopened."""

from __future__ import annotations

import socket

import httpx
import pyarrow as pa
import pytest

from chunkmq.spark.http import ChunkmqError, Pages
from tests.server import ServerProcess
from tests.spark.conftest import fill


def test_pages_read_a_range_and_the_next_offset(broker: ServerProcess, api: httpx.Client, name: str) -> None:
    fill(api, name, 30)
    pages = Pages(broker.url + "/", None)
    try:
        page, next_offset = pages.arrow_page(name, 5, 20)
        assert next_offset == 25
        table = pa.ipc.open_stream(page).read_all()
        assert table.column("offset").to_pylist() == list(range(5, 25))
        assert [b.decode() for b in table.column("body").to_pylist()] == [f"m{i}" for i in range(5, 25)]
        page, next_offset = pages.arrow_page(name, 25, 100)  # the same connection, kept alive
        assert pa.ipc.open_stream(page).read_all().num_rows == 5 and next_offset == 30
        with pytest.raises(ChunkmqError) as e:
            pages.arrow_page(f"{name}-missing", 0, 10)
        assert (e.value.status, e.value.code) == (404, "queue_not_found")
    finally:
        pages.close()


def test_a_connection_that_went_away_is_opened_again(broker: ServerProcess, api: httpx.Client, name: str) -> None:
    fill(api, name, 3)
    pages = Pages(broker.url, None)
    try:
        pages.arrow_page(name, 0, 1)
        assert pages.conn.sock is not None
        pages.conn.sock.shutdown(socket.SHUT_RDWR)  # as when the server drops an idle keep-alive connection
        page, next_offset = pages.arrow_page(name, 1, 2)
        assert pa.ipc.open_stream(page).read_all().num_rows == 2 and next_offset == 3
    finally:
        pages.close()

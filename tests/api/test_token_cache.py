"""Revoking a token takes effect within the token cache's bounded time (app/api/auth.py):
`chunkmq token delete` (another process) within CACHE_SECONDS, the console's revoke at once."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from chunkmq.api.auth import CACHE_SECONDS, TokenAuth
from chunkmq.broker.errors import Unauthorized
from chunkmq.meta import MetaStore, upgrade
from tests.server import ServerProcess


def test_a_token_deleted_from_the_cli_is_refused_within_the_cache_time(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        made = subprocess.run([sys.executable, "-m", "chunkmq.cli", "token", "create", "--name", "ci", "--write", ".*",
                               "--data-dir", str(server.data_dir)], capture_output=True, text=True, check=True)
        plain = made.stdout.strip()
        token_id = re.search(r"created token (\d+)", made.stderr).group(1)  # type: ignore[union-attr]
        admin = (server.data_dir / "admin-token").read_text().strip()
        httpx.put(f"{server.url}/api/v1/queues/q", json={}, headers={"authorization": f"Bearer {admin}"})
        publish = {"url": f"{server.url}/api/v1/queues/q/publish", "json": {"messages": [{"body": "x"}]},
                   "headers": {"authorization": f"Bearer {plain}"}}
        assert httpx.post(**publish).status_code == 200  # type: ignore[arg-type]  # looked up, now cached
        subprocess.run([sys.executable, "-m", "chunkmq.cli", "token", "delete", token_id,
                        "--data-dir", str(server.data_dir)], capture_output=True, check=True)
        deleted = time.monotonic()
        while (status := httpx.post(**publish).status_code) == 200:  # type: ignore[arg-type]
            assert time.monotonic() - deleted < CACHE_SECONDS + 2, "the deleted token still works"
            time.sleep(0.1)
        assert status == 401
    finally:
        server.stop()


def test_the_cache_answers_until_its_time_and_forget_ends_it_at_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    upgrade(url)
    with MetaStore(url) as meta:
        first, one = meta.create_token("one", write="orders")
        second, two = meta.create_token("two", write="orders")
        auth = TokenAuth(meta, enabled=True, cache_seconds=0.3)

        async def scenario() -> None:
            assert (await auth.principal(one)).name == "one"
            assert (await auth.principal(two)).name == "two"
            meta.delete_token(first.id)  # as `chunkmq token delete` does, behind the server's back
            assert auth.known(one) is not None  # cached: still answered without SQL
            await asyncio.sleep(0.35)
            assert auth.known(one) is None
            with pytest.raises(Unauthorized):
                await auth.principal(one)
            meta.delete_token(second.id)
            auth.forget()  # the console's revoke
            with pytest.raises(Unauthorized):
                await auth.principal(two)

        asyncio.run(scenario())

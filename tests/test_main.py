"""app/main.py and app/start.py: what a server's start loads before it answers, and what it leaves
for later."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Modules the first requests (readiness, publish, pull) do not need, and that cost start-up time.
# alembic too: a database already at the newest schema is not migrated.
LATER = ("jinja2", "aiosmtplib", "numpy", "pyarrow", "pyspark", "pandas", "httpx", "rich", "alembic", "ctypes",
         "chunkmq.client")
# What a restart's first stage (app/start.py) leaves to the second: the full app and the ORM.
SECOND_STAGE = ("fastapi", "sqlalchemy", "chunkmq.api.schemas", "chunkmq.api.router", "chunkmq.web",
                "chunkmq.broker.views", "chunkmq.alerts.jobs", "chunkmq.meta.repository", "chunkmq.main",
                "prometheus_client", "websockets", "uvicorn.main", "click", "multiprocessing", "watchfiles",
                "starlette.routing", "starlette.requests",
                "starlette.responses", "starlette.datastructures", "anyio")
# What warm_up() loads a second after start: then the first console page or large publish need not;
# and uvicorn's package whole (its command line: uvicorn.main, click), which `serve` starts without.
WARMED = ("numpy", "jinja2", "websockets", "uvicorn.main", "click")

STARTED = """
import asyncio, json, sys
import chunkmq.cli as cli
from chunkmq.http import server
from chunkmq.start import serving_app

def loaded(names):
    return sorted(m for m in sys.modules if m in names or any(m.startswith(n + ".") for n in names))

args = cli.build_parser("serve").parse_args(["serve", "--data-dir", sys.argv[1]])
config_class, _ = server.uvicorn_server()  # as cli._serve
settings = cli._settings_from(args)
app = serving_app(settings)
config_class(app, **server.uvicorn_options(settings)).load()  # as Server.run in cli._serve

async def start() -> dict[str, list[str]]:
    inbox, outbox = asyncio.Queue(), asyncio.Queue()
    at_start = []

    async def send(message):  # the moment the server would start answering: the second stage begins after
        if message["type"] == "lifespan.startup.complete":
            at_start.extend(loaded({later}))
        await outbox.put(message)

    await inbox.put({{"type": "lifespan.startup"}})
    lifespan = asyncio.create_task(app({{"type": "lifespan", "asgi": {{"version": "3.0"}}}}, inbox.get, send))
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    staged = type(app).__name__ == "Staged"
    if staged:  # the second stage: the full app, built in the background
        await app.built.wait()
        assert app.full is not None
    from chunkmq.main import warm_up
    warm_up()
    await inbox.put({{"type": "lifespan.shutdown"}})
    assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
    await lifespan
    import uvicorn
    return {{"at_start": at_start, "staged": [type(app).__name__] if staged else [],
             "warmed": sorted(n for n in {warmed} if n in sys.modules) + (["uvicorn.run"] if uvicorn.run else [])}}

print(json.dumps(asyncio.run(start())))
"""


def start(data_dir: Path) -> dict[str, list[str]]:
    """Start a server's app on `data_dir` in a fresh interpreter, as `chunkmq serve` would, up to the
    moment it would answer; then let it finish its start and warm it up. Which of LATER and
    SECOND_STAGE were loaded when it could answer, and which of WARMED after."""
    code = STARTED.format(later=repr(set(LATER + SECOND_STAGE)), warmed=repr(set(WARMED)))
    done = subprocess.run([sys.executable, "-c", code, str(data_dir)], capture_output=True, text=True,
                          timeout=120, env={"CHUNKMQ_AUTH": "off", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_restart_answers_before_loading_the_full_app(tmp_path: Path) -> None:
    first = start(tmp_path)  # the first start creates the database: the full app, the ORM's way
    assert first["staged"] == [] and "alembic" in first["at_start"] and "fastapi" in first["at_start"]
    again = start(tmp_path)
    assert again["staged"] == ["Staged"]
    assert again["at_start"] == [], f"loaded before the first request: {again['at_start']}"
    assert again["warmed"] == [*sorted(WARMED), "uvicorn.run"]

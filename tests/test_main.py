"""app/main.py: what a server's start loads before it answers, and what it leaves for later."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Modules the first requests (readiness, publish, pull) do not need, and that cost start-up time.
# alembic too: a database already at the newest schema is not migrated.
LATER = ("jinja2", "aiosmtplib", "numpy", "pyarrow", "pyspark", "pandas", "httpx", "rich", "alembic", "ctypes",
         "chunkmq.client")
# What warm_up() loads a second after start: then the first console page or large publish need not.
WARMED = ("numpy", "jinja2")

STARTED = """
import asyncio, json, sys
import chunkmq.cli as cli
from chunkmq.main import create_app, warm_up

args = cli.build_parser().parse_args(["serve", "--data-dir", sys.argv[1]])
app = create_app(cli._settings_from(args))
cli._http_protocol(5.0)
cli._websocket_protocol()

async def start() -> list[str]:
    async with app.router.lifespan_context(app):
        assert app.state.broker is not None
        return sorted(m for m in sys.modules if m.partition(".")[0] in {later} or m in {later})

loaded = asyncio.run(start())
warm_up()
print(json.dumps({{"at_start": loaded, "warmed": sorted(m for m in {warmed} if m in sys.modules)}}))
"""


def start(data_dir: Path) -> dict[str, list[str]]:
    """Start a server's app on `data_dir` in a fresh interpreter, as `chunkmq serve` would, up to the
    moment it would answer; then warm it up. Which of LATER were loaded then, and which of WARMED after."""
    code = STARTED.format(later=repr(set(LATER)), warmed=repr(WARMED))
    done = subprocess.run([sys.executable, "-c", code, str(data_dir)], capture_output=True, text=True,
                          timeout=120, env={"CHUNKMQ_AUTH": "off", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_restart_leaves_heavy_modules_for_later(tmp_path: Path) -> None:
    assert "alembic" in start(tmp_path)["at_start"]  # the first start creates the database
    again = start(tmp_path)
    assert again["at_start"] == [], f"loaded before the first request: {again['at_start']}"
    assert again["warmed"] == sorted(WARMED)

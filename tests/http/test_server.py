"""app/http/server.py: the options `chunkmq serve` runs uvicorn with, and uvicorn loaded without its
command line. The server itself is exercised end to end by tests/http/test_connections.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from chunkmq.config import Settings
from chunkmq.http.server import uvicorn_options


def test_the_options_follow_the_settings(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, host="127.0.0.1", port=8123, max_connections=77,
                        max_batch_bytes=4 << 20, forwarded_allow_ips="")
    options = uvicorn_options(settings)
    assert (options["host"], options["port"], options["limit_concurrency"]) == ("127.0.0.1", 8123, 77)
    assert options["loop"] == "uvloop" and options["ws_per_message_deflate"] is False
    assert options["ws_max_size"] == (4 << 20) + (1 << 20)  # a whole batch fits in one frame
    # X-Forwarded-* is trusted only from the proxies the settings name
    assert options["proxy_headers"] is False and options["forwarded_allow_ips"] is None
    proxied = uvicorn_options(Settings(data_dir=tmp_path, forwarded_allow_ips="10.0.0.1"))
    assert proxied["proxy_headers"] is True and proxied["forwarded_allow_ips"] == "10.0.0.1"


def test_uvicorn_runs_without_its_command_line_until_completed() -> None:
    """In a fresh interpreter: uvicorn_server leaves out click and uvicorn.main; complete_uvicorn
    then gives `import uvicorn` the whole package."""
    code = (
        "import sys\n"
        "from chunkmq.http.server import uvicorn_server, complete_uvicorn\n"
        "Config, Server = uvicorn_server()\n"
        "import uvicorn\n"
        "print(uvicorn.Config is Config, 'click' in sys.modules, hasattr(uvicorn, 'run'))\n"
        "complete_uvicorn()\n"
        "print(hasattr(uvicorn, 'run'), uvicorn.Server is Server)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["True False False", "True True"]

"""chunkmq itself: `.venv/bin/chunkmq serve` with auth off, bound to 127.0.0.1."""

from __future__ import annotations

import compileall
import importlib.util
import os
import sys
from pathlib import Path

from bench.peers.process import ManagedProcess, free_port
from bench.peers.server import Endpoint, Server, http_status


def _chunkmq_command() -> list[str]:
    # The console script next to this interpreter; `python -m chunkmq.cli` when it is not installed.
    script = Path(sys.executable).with_name("chunkmq")
    return [str(script)] if script.exists() else [sys.executable, "-m", "chunkmq.cli"]


def _compile_package() -> None:
    """Write chunkmq's bytecode, as installing a wheel does: a source tree run with
    PYTHONDONTWRITEBYTECODE=1 would compile every module at every start, which W6 would count."""
    spec = importlib.util.find_spec("chunkmq")
    for where in (spec.submodule_search_locations or []) if spec else []:
        compileall.compile_dir(where, quiet=1)


class ChunkmqServer(Server):
    kind = "chunkmq"
    start_timeout = 60.0

    def __init__(self, workdir: Path, fsync: str = "interval") -> None:
        super().__init__(workdir, fsync)
        self.port = free_port()

    def _process(self) -> ManagedProcess:
        _compile_package()
        argv = [*_chunkmq_command(), "serve", "--host", "127.0.0.1", "--port", str(self.port),
                "--data-dir", str(self.data_dir), "--fsync", self.fsync]
        env = {**os.environ, "CHUNKMQ_AUTH": "off", "CHUNKMQ_LOG_LEVEL": "warning"}
        return ManagedProcess(argv, env, self.workdir / "chunkmq.log")

    def _ready(self) -> bool:
        base = f"http://127.0.0.1:{self.port}"
        status = http_status(f"{base}/readyz")
        return status == 200 or (status == 404 and http_status(f"{base}/healthz") == 200)

    def endpoint(self) -> Endpoint:
        return Endpoint(self.kind, self.port, self.port)

    def durability(self) -> str:
        return {"interval": "fsync every 100 ms (fsync=interval, the default)",
                "always": "fsync before every acknowledgement (fsync=always, group commit)",
                "never": "no fsync (fsync=never)"}.get(self.fsync, self.fsync)

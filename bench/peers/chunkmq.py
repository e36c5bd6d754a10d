"""chunkmq itself as it ships: `.venv/bin/chunkmq serve` with its default settings (auth on, the default
log level and access log), bound to 127.0.0.1; clients use the bootstrap admin token."""

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

    def __init__(self, workdir: Path, fsync: str = "interval", auth: str = "on",
                 settings: dict[str, str] | None = None) -> None:
        super().__init__(workdir, fsync)
        self.port = free_port()
        self.auth = auth  # "off" only for the single-purpose benchmarks that drive the API without a token
        self.settings = settings or {}  # CHUNKMQ_* variables of a tuned variant (bench/configs.py)

    def _process(self) -> ManagedProcess:
        _compile_package()
        argv = [*_chunkmq_command(), "serve", "--host", "127.0.0.1", "--port", str(self.port),
                "--data-dir", str(self.data_dir), "--fsync", self.fsync]
        # The shipped defaults: drop any CHUNKMQ_* setting the caller's environment carries.
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHUNKMQ_")}
        if self.auth != "on":
            env["CHUNKMQ_AUTH"] = self.auth
        env.update(self.settings)
        return ManagedProcess(argv, env, self.workdir / "chunkmq.log")

    def _ready(self) -> bool:
        base = f"http://127.0.0.1:{self.port}"
        status = http_status(f"{base}/readyz")
        return status == 200 or (status == 404 and http_status(f"{base}/healthz") == 200)

    def token(self) -> str:
        """The admin token the server wrote at its first start (auth on, the default)."""
        path = self.data_dir / "admin-token"
        return path.read_text().strip() if path.exists() else ""

    def endpoint(self) -> Endpoint:
        return Endpoint(self.kind, self.port, self.port, {"token": self.token()})

    def durability(self) -> str:
        return {"interval": "fsync every 100 ms (fsync=interval, the default)",
                "always": "fsync before every acknowledgement (fsync=always, group commit)",
                "never": "no fsync (fsync=never)"}.get(self.fsync, self.fsync)

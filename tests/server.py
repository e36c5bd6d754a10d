"""A real chunkmq server process on a free 127.0.0.1 port, for tests that talk HTTP or WebSocket."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """Runs `python -m app.cli serve` with its own data directory; restartable and killable."""

    def __init__(self, data_dir: Path, **env: str) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.env = {**os.environ, "CHUNKMQ_LOG_LEVEL": "warning", **env}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"server-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ServerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port),
             "--data-dir", str(self.data_dir)],
            env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.kill()  # not left running behind the failed test
        raise RuntimeError(f"server did not start in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> int | None:
        """SIGTERM and wait: the clean shutdown path."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL: the crash path."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> ServerProcess:
        self.stop()
        return self.start()

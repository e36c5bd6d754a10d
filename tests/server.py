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
import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


BIND_ATTEMPTS = 5


class PortTaken(Exception):
    """The server could not bind its port: someone took it after free_port() chose it."""


class ServerProcess:
    """Runs `python -m chunkmq.cli serve` with its own data directory; restartable and killable."""

    def __init__(self, data_dir: Path, **env: str) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.env = {**os.environ, "CHUNKMQ_LOG_LEVEL": "warning", **env}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"server-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> ServerProcess:
        """Start and wait for /healthz. The free port can be taken before the server binds it (tests
        run in parallel, and every client connection takes an ephemeral port): then another one."""
        for _ in range(BIND_ATTEMPTS - 1):
            try:
                return self._start(timeout)
            except PortTaken:
                self.port = free_port()
        return self._start(timeout)

    def _start(self, timeout: float) -> ServerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        logged = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chunkmq.cli", "serve", "--port", str(self.port),
             "--data-dir", str(self.data_dir)],
            env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code, self.proc = self.proc.returncode, None
                if b"address already in use" in self.log_path.read_bytes()[logged:]:
                    raise PortTaken(self.port)
                raise RuntimeError(f"server exited with {code}:\n{self.log()}")
            try:
                # Ours only when this process listens there: another test's server may answer first.
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200 and self._listening():
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.kill()  # not left running behind the failed test
        raise RuntimeError(f"server did not start in {timeout}s:\n{self.log()}")

    def _listening(self) -> bool:
        assert self.proc is not None
        try:
            connections = psutil.Process(self.proc.pid).net_connections("tcp")
        except psutil.NoSuchProcess:
            return False  # exited: the next poll() says why
        return any(c.status == psutil.CONN_LISTEN and c.laddr.port == self.port for c in connections)

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


def broker_data(data_dir: Path) -> Path:
    """A data directory as a broker's first start leaves its metadata (the database, migrated), for
    the commands that refuse a directory no broker has used (`chunkmq token create`, ...)."""
    from chunkmq.meta import upgrade

    upgrade(f"sqlite:///{data_dir.resolve() / 'meta.db'}")
    return data_dir

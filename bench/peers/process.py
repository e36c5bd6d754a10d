"""A server process the harness owns: started in its own session, measured as a tree, always stopped."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def dir_bytes(path: Path) -> int:
    """Bytes allocated on disk under `path` (like `du`), so sparse or preallocated files count as stored."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                pass  # a file deleted while we walk (log rotation, compaction)
    return total


class ManagedProcess:
    """One child process (and whatever it spawns), in its own session so we can stop exactly that group."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], log_path: Path, cwd: Path | None = None) -> None:
        self.argv = list(argv)
        self.env = env
        self.log_path = log_path
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, ready: Callable[[], bool], timeout: float, what: str) -> float:
        """Poll `ready` until it holds; returns the seconds it took. Raises if the process dies or times out."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if not self.alive():
                raise RuntimeError(f"{what} exited during start-up:\n{self.log_tail()}")
            try:
                if ready():
                    return time.monotonic() - t0
            except Exception:  # any failure means "not ready yet"
                pass
            time.sleep(0.02)
        raise RuntimeError(f"{what} not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except FileNotFoundError:
            return ""

    def _tree(self) -> list[psutil.Process]:
        if not self.alive():
            return []
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def cpu_seconds(self) -> float:
        """User + system CPU of the live tree (children that already exited are not counted)."""
        total = 0.0
        for p in self._tree():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def rss_bytes(self) -> int:
        total = 0
        for p in self._tree():
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the process group, then SIGKILL it if it does not go; idempotent."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers of the group, even when the leader left
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None

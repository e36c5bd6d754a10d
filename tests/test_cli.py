"""`chunkmq serve` with real processes: one server per data directory."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.api.client import bodies, ok, publish, queue
from tests.server import ServerProcess, free_port


def _files(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under root: (size, mtime, content hash)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            st = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns, digest)
    return out


def _serve(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chunkmq.cli", "serve", "--port", str(free_port()), "--data-dir", str(data_dir)],
        env={**os.environ, "CHUNKMQ_AUTH": "off"}, capture_output=True, text=True, timeout=60,
    )


def test_a_second_server_on_a_directory_in_use_fails_fast_and_touches_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = ServerProcess(data, CHUNKMQ_AUTH="off", CHUNKMQ_FSYNC="always").start()
    try:
        with httpx.Client(base_url=first.url, timeout=30) as api:
            queue(api, "q")
            for i in range(20):
                publish(api, "amq.default", *({"body": f"{i}-{j}", "routing_key": "q"} for j in range(50)))
            # frozen, the first server writes nothing (checkpoints, snapshots) while the second tries
            first.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
            try:
                before = _files(data)
                started = time.monotonic()
                second = _serve(data)
                after = _files(data)
            finally:
                first.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
            assert time.monotonic() - started < 10
            assert second.returncode == 1, second.stderr
            lines = [line for line in second.stderr.splitlines() if line.strip()]
            assert len(lines) == 1, second.stderr
            assert str(data.resolve()) in lines[0]
            assert str(first.proc.pid) in lines[0]  # type: ignore[union-attr]
            assert after == before
            # the first server is unharmed: every acknowledged message is there, and it goes on
            assert bodies(api, "q")[:3] == ["0-0", "0-1", "0-2"]
            assert ok(api.get("/api/v1/queues/q"))["messages"] == 1000
            publish(api, "amq.default", {"body": "after", "routing_key": "q"})
            # commands that only touch SQLite keep working while the server runs
            made = subprocess.run(
                [sys.executable, "-m", "chunkmq.cli", "token", "create", "--name", "ops", "--read", ".*",
                 "--data-dir", str(data)], capture_output=True, text=True, timeout=60,
            )
            assert made.returncode == 0, made.stderr
        # after a kill -9 the lock is gone with the process: a new server starts at once
        first.kill()
        first.start()
        with httpx.Client(base_url=first.url, timeout=30) as api:
            assert ok(api.get("/api/v1/queues/q"))["messages"] == 1001
    finally:
        first.stop()


def _login(server: ServerProcess, user: str, password: str, forwarded_for: str) -> httpx.Response:
    with httpx.Client(base_url=server.url, timeout=30, headers={"x-forwarded-for": forwarded_for}) as browser:
        page = browser.get("/login")
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        return browser.post("/login", data={"user": user, "password": password, "csrf": csrf})


def test_x_forwarded_for_counts_only_from_a_proxy_the_setting_names(tmp_path: Path) -> None:
    limits = {"CHUNKMQ_CONSOLE_LOGIN_ATTEMPTS": "3", "CHUNKMQ_CONSOLE_LOGIN_LOCK_SECONDS": "600",
              "CHUNKMQ_CONSOLE_LOGIN_ADDRESS_NAMES": "3"}
    direct = ServerProcess(tmp_path / "direct" / "data", **limits).start()
    try:  # no proxy named: the header cannot pick the address the limit counts
        for user in ("u1", "u2", "u3"):
            assert _login(direct, user, "wrong password", "10.0.0.1").status_code == 401
        refused = _login(direct, "u4", "wrong password", "10.0.0.2")
        assert refused.status_code == 429 and "from this address" in refused.text
    finally:
        direct.stop()
    proxied = ServerProcess(tmp_path / "proxied" / "data", CHUNKMQ_FORWARDED_ALLOW_IPS="127.0.0.1", **limits).start()
    try:
        password = (proxied.data_dir / "admin-password").read_text().strip()
        for user in ("u1", "u2", "u3"):  # guesses across names from one client behind the proxy: refused there
            assert _login(proxied, user, "wrong password", "10.0.0.1").status_code == 401
        assert "from this address" in _login(proxied, "admin", password, "10.0.0.1").text
        for _ in range(3):  # wrong passwords for admin, from another client: admin waits
            assert _login(proxied, "admin", "wrong password", "10.0.0.3").status_code == 401
        locked = _login(proxied, "admin", password, "10.0.0.2")
        assert locked.status_code == 429 and "for this user" in locked.text
        where = ("--data-dir", str(proxied.data_dir))
        unlock = subprocess.run([sys.executable, "-m", "chunkmq.cli", "user", "unlock", "admin", *where],
                                capture_output=True, text=True, timeout=60)
        assert unlock.returncode == 0, unlock.stderr
        assert _login(proxied, "admin", password, "10.0.0.2").status_code == 303
        nobody = subprocess.run([sys.executable, "-m", "chunkmq.cli", "user", "unlock", "nobody", *where],
                                capture_output=True, text=True, timeout=60)
        assert nobody.returncode == 1 and "no user 'nobody'" in nobody.stderr
    finally:
        proxied.stop()


def test_serve_logs_which_codecs_it_runs_and_serves_on_either(tmp_path: Path) -> None:
    """One line per format at start says compiled or pure Python; CHUNKMQ_PURE_PYTHON=1 serves on the
    Python codecs."""
    for name, pure, says in (("c", "0", "compiled"), ("p", "1", "pure Python (CHUNKMQ_PURE_PYTHON is set)")):
        server = ServerProcess(tmp_path / name / "data", CHUNKMQ_AUTH="off", CHUNKMQ_LOG_LEVEL="info",
                               CHUNKMQ_PURE_PYTHON=pure).start()
        try:
            with httpx.Client(base_url=server.url, timeout=30) as api:
                queue(api, "q")
                publish(api, "amq.default", {"body": "one", "routing_key": "q", "tag": "t"})
                publish(api, "amq.default", *({"body": f"m{i}", "routing_key": "q"} for i in range(300)))
                assert bodies(api, "q") == ["one", *(f"m{i}" for i in range(300))]
        finally:
            server.stop()
        for what in ("record codec", "wire batch codec", "blob parser"):
            assert server.log().count(f"{what}:") == 1 and f"{what}: {says}" in server.log(), server.log()

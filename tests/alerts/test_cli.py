"""`chunkmq alerts ...` as real processes: straight on the database beside a running server, and
through the server's API with a token."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.server import ServerProcess


def chunkmq(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chunkmq.cli", "alerts", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def test_add_list_delete_on_the_database_and_over_http(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()  # auth on
    try:
        where = ("--data-dir", str(server.data_dir))
        added = chunkmq("add", "--kind", "lag_seconds", "--threshold", "60", "--queue", "orders.*", "--for", "30",
                        "--to", "a@example.com", "--to", "b@example.com", *where, cwd=tmp_path)
        assert added.returncode == 0, added.stderr
        assert added.stdout.strip() == "3"  # after the two default rules
        # The server reads the rule straight from the database.
        token = (server.data_dir / "admin-token").read_text().strip()
        http = ("--url", server.url, "--token", token)
        listed = chunkmq("list", *http, cwd=tmp_path)
        assert listed.returncode == 0, listed.stderr
        row = next(line for line in listed.stdout.splitlines() if "lag_seconds" in line)
        assert "orders.*" in row and "30.0" in row and "a@example.com, b@example.com" in row
        replaced = chunkmq("add", "--id", "3", "--kind", "no_consumers", "--threshold", "120", *http, cwd=tmp_path)
        assert replaced.returncode == 0, replaced.stderr
        refused = chunkmq("add", "--kind", "disk", "--threshold", "90", "--url", server.url, "--token", "cmq_nope",
                          cwd=tmp_path)
        assert refused.returncode != 0 and "401" in refused.stderr
        assert chunkmq("delete", "3", *where, cwd=tmp_path).returncode == 0
        gone = chunkmq("delete", "3", *http, cwd=tmp_path)
        assert gone.returncode == 1 and "404: alert rule 3 does not exist" in gone.stderr
    finally:
        server.stop()

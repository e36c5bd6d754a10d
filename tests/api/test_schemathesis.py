"""Fuzz every endpoint from the server's own OpenAPI document with every schemathesis check: no
5xx, answers match their declared schemas, content types and `Allow` headers, requests the schema
allows are accepted and requests it forbids are refused, and the token is really needed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.server import ServerProcess

CONFIG = Path(__file__).with_name("schemathesis.toml")


def test_the_server_keeps_its_openapi_contract_under_fuzzing(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()  # tokens on, as shipped
    token = (server.data_dir / "admin-token").read_text().strip()
    try:
        result = subprocess.run(
            [
                str(Path(sys.executable).parent / "schemathesis"), "--config-file", str(CONFIG),
                "run", f"{server.url}/openapi.json", "--checks", "all", "--max-examples", "5", "--seed", "1",
                "--header", f"Authorization: Bearer {token}",
                # One worker: CPython 3.11's ast.parse is not thread-safe, and hypothesis, run by schemathesis
                # workers, hit "AST constructor recursion depth mismatch".
                "--workers", "1", "--request-timeout", "40",
            ],
            capture_output=True, text=True, timeout=400,
        )
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-8000:]
        totals = re.search(r"(\d+) generated, (\d+) passed", output)
        assert totals and int(totals.group(2)) > 1500, output[-3000:]  # the fuzzer really ran
    finally:
        server.stop()
    assert "Traceback" not in server.log(), server.log()[-4000:]

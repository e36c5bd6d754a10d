"""docs/client.md is a contract: every Python block in it runs, in order, against a real broker with
auth on (CHUNKMQ_URL and CHUNKMQ_TOKEN set, as the page says), and its error tree is the client's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import chunkmq
import chunkmq.client.errors
from tests.server import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "client.md"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(GUIDE.read_text())]


def test_every_python_block_of_the_guide_runs_against_a_real_broker(tmp_path: Path) -> None:
    blocks = _blocks()
    # nothing else, nothing untested: the js block runs in Chromium (tests/api/test_cors_browser.py)
    assert {lang for lang, _ in blocks} == {"python", "text", "js", "sh"}
    server = ServerProcess(tmp_path / "data").start()
    try:
        env = {**os.environ, "CHUNKMQ_URL": server.url,
               "CHUNKMQ_TOKEN": (server.data_dir / "admin-token").read_text().strip()}
        ran = 0
        for lang, code in blocks:
            if lang != "python":
                continue
            result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                                    text=True, timeout=120)
            assert result.returncode == 0, f"{code}\n--- stderr:\n{result.stderr}"
            ran += 1
        assert ran >= 12
        shell = [code for lang, code in blocks if lang == "sh"]
        # the first ends with `curl -N`, which runs until stopped: stopped here after 3 s (124)
        streamed = subprocess.run(["timeout", "3", "bash", "-ec", shell[0]], env=env, capture_output=True, text=True)
        assert streamed.returncode == 124, streamed.stderr
        assert 'id: 0\ndata: {"queue":"shell-demo","offset":0' in streamed.stdout, streamed.stdout
        acked = subprocess.run(["bash", "-ec", shell[1]], env=env, capture_output=True, text=True, timeout=30)
        assert acked.returncode == 0 and '"ack_floor":1' in acked.stdout, acked.stdout + acked.stderr
        assert len(shell) == 2
    finally:
        server.stop()


def test_the_guides_error_tree_is_the_clients() -> None:
    (tree,) = [code for lang, code in _blocks() if lang == "text"]
    named = re.findall(r"(\w+)\s+(\d{3})? ?", tree)
    classes = {name for name, _ in named if name[0].isupper()}
    assert classes == {"ChunkmqError", "ApiError", "ConnectionFailed"} | {
        cls.__name__ for cls in chunkmq.client.errors._BY_STATUS.values()}
    for line in tree.splitlines():
        found = re.search(r"([A-Z]\w+)\s+(\d{3}) ", line)
        if found:
            cls = getattr(chunkmq, found.group(1))
            assert issubclass(cls, chunkmq.ApiError) and cls.status == int(found.group(2)), line
    assert issubclass(chunkmq.ConnectionFailed, chunkmq.ChunkmqError)


def test_the_readme_points_to_the_guide_and_its_example_runs(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    assert "](docs/client.md)" in readme
    (example,) = [code for lang, code in (
        (m.group(1), m.group(2)) for m in BLOCK.finditer(readme)) if lang == "python"]
    server = ServerProcess(tmp_path / "data").start()  # the example reads data/admin-token, as after make run
    try:
        result = subprocess.run([sys.executable, "-c", example.replace("http://127.0.0.1:8000", server.url)],
                                cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["0", "{'order':", "17}"]
    finally:
        server.stop()

"""The wheel as users install it: one top-level package, `chunkmq`, that works beside a project's own `app/`."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import httpx

from tests.server import free_port

ROOT = Path(__file__).resolve().parent.parent

CLIENT_SCRIPT = """
from chunkmq import Client

with Client("{url}") as client:
    client.declare_queue("orders")
    client.publish_to_queue("orders", ["one", "two"])
    messages = client.pull("orders", "billing", max_messages=10)
    print(",".join(m.body for m in messages))
"""


def _build_wheel(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = out.glob("chunkmq-*.whl")
    return wheel


def _venv_with(wheel: Path, where: Path) -> Path:
    """A fresh venv holding the wheel; its dependencies are read from the test's own environment
    through a .pth file (a site directory added that way runs none of its own .pth files, so the
    source checkout's editable install stays out)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    site = where / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(where / "bin" / "python"), "install",
                    "--no-deps", "-q", str(wheel)], check=True, capture_output=True, timeout=300)
    return where / "bin"


def test_the_wheel_holds_only_the_chunkmq_package(tmp_path: Path) -> None:
    names = zipfile.ZipFile(_build_wheel(tmp_path)).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"chunkmq", "chunkmq-0.1.0.dist-info"}, tops
    for shipped in ("chunkmq/migrations/env.py", "chunkmq/migrations/versions/0001_initial.py",
                    "chunkmq/static/console.css", "chunkmq/static/favicon.svg", "chunkmq/static/vendor/htmx/htmx.min.js",
                    "chunkmq/web/templates/base.html", "chunkmq/client/__init__.py"):
        assert shipped in names, shipped
    assert any(name.startswith("chunkmq/storage/_recordc.") and name.endswith(".so") for name in names)


def test_without_a_c_compiler_the_build_goes_on_and_the_record_codec_runs_in_python(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib", str(tmp_path / "lib"),
                            "--build-temp", str(tmp_path / "tmp"), "--force"], cwd=ROOT,
                           env={**os.environ, "CC": "false"}, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    assert 'building extension "chunkmq.storage._recordc" failed' in built.stderr
    assert not list(tmp_path.rglob("*.so"))
    # where the module is missing, the store runs (and says it runs) the Python codec
    script = ("import sys; sys.modules['chunkmq.storage._recordc'] = None\n"
              "from chunkmq.storage import MessageColumns, record\n"
              "print(record.IMPLEMENTATION, len(record.encode_batch(MessageColumns([b'x'], [(1,)]), 0, 0, {1: 0}, 9, {})[0]))")
    ran = subprocess.run([sys.executable, "-c", script], env={**os.environ, "CHUNKMQ_PURE_PYTHON": ""},
                         capture_output=True, text=True, timeout=60, check=True)
    assert ran.stdout.split() == ["pure", "Python", "(the", "compiled", "extension", "is", "not", "built)", "18"]


def test_an_installed_wheel_serves_and_its_client_works_beside_a_projects_own_app_package(tmp_path: Path) -> None:
    bin_dir = _venv_with(_build_wheel(tmp_path / "wheel"), tmp_path / "venv")
    project = tmp_path / "project"  # a user's FastAPI project: its own top-level `app`
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text("NAME = 'the-projects-own-app'\n")
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env |= {"CHUNKMQ_AUTH": "off", "CHUNKMQ_CHUNK_SIZE": str(8 << 20), "CHUNKMQ_LOG_LEVEL": "warning"}
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - the child owns it
    server = subprocess.Popen([str(bin_dir / "chunkmq"), "serve", "--port", str(port), "--data-dir", "data"],
                              cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.1)
        script = CLIENT_SCRIPT.format(url=url)
        out = subprocess.run([str(bin_dir / "python"), "-c", script], cwd=project, env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "one,two"
        # from the project's directory `app` is still the project's own
        own = subprocess.run([str(bin_dir / "python"), "-c", "import app, chunkmq; print(app.NAME, chunkmq.__file__)"],
                             cwd=project, env=env, capture_output=True, text=True, timeout=60)
        assert own.returncode == 0, own.stderr
        name, location = own.stdout.split(" ", 1)
        assert name == "the-projects-own-app"
        assert location.strip().startswith(str(tmp_path / "venv"))
    finally:
        server.terminate()
        server.wait(timeout=30)

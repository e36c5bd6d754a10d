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
import pytest
from packaging.requirements import Requirement

from tests.server import ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent

CLIENT_SCRIPT = """
from chunkmq import Client

with Client("{url}") as client:
    client.declare_queue("orders")
    client.publish_to_queue("orders", ["one", "two"])
    messages = client.pull("orders", "billing", max_messages=10)
    print(",".join(m.body for m in messages))
"""


# What a client user gets from `pip install chunkmq`; the broker's dependencies are `chunkmq[server]`.
CLIENT_DEPENDENCIES = {"httpx", "websockets", "orjson"}
SERVER_ONLY = {"fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "jinja2", "pyarrow", "numpy",
               "pydantic", "uvloop", "httptools", "rich", "isal"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built once for the module's tests (a build compiles the record codec)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (built,) = out.glob("chunkmq-*.whl")
    return built


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


def test_the_wheel_holds_only_the_chunkmq_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"chunkmq", "chunkmq-0.1.0.dist-info"}, tops
    for shipped in ("chunkmq/migrations/env.py", "chunkmq/migrations/versions/0001_initial.py",
                    "chunkmq/static/console.css", "chunkmq/static/favicon.svg",
                    "chunkmq/static/vendor/htmx/htmx.min.js", "chunkmq/web/templates/base.html",
                    "chunkmq/client/__init__.py"):
        assert shipped in names, shipped
    for twin in ("storage/_recordc", "wire/_batchc", "broker/_blobc"):  # the formats' compiled twins
        assert any(name.startswith(f"chunkmq/{twin}.") and name.endswith(".so") for name in names), twin


def test_without_a_c_compiler_the_build_goes_on_and_the_record_codec_runs_in_python(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib", str(tmp_path / "lib"),
                            "--build-temp", str(tmp_path / "tmp"), "--force"], cwd=ROOT,
                           env={**os.environ, "CC": "false"}, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    for twin in ("storage._recordc", "wire._batchc", "broker._blobc"):
        assert f'building extension "chunkmq.{twin}" failed' in built.stderr
    assert not list(tmp_path.rglob("*.so"))
    # where the module is missing, the store runs (and says it runs) the Python codec
    script = ("import sys; sys.modules['chunkmq.storage._recordc'] = None\n"
              "from chunkmq.storage import MessageColumns, record, record_encode\n"
              "columns = MessageColumns([b'x'], [(1,)])\n"
              "print(record.IMPLEMENTATION, len(record_encode.encode_batch(columns, 0, 0, {1: 0}, 9, {})[0]))")
    ran = subprocess.run([sys.executable, "-c", script], env={**os.environ, "CHUNKMQ_PURE_PYTHON": ""},
                         capture_output=True, text=True, timeout=60, check=True)
    assert ran.stdout.split() == ["pure", "Python", "(the", "compiled", "extension", "is", "not", "built)", "18"]


def test_an_installed_wheel_serves_and_its_client_works_beside_a_projects_own_app_package(
    wheel: Path, tmp_path: Path
) -> None:
    bin_dir = _venv_with(wheel, tmp_path / "venv")
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


def _requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("chunkmq-0.1.0.dist-info/METADATA").decode()
    return [Requirement(line.split(":", 1)[1].strip()) for line in metadata.splitlines()
            if line.startswith("Requires-Dist:")]


def test_the_wheel_requires_only_the_clients_dependencies_and_the_broker_is_the_server_extra(wheel: Path) -> None:
    requirements = _requirements(wheel)
    plain = {r.name.lower() for r in requirements if r.marker is None}
    assert plain == CLIENT_DEPENDENCIES
    server = {r.name.lower().replace("_", "-") for r in requirements
              if r.marker is not None and r.marker.evaluate({"extra": "server"})}
    assert server >= SERVER_ONLY - {"starlette"}, SERVER_ONLY - server  # starlette comes with fastapi
    # the subclassed uvicorn is held to the exact release the tests ran (tests/http/test_uvicorn_shape.py)
    (uvicorn,) = (r for r in requirements if r.name == "uvicorn")
    assert list(uvicorn.specifier) and all(s.operator == "==" for s in uvicorn.specifier)
    assert uvicorn.specifier.contains("0.54.0") and not uvicorn.specifier.contains("0.54.1")


def test_pip_install_chunkmq_gives_a_working_client_and_no_server_dependency(wheel: Path, tmp_path: Path) -> None:
    """A real `pip install` of the wheel into an empty venv (versions from constraints.txt), then the
    client against a real server: nothing of the broker's stack is installed, and none is needed."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q",
                                "--constraint", str(ROOT / "constraints.txt"), str(wheel)],
                               capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr
    listed = subprocess.run([sys.executable, "-m", "pip", "--python", python, "list", "--format=freeze"],
                            capture_output=True, text=True, timeout=120, check=True).stdout
    names = {line.split("==")[0].lower().replace("_", "-") for line in listed.splitlines() if "==" in line}
    assert CLIENT_DEPENDENCIES | {"chunkmq"} <= names
    assert not names & SERVER_ONLY, names & SERVER_ONLY
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    try:
        env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
        out = subprocess.run([python, "-c", CLIENT_SCRIPT.format(url=server.url)], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "one,two"
        # the command line says what is missing, in one line, instead of a traceback
        serve = subprocess.run([str(venv / "bin" / "chunkmq"), "serve"], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=60)
        assert serve.returncode == 2
        (line,) = serve.stderr.strip().splitlines()
        assert line.startswith("chunkmq: this command needs the server extra (no module named ")
        assert line.endswith(": pip install 'chunkmq[server]'")
    finally:
        server.stop()


def test_constraints_pin_every_dependency_within_the_projects_ranges() -> None:
    """constraints.txt (`make lock`) holds one exact version of every dependency of every extra,
    inside the range pyproject.toml allows: an install from it is the tested one."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pinned[name.lower().replace("_", "-")] = version.strip()
    declared = [Requirement(r) for r in project["dependencies"]]
    declared += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    for requirement in declared:
        name = requirement.name.lower().replace("_", "-")
        if name == "chunkmq":
            continue
        assert name in pinned, f"{name} is not in constraints.txt: run make lock"
        assert requirement.specifier.contains(pinned[name]), f"{name}=={pinned[name]} is outside {requirement}"
    make = (ROOT / "Makefile").read_text()
    assert "--constraint constraints.txt" in make and "\nlock:" in make

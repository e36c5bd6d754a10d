"""The client needs none of the server's modules: imported where they cannot be, it still publishes
and pulls from a real server, in both encodings."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.server import ServerProcess

# A process in which the server's packages and their dependencies cannot be imported.
_BLOCKED = textwrap.dedent("""
    import importlib.abc, sys

    BLOCKED = ("fastapi", "starlette", "sqlalchemy", "uvicorn", "jinja2", "pyarrow", "chunkmq.broker",
               "chunkmq.storage", "chunkmq.api", "chunkmq.web", "chunkmq.meta")

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ImportError(f"{name} is blocked: the client must not need it")
            return None

    sys.meta_path.insert(0, Blocker())
""")

_USE = textwrap.dedent("""
    import sys
    from chunkmq import Client, NotFound

    url, queue = sys.argv[1], sys.argv[2]
    try:
        import chunkmq.broker.message
    except ImportError:
        pass
    else:
        raise SystemExit("the blocker let chunkmq.broker through")
    with Client(url) as mq:
        mq.declare_queue(queue)
        sent = mq.publish_to_queue(queue, ["a", b"\\x00b"], binary=True)
        assert [r.routed[0].offset for r in sent.results] == [0, 1], sent.results
        mq.publish_to_queue(queue, ["c"])
        pulled = mq.pull_batch(queue, "g", 10)
        assert pulled.bodies == ["a", b"\\x00b", "c"], pulled.bodies
        assert [m.body for m in mq.pull(queue, "g2", 10)] == ["a", b"\\x00b", "c"]
        try:
            mq.queue(queue + "-none")
        except NotFound as e:
            assert e.code == "queue_not_found"
        else:
            raise SystemExit("no NotFound")
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("fastapi", "sqlalchemy", "pyarrow", "uvicorn")
                    or m.startswith(("chunkmq.broker", "chunkmq.storage", "chunkmq.api", "chunkmq.meta")))
    assert not loaded, loaded
    print("ok")
""")


def test_the_client_works_without_the_server_modules(shared_server: ServerProcess, name: str) -> None:
    done = subprocess.run([sys.executable, "-c", _BLOCKED + _USE, shared_server.url, name],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"

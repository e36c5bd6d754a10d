"""What pyproject.toml cannot compute: the repository's `app/` is installed as the package `chunkmq`.

The migration scripts (`alembic/`) and the browser assets (`static/`) go inside it, so that a wheel
has no top-level name but `chunkmq` (app/resources.py finds them in either layout).

The compiled twins of the byte formats' hot loops (the record codec app/storage/_recordc.c, the wire
batch app/wire/_batchc.c, the blob parser app/broker/_blobc.c) are built with the machine's C compiler
and Python headers; each is optional: where one cannot be built the install goes on and chunkmq runs
its pure-Python twin (`chunkmq serve` logs which ones run). CFLAGS/LDFLAGS from the environment are added
(`make asan` builds it with AddressSanitizer that way).
"""

from setuptools import Extension, find_packages, setup

setup(
    packages=[
        "chunkmq",
        *(f"chunkmq.{name}" for name in find_packages("app")),
        "chunkmq.migrations",
        "chunkmq.migrations.versions",
        "chunkmq.static",
    ],
    package_dir={"chunkmq": "app", "chunkmq.migrations": "alembic", "chunkmq.static": "static"},
    ext_modules=[
        Extension(f"chunkmq.{module}", [f"app/{module.replace('.', '/')}.c"], extra_compile_args=["-Wall", "-Werror"],
                  optional=True)
        for module in ("storage._recordc", "wire._batchc", "broker._blobc")
    ],
    package_data={
        "chunkmq.web": ["templates/*"],
        "chunkmq.migrations": ["script.py.mako"],
        "chunkmq.static": ["*.css", "*.js", "*.svg", "vendor/**/*"],
    },
)

"""What pyproject.toml cannot compute: the repository's `app/` is installed as the package `chunkmq`.

The migration scripts (`alembic/`) and the browser assets (`static/`) go inside it, so that a wheel
has no top-level name but `chunkmq` (app/resources.py finds them in either layout).

The record codec's compiled twin (app/storage/_recordc.c) is built with the machine's C compiler and
Python headers; it is optional: where it cannot be built the install goes on and chunkmq runs the
pure-Python codec (`chunkmq serve` logs which one). CFLAGS/LDFLAGS from the environment are added
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
        Extension("chunkmq.storage._recordc", ["app/storage/_recordc.c"],
                  extra_compile_args=["-Wall", "-Werror"], optional=True),
    ],
    package_data={
        "chunkmq.web": ["templates/*"],
        "chunkmq.migrations": ["script.py.mako"],
        "chunkmq.static": ["*.css", "*.js", "*.svg", "vendor/**/*"],
    },
)

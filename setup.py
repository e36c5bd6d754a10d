"""What pyproject.toml cannot compute: the repository's `app/` is installed as the package `chunkmq`.

The migration scripts (`alembic/`) and the browser assets (`static/`) go inside it, so that a wheel
has no top-level name but `chunkmq` (app/resources.py finds them in either layout).
"""

from setuptools import find_packages, setup

setup(
    packages=[
        "chunkmq",
        *(f"chunkmq.{name}" for name in find_packages("app")),
        "chunkmq.migrations",
        "chunkmq.migrations.versions",
        "chunkmq.static",
    ],
    package_dir={"chunkmq": "app", "chunkmq.migrations": "alembic", "chunkmq.static": "static"},
    package_data={
        "chunkmq.web": ["templates/*"],
        "chunkmq.migrations": ["script.py.mako"],
        "chunkmq.static": ["*.css", "*.js", "*.svg", "vendor/**/*"],
    },
)

"""The auth tests use the metadata fixtures: a migrated database (SQLite and PostgreSQL) and a MetaStore over it."""

from tests.meta.conftest import meta_url, sqlite_url, store

__all__ = ["meta_url", "sqlite_url", "store"]

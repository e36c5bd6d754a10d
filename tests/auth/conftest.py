"""The auth tests use the metadata fixtures: a migrated SQLite file and a MetaStore over it."""

from tests.meta.conftest import meta_url, store

__all__ = ["meta_url", "store"]

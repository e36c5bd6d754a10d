"""The first admin token and console user: made on the first start, so a fresh broker is reachable
but never open.

This is the one module of app/auth that uses app/meta (tokens.py, passwords.py and permissions.py
are standard-library only and are used by app/meta).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from chunkmq.storage.files import DIR_MODE, FILE_MODE

if TYPE_CHECKING:
    from chunkmq.meta.repository import MetaStore

ADMIN_TOKEN_FILE = "admin-token"
ADMIN_TOKEN_NAME = "admin (bootstrap)"


def _write_private(path: Path, text: str) -> None:
    """Write `text` to `path` readable by the owner only: created 0600 (never briefly wider), fsynced,
    then renamed into place, so a crash leaves the old file or the new one, not half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def bootstrap_admin_token(meta: MetaStore, data_dir: Path) -> str | None:
    """When no token exists: create an admin token, write it to <data_dir>/admin-token (mode 0600)
    and return it, for the server to print once. Otherwise None."""
    if meta.has_tokens():
        return None
    row, plain = meta.create_token(ADMIN_TOKEN_NAME, is_admin=True)
    try:
        data_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        _write_private(data_dir / ADMIN_TOKEN_FILE, plain + "\n")
    except BaseException:
        # A token nobody can read would stop the next start from bootstrapping: take it back.
        meta.delete_token(row.id)
        raise
    return plain


ADMIN_USER = "admin"
ADMIN_PASSWORD_FILE = "admin-password"


def bootstrap_admin_user(meta: MetaStore, data_dir: Path) -> str | None:
    """When no console user exists: create `admin` with a random password, write the password to
    <data_dir>/admin-password (mode 0600) and return it, for the server to print once. Otherwise None."""
    if meta.has_users():
        return None
    password = secrets.token_urlsafe(18)
    meta.create_user(ADMIN_USER, password, is_admin=True)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        _write_private(data_dir / ADMIN_PASSWORD_FILE, password + "\n")
    except BaseException:
        meta.delete_user(ADMIN_USER)  # a password nobody can read would lock the console for good
        raise
    return password

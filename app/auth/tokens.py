"""API tokens: how they are made and how they are stored (only a hash).

A token is "cmq_" + 32 random bytes in URL-safe base64 (47 characters). Its sha256 hex is what the
database keeps: the token has 256 bits of entropy, so a fast unsalted hash is enough (a salt or a slow
hash protects guessable secrets such as passwords, see passwords.py), and lookup stays one index probe.

This module and passwords.py / permissions.py use only the standard library, so app/meta may import
them; bootstrap.py is the one auth module that depends on app/meta.
"""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "cmq_"
DISPLAY_PREFIX_LEN = 8


def generate_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def display_prefix(token: str) -> str:
    """The first characters, enough to tell tokens apart in a list without revealing them."""
    return token[:DISPLAY_PREFIX_LEN]

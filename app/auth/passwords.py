"""Password hashing with scrypt from the standard library.

Stored form: "scrypt$<n>$<r>$<p>$<salt hex>$<hash hex>", so the cost can be raised later and old
hashes still verify.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets

_N, _R, _P = 2**14, 8, 1  # ~16 MiB and a few tens of ms per check: OWASP's scrypt minimum
_SALT_BYTES = 16
MIN_PASSWORD_LENGTH = 12  # NIST SP 800-63B asks for 8 at least; a console that runs a broker deserves more
_KEY_BYTES = 32


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password.encode(), salt=salt, n=n, r=r, p=p, dklen=_KEY_BYTES, maxmem=128 * n * r * p + 1024 * 1024
    )


def password_problem(password: str) -> str | None:
    """Why `password` may not be a console user's password, or None when it may."""
    if len(password) < MIN_PASSWORD_LENGTH:
        return f"a password needs at least {MIN_PASSWORD_LENGTH} characters (this one has {len(password)})"
    return None


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(_SALT_BYTES)
    key = _scrypt(password, salt, _N, _R, _P)
    return f"scrypt${_N}${_R}${_P}${salt.hex()}${key.hex()}"


def verify_password(password: str, stored: str) -> bool:
    """True when `password` matches `stored`; False for a wrong password or a malformed hash."""
    try:
        scheme, n, r, p, salt, key = stored.split("$")
        if scheme != "scrypt":
            return False
        actual = _scrypt(password, bytes.fromhex(salt), int(n), int(r), int(p))
        return hmac.compare_digest(actual, bytes.fromhex(key))
    except ValueError:
        return False


@functools.cache
def _dummy_hash() -> str:
    return hash_password(secrets.token_urlsafe(16))


def burn_verify(password: str) -> None:
    """Spend the time of one verification, for a login whose user does not exist, so the answer's
    timing does not reveal which user names exist."""
    verify_password(password, _dummy_hash())

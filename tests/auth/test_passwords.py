from __future__ import annotations

from chunkmq.auth.passwords import hash_password, verify_password


def test_hash_is_salted_and_verifies() -> None:
    a, b = hash_password("pw"), hash_password("pw")
    assert a != b and a.startswith("scrypt$16384$8$1$")
    assert verify_password("pw", a) and verify_password("pw", b)
    assert not verify_password("pW", a)


def test_malformed_hashes_do_not_verify() -> None:
    for stored in ["", "scrypt$1$2", "bcrypt$16384$8$1$00$00", "scrypt$16384$8$1$zz$zz"]:
        assert not verify_password("pw", stored)

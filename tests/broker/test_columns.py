import struct

from chunkmq.broker.columns import column_bytes


def test_a_column_is_its_values_little_endian_back_to_back() -> None:
    assert column_bytes("H", [1, 0x0203]) == b"\x01\x00\x03\x02"
    values = [0, 1, 2**32, 2**64 - 1]
    assert column_bytes("Q", values) == struct.pack("<4Q", *values)
    assert column_bytes("I", []) == b""

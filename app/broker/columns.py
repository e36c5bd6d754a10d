"""Little-endian integer columns: the fixed-size fields of a binary batch (docs/api.md, "Binary
batches"), written by the server's answers and by the Python client's requests."""

from __future__ import annotations

import array
import struct
import sys
from collections.abc import Sequence


def column_bytes(code: str, values: Sequence[int]) -> bytes:
    """The little-endian column of `values`, each an `array`/`struct` type `code` (B, H, I, Q)."""
    column = array.array(code, values)
    if column.itemsize != struct.calcsize("<" + code):  # a platform whose C types have other sizes
        return struct.pack(f"<{len(values)}{code}", *values)
    if sys.byteorder == "big":
        column.byteswap()
    return column.tobytes()

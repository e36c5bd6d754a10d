"""WebSocket data frames (RFC 6455, section 5.2) as the streams' hot paths read and write them, past
websockets' frame parser and writer: a chunk that is exactly one whole final text or binary frame,
and the frame of one message. The server's protocol (app/http/protocol.py) and the Python client's
DirectConnection (app/client/_ws.py) use it on every message of a stream; everything else (control
frames, fragments, frames cut across chunks, extensions) stays websockets'.

No extension is ever negotiated on a stream (both sides connect without compression), so the RSV bits
are always 0. A client's frames are masked, a server's are not. Standard library only: the masking
itself is websockets' `apply_mask` (C), which the client and the server's protocol call.
"""

from __future__ import annotations

TEXT, BINARY = 0x81, 0x82  # the first byte of a final (FIN) text or binary frame without RSV bits
MASKED = 0x80  # bit 7 of the second byte
KEY = 4  # bytes of a masking key


def head(size: int, text: bool, masked: bool = False) -> bytes:
    """The header of one final, unfragmented text or binary frame of `size` payload bytes (without
    the masking key, which follows it when `masked`)."""
    first, mask = TEXT if text else BINARY, MASKED if masked else 0
    if size < 126:
        return bytes((first, mask | size))
    if size < 0x10000:
        return bytes((first, mask | 126)) + size.to_bytes(2, "big")
    return bytes((first, mask | 127)) + size.to_bytes(8, "big")


def whole(data: bytes, masked: bool, max_size: int | None) -> int:
    """Where the payload starts when `data` is exactly one whole final text or binary frame, masked
    as `masked` says (its key the KEY bytes before that), of at most `max_size` bytes; 0 for anything
    else (a control frame, a fragment, part of a frame or more than one, RSV bits, a wrong mask bit)."""
    if len(data) < 2 or data[0] not in (TEXT, BINARY) or bool(data[1] & MASKED) is not masked:
        return 0
    extent = _extent(data, 0)
    if extent is None:
        return 0
    start, size = extent
    if len(data) != start + size or (max_size is not None and size > max_size):
        return 0
    return start


def next_frame(data: bytes, at: int) -> int | None:
    """Where the next frame starts after `data`, counted from the chunk after it, given that one
    starts `at` bytes into `data` (or `at - len(data)` bytes after it); None when a frame header is
    cut by the chunk's end."""
    end = len(data)
    while at < end:
        extent = _extent(data, at)
        if extent is None:
            return None
        at += extent[0] + extent[1]
    return at - end


def _extent(data: bytes, at: int) -> tuple[int, int] | None:
    """(header bytes, masking key included; payload bytes) of the frame that starts at `at`; None
    when `data` ends within its header."""
    if len(data) - at < 2:
        return None
    size, start = data[at + 1] & 0x7F, 2
    if size >= 126:
        start = 4 if size == 126 else 10
        if len(data) - at < start:
            return None
        size = int.from_bytes(data[at + 2:at + start], "big")
    return start + (KEY if data[at + 1] & MASKED else 0), size

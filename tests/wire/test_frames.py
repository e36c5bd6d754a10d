"""The data frames the streams write and read past websockets (app/wire/frames.py), held to
websockets' own frame writer and parser: the same bytes for a server's frames, and for a client's
(masked with a random key) frames websockets reads back as the same message."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from websockets.frames import Frame, Opcode, apply_mask
from websockets.streams import StreamReader

from chunkmq.wire import frames

SIZES = [0, 1, 125, 126, 127, 1000, 0xFFFF, 0x10000, 70_000]


def parsed(data: bytes, mask: bool) -> Frame:
    """websockets' reading of one frame (as a server reads a client's when `mask`)."""
    reader = StreamReader()
    reader.feed_data(data)
    parser = Frame.parse(reader.read_exact, mask=mask)
    try:
        next(parser)
    except StopIteration as done:
        frame: Frame = done.value
        assert reader.buffer == b""  # nothing left over
        return frame
    raise AssertionError("websockets wants more bytes")


def masked_frame(payload: bytes, text: bool, key: bytes) -> bytes:
    return frames.head(len(payload), text, masked=True) + key + apply_mask(payload, key)


def test_a_server_s_frame_is_the_one_websockets_writes() -> None:
    for size in SIZES:
        payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
        for text, opcode in ((True, Opcode.TEXT), (False, Opcode.BINARY)):
            assert frames.head(size, text) + payload == Frame(opcode, payload).serialize(mask=False)


@given(st.binary(max_size=300), st.booleans(), st.binary(min_size=4, max_size=4))
def test_a_client_s_frame_reads_back_through_websockets(payload: bytes, text: bool, key: bytes) -> None:
    frame = parsed(masked_frame(payload, text, key), mask=True)
    assert (frame.opcode, frame.data, frame.fin) == (Opcode.TEXT if text else Opcode.BINARY, payload, True)


def test_long_frames_read_back_through_websockets() -> None:
    for size in SIZES:
        payload = b"q" * size
        assert parsed(masked_frame(payload, False, b"\x01\x02\x03\x04"), mask=True).data == payload
        data = frames.head(size, True) + payload
        assert data[frames.whole(data, False, None):] == payload


def test_whole_finds_the_payload_of_exactly_one_final_data_frame() -> None:
    for size in SIZES:
        payload = b"p" * size
        server = Frame(Opcode.BINARY, payload).serialize(mask=False)
        assert server[frames.whole(server, False, None):] == payload
        client = Frame(Opcode.TEXT, payload).serialize(mask=True)
        start = frames.whole(client, True, None)
        assert apply_mask(client[start:], client[start - frames.KEY:start]) == payload
        assert frames.whole(client, False, None) == 0  # masked, where it must not be
        assert frames.whole(server, True, None) == 0  # and the other way round
        if size:
            assert frames.whole(server, False, size - 1) == 0  # over max_size
            assert frames.whole(server[:-1], False, None) == 0  # cut
        assert frames.whole(server + server, False, None) == 0  # two frames


def test_whole_leaves_everything_else_to_websockets() -> None:
    others = [
        Frame(Opcode.TEXT, b"part", fin=False).serialize(mask=False),  # a fragment
        Frame(Opcode.CONT, b"rest").serialize(mask=False),  # its continuation
        Frame(Opcode.PING, b"").serialize(mask=False),
        Frame(Opcode.CLOSE, b"\x03\xe8").serialize(mask=False),
        bytes([0xC1, 1]) + b"x",  # RSV1: an extension's bit
        b"", b"\x82",
    ]
    assert [frames.whole(data, False, None) for data in others] == [0] * len(others)


@given(st.binary(max_size=40))
def test_whole_never_fails_on_any_bytes(data: bytes) -> None:
    start = frames.whole(data, False, None)
    assert start == 0 or parsed(data, mask=False).data == data[start:]


def test_next_frame_finds_where_the_next_frame_starts() -> None:
    short, masked, long = bytes([0x82, 3]) + b"abc", bytes([0x81, 0x82]) + b"kkkk" + b"xy", \
        bytes([0x82, 126, 1, 0]) + b"z" * 256
    assert frames.next_frame(short + masked, 0) == 0
    assert frames.next_frame(short + masked[:4], 0) == 4  # the rest of its mask and payload first
    assert frames.next_frame(long[:100], 0) == len(long) - 100
    assert frames.next_frame(b"z" * 10, 50) == 40  # still within a frame
    assert frames.next_frame(b"z" * 5 + short, 5) == 0
    assert frames.next_frame(short + long[:3], 0) is None  # a header cut: lost
    assert frames.next_frame(short + long[:1], 0) is None

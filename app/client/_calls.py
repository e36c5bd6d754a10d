"""Every HTTP call of the API, described once as data; the sync and async clients only execute them.

A `Call` names the method, path, JSON body and how to turn the answer into a typed result, so the
two clients cannot drift apart.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlencode

import orjson

from chunkmq.client import _batch
from chunkmq.client._http import Response
from chunkmq.client.errors import from_body
from chunkmq.client.models import (
    _NO_JSON,
    AckResult,
    BindingInfo,
    ExchangeInfo,
    GroupInfo,
    Message,
    NackResult,
    OutgoingMessage,
    Page,
    Published,
    PulledBatch,
    QueueInfo,
    json_text,
)

T = TypeVar("T")
MessageLike = str | bytes | OutgoingMessage
NO_JSON = _NO_JSON
_NOT_A_MESSAGE = ("a {} is not a message: publish it as a JSON body with json=..., or describe a message "
                  "with OutgoingMessage(body or json=..., headers=..., tag=..., ...)")
_JSON_HEADERS = {"content-type": "application/json"}
_BATCH_HEADERS = {"content-type": _batch.MEDIA_TYPE}
_SEND_BATCH_HEADERS = {"content-type": _batch.MEDIA_TYPE, "accept": _batch.MEDIA_TYPE}
_ASK_BATCH_HEADERS = {"accept": _batch.MEDIA_TYPE}
_JSON_ASK_BATCH_HEADERS = {"content-type": "application/json", "accept": _batch.MEDIA_TYPE}


def auth_headers(token: str | None) -> dict[str, str]:
    """The headers every request and stream of a client with this token sends."""
    return {"authorization": f"Bearer {token}"} if token else {}


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request of the API: what to send, and how its answer becomes the result."""

    method: str
    path: str
    parse: Callable[[Any], T]
    body: Any = None
    params: Mapping[str, Any] | None = None
    extra_seconds: float = 0.0  # on top of the client's timeout: long polls
    batch: bytes | None = None  # a binary batch body (app/client/_batch.py) instead of the JSON body
    binary_answer: bool = False  # ask for a binary batch answer; `parse` gets the Response

    @property
    def target(self) -> str:
        """The path and its query."""
        return f"{self.path}?{urlencode(self.params)}" if self.params else self.path

    def content(self) -> tuple[bytes | None, dict[str, str] | None]:
        """The request's body and the headers that describe it."""
        if self.batch is not None:
            return self.batch, _SEND_BATCH_HEADERS if self.binary_answer else _BATCH_HEADERS
        content = orjson.dumps(self.body) if self.body is not None else None
        if self.binary_answer:
            return content, _JSON_ASK_BATCH_HEADERS if content is not None else _ASK_BATCH_HEADERS
        return content, _JSON_HEADERS if content is not None else None

    def finish(self, response: Response) -> T:
        if self.binary_answer and response.status < 400:
            return self.parse(response)
        content = response.content
        data = orjson.loads(content) if content else None
        if response.status >= 400:
            raise from_body(response.status, data)
        return self.parse(data)


def _none(_: Any) -> None:
    return None


def _list(parse: Callable[[Any], T]) -> Callable[[Any], list[T]]:
    return lambda items: [parse(item) for item in items]


def exchange_path(name: str) -> str:
    """The default exchange has no name; in URLs it is `amq.default`."""
    return name or "amq.default"


def to_publish(messages: MessageLike | Iterable[MessageLike] | None, json: Any) -> MessageLike | Iterable[MessageLike]:
    """What a publish call sends: its messages, or one message whose body is `json` as JSON text."""
    if json is NO_JSON:
        if messages is None:
            raise TypeError("give the messages to publish, or json=value")
        return messages
    if messages is not None:
        raise TypeError("give messages or json=value, not both")
    return json_text(json)


def encode_messages(
    messages: MessageLike | Iterable[MessageLike], routing_key: str = ""
) -> list[dict[str, Any]]:
    """Messages in the API's shape: str -> text body, bytes -> base64 body, OutgoingMessage -> its
    fields. One str, bytes or OutgoingMessage is one message (a str is not six one-letter
    messages); a list or tuple is a batch. A dict is neither (is it a JSON body or a message's
    fields?): a TypeError that says how to publish either."""
    if isinstance(messages, str | bytes | bytearray | memoryview | OutgoingMessage):
        messages = [messages]
    elif isinstance(messages, Mapping):
        raise TypeError(_NOT_A_MESSAGE.format(type(messages).__name__))
    elif not isinstance(messages, list | tuple):
        raise TypeError(f"cannot publish a {type(messages).__name__}: give one message or a list of them")
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, str):
            out.append({"body": m, "routing_key": routing_key})
        elif isinstance(m, bytes | bytearray | memoryview):
            out.append({"body_base64": base64.b64encode(m).decode(), "routing_key": routing_key})
        elif isinstance(m, OutgoingMessage):
            out.append(m.to_json(routing_key))
        elif isinstance(m, Mapping):
            raise TypeError(_NOT_A_MESSAGE.format(type(m).__name__))
        else:
            raise TypeError(f"cannot publish a {type(m).__name__}: give str, bytes or OutgoingMessage")
    return out


# ------------------------------------------------------------------------------------- exchanges

def list_exchanges() -> Call[list[ExchangeInfo]]:
    return Call("GET", "/api/v1/exchanges", _list(ExchangeInfo.from_json))


def get_exchange(name: str) -> Call[ExchangeInfo]:
    return Call("GET", f"/api/v1/exchanges/{exchange_path(name)}", ExchangeInfo.from_json)


def declare_exchange(name: str, type: str, alternate_exchange: str | None) -> Call[ExchangeInfo]:
    body = {"type": type, "alternate_exchange": alternate_exchange}
    return Call("PUT", f"/api/v1/exchanges/{name}", ExchangeInfo.from_json, body)


def delete_exchange(name: str, if_unused: bool) -> Call[None]:
    params = {"if_unused": "true"} if if_unused else None
    return Call("DELETE", f"/api/v1/exchanges/{name}", _none, params=params)


# ---------------------------------------------------------------------------------------- queues

def list_queues(limit: int | None = None, after: str | None = None) -> Call[list[QueueInfo]]:
    """Every queue, or with `limit` and/or `after` one page of them (docs/api.md, Queues)."""
    params = {k: v for k, v in (("limit", limit), ("after", after)) if v is not None}
    return Call("GET", "/api/v1/queues", _list(QueueInfo.from_json), params=params or None)


def get_queue(name: str) -> Call[QueueInfo]:
    return Call("GET", f"/api/v1/queues/{name}", QueueInfo.from_json)


def declare_queue(name: str, settings: Mapping[str, Any]) -> Call[QueueInfo]:
    return Call("PUT", f"/api/v1/queues/{name}", QueueInfo.from_json, dict(settings))


def update_queue(name: str, changes: Mapping[str, Any]) -> Call[QueueInfo]:
    return Call("PATCH", f"/api/v1/queues/{name}", QueueInfo.from_json, dict(changes))


def delete_queue(name: str, force: bool) -> Call[None]:
    return Call("DELETE", f"/api/v1/queues/{name}", _none, params={"force": "true"} if force else None)


def purge(name: str) -> Call[int]:
    return Call("POST", f"/api/v1/queues/{name}/purge", lambda d: int(d["purged"]))


def browse(queue: str, offset: int | None, timestamp: int | None, limit: int) -> Call[Page]:
    params: dict[str, Any] = {"limit": limit}
    if offset is not None:
        params["offset"] = offset
    if timestamp is not None:
        params["timestamp"] = timestamp
    return Call("GET", f"/api/v1/queues/{queue}/messages", Page.from_json, params=params)


def get_message(message_id: str) -> Call[Message]:
    return Call("GET", f"/api/v1/messages/{message_id}", Message.from_json)


# -------------------------------------------------------------------------------------- bindings

def list_bindings(exchange: str | None, queue: str | None) -> Call[list[BindingInfo]]:
    params = {k: v for k, v in (("exchange", exchange), ("queue", queue)) if v is not None}
    return Call("GET", "/api/v1/bindings", _list(BindingInfo.from_json), params=params)


def bind(exchange: str, queue: str, routing_key: str, arguments: Mapping[str, str] | None) -> Call[BindingInfo]:
    body = {"exchange": exchange, "queue": queue, "routing_key": routing_key, "arguments": dict(arguments or {})}
    return Call("POST", "/api/v1/bindings", BindingInfo.from_json, body)


def unbind(binding_id: int) -> Call[None]:
    return Call("DELETE", f"/api/v1/bindings/{binding_id}", _none)


# --------------------------------------------------------------------------------------- publish

def publish(exchange: str, messages: MessageLike | Iterable[MessageLike], routing_key: str, mandatory: bool,
            binary: bool | None, ttl_ms: int | None = None) -> Call[Published]:
    return _publish(f"/api/v1/exchanges/{exchange_path(exchange)}/publish", messages, routing_key, mandatory, binary,
                    ttl_ms)


def publish_to_queue(queue: str, messages: MessageLike | Iterable[MessageLike], mandatory: bool,
                     binary: bool | None, ttl_ms: int | None = None) -> Call[Published]:
    return _publish(f"/api/v1/queues/{queue}/publish", messages, "", mandatory, binary, ttl_ms)


def _publish(path: str, messages: MessageLike | Iterable[MessageLike], routing_key: str, mandatory: bool,
             binary: bool | None, ttl_ms: int | None = None) -> Call[Published]:
    """A binary batch body when `binary`, or by default (None) when no message needs JSON (headers,
    a tag, an idempotency key, a ttl); else the JSON body. `ttl_ms`: of every message without its own."""
    batch = None
    if ttl_ms is not None:
        if binary:
            raise ValueError(_batch.NEEDS_JSON)
        binary = False
    if binary is not False:
        if isinstance(messages, str | bytes | bytearray | memoryview | OutgoingMessage):
            messages = [messages]
        if isinstance(messages, list | tuple) and messages:
            try:
                batch = (_batch.encode(messages, routing_key) if binary
                         else _batch.encode_if_plain(messages, routing_key))
            except TypeError:
                if binary:
                    raise
                # not messages: the JSON encoder says what to give instead
        elif binary:
            raise TypeError("a binary batch is a non-empty list of str, bytes or OutgoingMessage")
    if batch is None:
        encoded = encode_messages(messages, routing_key)
        if ttl_ms is not None:
            for message in encoded:
                message.setdefault("ttl_ms", ttl_ms)
        body = {"messages": encoded, "mandatory": mandatory}
        return Call("POST", path, Published.from_json, body)
    params = {"mandatory": "true"} if mandatory else None
    return Call("POST", path, _batch.published, params=params, batch=batch, binary_answer=True)


# -------------------------------------------------------------------------------- consumer groups

def list_groups(queue: str) -> Call[list[GroupInfo]]:
    return Call("GET", f"/api/v1/queues/{queue}/groups", _list(GroupInfo.from_json))


def get_group(queue: str, group: str) -> Call[GroupInfo]:
    return Call("GET", f"/api/v1/queues/{queue}/groups/{group}", GroupInfo.from_json)


def declare_group(queue: str, group: str, start: str, tag_filter: list[str] | None,
                  single_active_consumer: bool | None = None) -> Call[GroupInfo]:
    body: dict[str, Any] = {"start": start}
    if tag_filter is not None:
        body["tag_filter"] = tag_filter
    if single_active_consumer is not None:
        body["single_active_consumer"] = single_active_consumer
    return Call("PUT", f"/api/v1/queues/{queue}/groups/{group}", GroupInfo.from_json, body)


def delete_group(queue: str, group: str) -> Call[None]:
    return Call("DELETE", f"/api/v1/queues/{queue}/groups/{group}", _none)


def pull(queue: str, group: str, max_messages: int, wait_ms: int, consumer: str, ack_up_to: int | None,
         binary: bool) -> Call[list[Message]]:
    body = _pull_body(max_messages, wait_ms, consumer, ack_up_to)
    path = f"/api/v1/queues/{queue}/groups/{group}/pull"
    if binary:
        return Call("POST", path, lambda answer: _batch.decode(answer.content, queue), body,
                    extra_seconds=wait_ms / 1000, binary_answer=True)
    return Call("POST", path, lambda d: [Message.from_json(m) for m in d["messages"]], body,
                extra_seconds=wait_ms / 1000)


def pull_batch(queue: str, group: str, max_messages: int, wait_ms: int, consumer: str,
               ack_up_to: int | None) -> Call[PulledBatch]:
    """A binary pull, its answer as columns."""
    return Call("POST", f"/api/v1/queues/{queue}/groups/{group}/pull",
                lambda answer: _batch.decode_batch(answer.content, queue),
                _pull_body(max_messages, wait_ms, consumer, ack_up_to),
                extra_seconds=wait_ms / 1000, binary_answer=True)


def _pull_body(max_messages: int, wait_ms: int, consumer: str, ack_up_to: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"max_messages": max_messages, "wait_ms": wait_ms, "consumer": consumer}
    if ack_up_to is not None:
        body["ack"] = {"up_to": ack_up_to}
    return body


def ack(queue: str, group: str, offsets: Iterable[int] | None, up_to: int | None) -> Call[AckResult]:
    if (offsets is None) == (up_to is None):
        raise ValueError("give offsets or up_to (not both)")
    body: dict[str, Any] = {"up_to": up_to} if up_to is not None else {"offsets": list(offsets or ())}
    return Call("POST", f"/api/v1/queues/{queue}/groups/{group}/ack", AckResult.from_json, body)


def nack(queue: str, group: str, offsets: Iterable[int], delay_ms: int, requeue: bool) -> Call[NackResult]:
    body = {"offsets": list(offsets), "delay_ms": delay_ms, "requeue": requeue}
    return Call("POST", f"/api/v1/queues/{queue}/groups/{group}/nack", NackResult.from_json, body)


def seek(queue: str, group: str, to: str | None, offset: int | None, timestamp: int | None) -> Call[GroupInfo]:
    given = {k: v for k, v in (("to", to), ("offset", offset), ("timestamp", timestamp)) if v is not None}
    if len(given) != 1:
        raise ValueError("give exactly one of to, offset, timestamp")
    return Call("POST", f"/api/v1/queues/{queue}/groups/{group}/seek", GroupInfo.from_json, given)


def pause(queue: str, group: str, until_ms: int | None) -> Call[GroupInfo]:
    body = {} if until_ms is None else {"until_ms": until_ms}
    return Call("POST", f"/api/v1/queues/{queue}/groups/{group}/pause", GroupInfo.from_json, body)


def resume(queue: str, group: str) -> Call[GroupInfo]:
    return Call("POST", f"/api/v1/queues/{queue}/groups/{group}/resume", GroupInfo.from_json, {})


# ------------------------------------------------------------------------------------ operations

def overview() -> Call[dict[str, Any]]:
    return Call("GET", "/api/v1/overview", dict)


def default_url(url: str | None) -> str:
    """The server's URL: as given, else CHUNKMQ_URL, else the local default."""
    return (url or os.environ.get("CHUNKMQ_URL") or "http://127.0.0.1:8000").rstrip("/")


def default_token(token: str | None) -> str | None:
    """The token: as given, else CHUNKMQ_TOKEN (never logged or shown in a repr)."""
    return token if token is not None else os.environ.get("CHUNKMQ_TOKEN") or None

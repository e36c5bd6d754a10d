"""The chunkmq Python client (also importable as `chunkmq`).

`Client` (sync, httpx) and `AsyncClient` (asyncio, httpx + websockets) cover every REST call;
`AsyncClient.consume` and `AsyncClient.producer` use the WebSocket streams. Errors are the typed
exceptions of `chunkmq.client.errors`, each carrying the API error code.
"""

from chunkmq.client.aio import AsyncClient
from chunkmq.client.consumer import AsyncConsumer
from chunkmq.client.errors import (
    ApiError,
    ChunkmqError,
    ConnectionFailed,
    Forbidden,
    InvalidRequest,
    NotFound,
    PreconditionFailed,
    QueueFull,
    StorageFull,
    TooLarge,
    Unauthorized,
    Unroutable,
)
from chunkmq.client.models import (
    AckResult,
    BindingInfo,
    ExchangeInfo,
    GroupInfo,
    Message,
    NackResult,
    OutgoingMessage,
    Page,
    Placement,
    Published,
    PublishResult,
    PulledBatch,
    QueueInfo,
)
from chunkmq.client.producer import AsyncProducer
from chunkmq.client.sync import Client

__all__ = [
    "AckResult",
    "ApiError",
    "AsyncClient",
    "AsyncConsumer",
    "AsyncProducer",
    "BindingInfo",
    "ChunkmqError",
    "Client",
    "ConnectionFailed",
    "ExchangeInfo",
    "Forbidden",
    "GroupInfo",
    "InvalidRequest",
    "Message",
    "NackResult",
    "NotFound",
    "OutgoingMessage",
    "Page",
    "Placement",
    "PreconditionFailed",
    "PublishResult",
    "Published",
    "PulledBatch",
    "QueueFull",
    "QueueInfo",
    "StorageFull",
    "TooLarge",
    "Unauthorized",
    "Unroutable",
]

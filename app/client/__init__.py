"""The chunkmq Python client (also importable as `chunkmq`).

`Client` (sync, httpx) and `AsyncClient` (asyncio, httpx + websockets) cover every REST call;
`AsyncClient.consume` and `AsyncClient.producer` use the WebSocket streams. Errors are the typed
exceptions of `app.client.errors`, each carrying the API error code.
"""

from app.client.aio import AsyncClient
from app.client.consumer import AsyncConsumer
from app.client.errors import (
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
from app.client.models import (
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
from app.client.producer import AsyncProducer
from app.client.sync import Client

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

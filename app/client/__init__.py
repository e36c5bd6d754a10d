"""The chunkmq Python client (also importable as `chunkmq`).

`Client` (blocking) and `AsyncClient` (asyncio) cover every REST call; `consume` (both) and
`AsyncClient.producer` use the WebSocket streams. Errors are the typed exceptions of
`chunkmq.client.errors`, each carrying the API error code. The guide is docs/client.md.
"""

from chunkmq.client.aio import AsyncClient
from chunkmq.client.consumer import AsyncConsumer, Consumer
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
    Unavailable,
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
from chunkmq.client.producer import AsyncProducer, Producer
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
    "Consumer",
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
    "Producer",
    "PublishResult",
    "Published",
    "PulledBatch",
    "QueueFull",
    "QueueInfo",
    "StorageFull",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "Unroutable",
]

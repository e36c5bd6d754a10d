"""chunkmq: a message broker with chunk-file storage, a REST/WebSocket API and a browser console."""

__version__ = "0.1.0"

"""Every HTTP route of the API, in one list."""

from __future__ import annotations

from fastapi import APIRouter

from app.api import bindings, exchanges, groups, operations, publish, queues, streams

router = APIRouter()
for module in (exchanges, queues, bindings, publish, groups, operations, streams):
    router.include_router(module.router)

"""The HTTP edge of `chunkmq serve`: its uvicorn server and protocols."""

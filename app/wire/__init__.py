"""What the server and the Python client both speak: the binary batch body (`batch.py`) and the API's
error codes (`codes.py`).

This package imports the standard library only (and numpy where a module says so), never the
server's modules: a client install pulls no server dependency (tests/test_layers.py checks it).
"""

"""chunkmq's Python client: `from chunkmq import Client, AsyncClient`.

The implementation lives in `app.client`; this package is the name users import.
"""

from app.client import *  # noqa: F403
from app.client import __all__ as __all__

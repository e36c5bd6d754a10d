# The compiled twin of record.py's codec (_recordc.c), used through record._compiled() as Any.
from typing import Any

def __getattr__(name: str) -> Any: ...

# The compiled twin of batch.py's codec (_batchc.c), used through batch._compiled() as Any.
from typing import Any

def __getattr__(name: str) -> Any: ...

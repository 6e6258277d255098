"""Content hashes: the version of a config is the hash of what it says, not of how it is written."""
from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np


def _canonical(value: Any) -> Any:
    """Turn numpy scalars/arrays and tuples into plain JSON types so equal content hashes equally."""
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, np.ndarray):
        return _canonical(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and value.is_integer():
        # 1 and 1.0 in YAML mean the same physical number.
        return int(value)
    return value


def content_hash(data: Any, length: int = 16) -> str:
    """Return a short sha256 hex digest of `data`'s content (key order and int/float spelling ignored)."""
    text = json.dumps(_canonical(data), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]

"""Value compression TiCDC applies without a marker (large-message-handle-compression):
lz4 frames and snappy blocks, through the lz4 and python-snappy libraries."""

from __future__ import annotations

import lz4.frame
import snappy

from .errors import DecodeError

NAMES = ("none", "lz4", "snappy")


def decompress(method: str, data: bytes, protocol: str) -> bytes:
    if method == "none":
        return data
    try:
        if method == "lz4":
            return lz4.frame.decompress(data)
        return snappy.decompress(data)
    except Exception as e:
        raise DecodeError(protocol, f"value is not {method}-compressed ({e})") from e


def compress(method: str, data: bytes) -> bytes:
    if method == "none":
        return data
    if method == "lz4":
        return lz4.frame.compress(data)
    return snappy.compress(data)

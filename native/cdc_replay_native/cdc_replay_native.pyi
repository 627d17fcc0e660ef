"""Type stub of the compiled decoders (src/lib.rs). spark_apps/native_decode.py is the only
caller; every decoder has the Python codec of its protocol as its reference."""

from collections.abc import Callable
from typing import Any

# An Arrow binary array as its buffers: (validity bitmap or None, offsets (int32, or int64 when
# large), data, offset, length, large) — spark_apps/native_decode.py `_binary_args`.
BinaryArg = tuple[memoryview | None, memoryview, memoryview, int, int, bool]

# What `decode` returns: the Arrow buffers of the canonical events (native_decode.py `_batch`)
# and `status`: one byte per record, 1 decoded here, 0 left to the Python codec.
Decoded = dict[str, Any]

class CanalJsonDecoder:
    def __init__(self, rule: Callable[[str | None], tuple], canal_flavor: bool) -> None: ...
    def decode(self, values: BinaryArg) -> Decoded: ...

class CanalJsonEncoder:
    def __init__(self, rule: Callable[[str | None, int], tuple], tidb_extension: bool, only_updated: bool) -> None: ...
    def encode(self, n: int, cols: dict[str, Any]) -> list[bytes | None]: ...

class CanalProtobufDecoder:
    def __init__(self, rule: Callable[[str | None], tuple]) -> None: ...
    def decode(self, values: BinaryArg) -> Decoded: ...

class CraftDecoder:
    def __init__(self, rule: Callable[..., Any]) -> None: ...
    def decode(self, values: BinaryArg) -> Decoded: ...

class OpenProtocolDecoder:
    def __init__(self, rule: Callable[[int, int], tuple | None]) -> None: ...
    def decode(self, values: BinaryArg, keys: BinaryArg) -> Decoded: ...

class OpenProtocolEncoder:
    def __init__(self, rule: Callable[[str | None, int], tuple | None], handle_key: int, only_updated: bool,
                 delete_handle_only: bool, printable: Callable[[int], bool]) -> None: ...
    def encode(self, n: int, cols: dict[str, Any]) -> list[tuple[bytes, bytes] | None]: ...

class AvroDecoder:
    def __init__(self, plan: Callable[[int], tuple | None]) -> None: ...
    def decode(self, values: BinaryArg, keys: BinaryArg) -> Decoded: ...

class OceanBaseAvroDecoder:
    def __init__(self, schema: str, framing: str, ms_per_unit: int, column: Callable[..., Any],
                 render: Callable[..., Any], zone: Callable[..., Any]) -> None: ...
    def decode(self, values: BinaryArg) -> Decoded: ...

def decode_lines(decoder: Any, data: memoryview | bytes, start: int, line_no: int, max_records: int,
                 plain: tuple[str, int, int] | None = None) -> dict[str, Any]:
    """Lines of an archive object read and decoded in one pass (src/archive.rs)."""

def identities(columns: list[tuple], length: int) -> bytes:
    """16-byte identities of rows 0..length (src/identity.rs)."""

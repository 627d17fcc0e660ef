"""Typed errors. A decode error names the protocol, the archive object, the record offset and,
for binary protocols, the byte position, so a quarantined record can be found and fixed."""

from __future__ import annotations


class CodecError(Exception):
    """Base of every error raised by cdc_codecs."""


class ConfigError(CodecError, ValueError):
    """An unknown protocol, an unknown option or an invalid option value."""


class DecodeError(CodecError):
    """A record that cannot be decoded in the given protocol."""

    def __init__(
        self,
        protocol: str,
        reason: str,
        *,
        object: str | None = None,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        byte_offset: int | None = None,
        field: str | None = None,
    ):
        self.protocol = protocol
        self.reason = reason
        self.object = object
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.byte_offset = byte_offset
        self.field = field
        super().__init__(self.describe())

    def at(self, *, object=None, topic=None, partition=None, offset=None) -> "DecodeError":
        """Fill in the record's location (codecs raise without it; the caller knows it)."""
        self.object = self.object if object is None else object
        self.topic = self.topic if topic is None else topic
        self.partition = self.partition if partition is None else partition
        self.offset = self.offset if offset is None else offset
        self.args = (self.describe(),)
        return self

    def describe(self) -> str:
        where = []
        if self.object is not None:
            where.append(f"object {self.object}")
        if self.topic is not None:
            where.append(f"topic {self.topic}")
        if self.partition is not None:
            where.append(f"partition {self.partition}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        if self.byte_offset is not None:
            where.append(f"byte {self.byte_offset}")
        if self.field is not None:
            where.append(f"field {self.field}")
        location = f" at {', '.join(where)}" if where else ""
        return f"{self.protocol}: {self.reason}{location}"


class EncodeError(CodecError):
    """An event that cannot be expressed in the target protocol."""

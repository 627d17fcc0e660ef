"""The codec interface, its options and the strict protocol registry.

A codec turns one Kafka record into canonical events (`decode`) and one partition's ordered
stream of canonical events into Kafka messages (`encode`). Options are named exactly as TiCDC's
sink-URI parameters (`enable-tidb-extension=true`), arrive as strings and are validated: an
unknown protocol or option is an error that lists the valid ones, never a silent default.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from .errors import ConfigError, DecodeError
from .events import Kind


@dataclasses.dataclass(frozen=True, slots=True)
class KafkaRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int | None = None
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    object: str | None = None  # the archive object the record was read from


@dataclasses.dataclass(frozen=True, slots=True)
class EncodedMessage:
    """One Kafka message produced by `Codec.encode` (its partition is the stream's)."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


@dataclasses.dataclass(frozen=True)
class Option:
    """One codec option, named as TiCDC's sink-URI parameter."""

    name: str
    default: Any
    help: str
    kind: type = str  # bool, int or str
    choices: tuple[str, ...] = ()

    def parse(self, raw: Any) -> Any:
        if not isinstance(raw, str):
            raw = str(raw).lower() if isinstance(raw, bool) else str(raw)
        text = raw.strip()
        if self.kind is bool:
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ConfigError(f"option {self.name}={raw!r}: expected true or false")
        if self.kind is int:
            try:
                return int(text)
            except ValueError:
                raise ConfigError(f"option {self.name}={raw!r}: expected an integer") from None
        if self.choices and text not in self.choices:
            raise ConfigError(
                f"option {self.name}={raw!r}: expected one of {', '.join(self.choices)}"
            )
        return text

    def describe(self) -> str:
        values = "|".join(self.choices) if self.choices else self.kind.__name__
        return f"{self.name}={values} (default {self.default!r}): {self.help}"


class Codec(abc.ABC):
    """Decode Kafka records into canonical events and encode events into Kafka messages.

    Subclasses set `name`, `description`, `options`, and where their producer places DDL and
    watermark events: "first" (partition 0 only) or "all" (broadcast to every partition).
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    options: ClassVar[tuple[Option, ...]] = ()
    ddl_placement: ClassVar[str] = "first"
    watermark_placement: ClassVar[str] = "all"
    writable: ClassVar[bool] = True  # False: decode only (TiCDC csv needs schemas from outside the message)
    # the compiled decoder (native/cdc_replay_native): its class in the extension, and whether
    # its `decode` takes the records' keys too; None: this protocol decodes in Python only
    compiled_class: ClassVar[str | None] = None
    compiled_takes_keys: ClassVar[bool] = False
    # the compiled encoder's class in the extension (spark_apps/native_encode.py); None: this
    # protocol encodes in Python only
    compiled_encoder_class: ClassVar[str | None] = None
    # whether the encoding depends on a column's ENUM/SET `label` (not only its value): then a
    # writer hook that fills labels changes what the compiled encoder reads
    encodes_labels: ClassVar[bool] = False
    # whether encoding registers schemas in a registry that numbers them as they come and whose
    # ids the messages carry (TiCDC Avro): the writer then registers a run's schemas in one
    # order before its tasks start (`noting_registrations`; spark_apps/outputs/kafka_records.py)
    registers_schemas: ClassVar[bool] = False

    def __init__(self, options: Mapping[str, Any] | None = None, *,
                 read_object: Callable[[str], bytes] | None = None):
        # objects outside the archive (claim-check messages) are read through the caller's
        # storage layer: codecs import nothing of the app, so S3 reaches them only this way
        self.read_object = read_object or read_local_object
        known = {o.name: o for o in self.options}
        values = {name: o.default for name, o in known.items()}
        for key, raw in (options or {}).items():
            if key not in known:
                valid = ", ".join(sorted(known)) or "none"
                raise ConfigError(
                    f"unknown option {key!r} for protocol {self.name}; valid options: {valid}"
                )
            values[key] = known[key].parse(raw)
        self.config: dict[str, Any] = values
        self.validate()

    def validate(self) -> None:
        """Check option combinations; raise ConfigError."""

    def error(self, reason: str, **where: Any) -> DecodeError:
        return DecodeError(self.name, reason, **where)

    @abc.abstractmethod
    def decode(self, record: KafkaRecord) -> list[dict]:
        """The record's events in message order (source fields are filled by the caller)."""

    @abc.abstractmethod
    def encode(self, events: Iterable[dict], *, topic: str, partition: int) -> Iterator[EncodedMessage]:
        """Messages for one partition's ordered event stream (batching codecs group events)."""

    def compiled_decoder(self, extension) -> Any:
        """This codec's compiled decoder, built from `extension` (the cdc_replay_native module,
        given by the caller: codecs import nothing of the app) with the codec's own type rules,
        so both paths read a type the same way (spark_apps/native_decode.py)."""
        raise NotImplementedError(f"{self.name} has no compiled decoder")

    def compiled_encoder(self, extension) -> Any:
        """This codec's compiled encoder for its options, built from `extension`, or None when
        these options are encoded in Python only. Its `encode(n, arrays)` gives per event what
        `compiled_entry` takes, or None: the event goes to `entry`, the reference."""
        return None

    def compiled_entry(self, encoded) -> Any:
        """The compiled encoder's output for one event as `entry` gives it; None: `entry` encodes
        the event (the compiled output is not certain to be the reference's)."""
        raise NotImplementedError(f"{self.name} has no compiled encoder")

    def compiled_values(self) -> bool:
        """True when `compiled_entry(value)` is always `[EncodedMessage(None, value)]`: one
        message, no key, no headers, the compiled output its value as it is. A writer may then
        take the compiled outputs as they are, with no message object per event."""
        return False

    def compiled_entries(self, encoded: list) -> list:
        """`compiled_entry` of each of a batch's outputs (None stays None: Python encodes it)."""
        entry = self.compiled_entry
        return [None if value is None else entry(value) for value in encoded]

    def entry(self, event: dict, *, topic: str, partition: int) -> Any:
        """One event's share of the messages, in the form `frame` takes: by default its messages."""
        return list(self.encode([event], topic=topic, partition=partition))

    def frame(self, entries: Iterable) -> Iterator[EncodedMessage]:
        """The messages of one partition's entries in order: `encode` split at the event, so
        compiled and Python-encoded events share one stream (a batching codec groups them)."""
        for messages in entries:
            yield from messages

    def noting_registrations(self) -> None:
        """From now on this codec notes the schemas its encoding would register (`noted`) and
        registers none: its messages are then not to be sent (their ids are placeholders)."""
        raise NotImplementedError(f"{self.name} registers no schemas")

    def noted(self) -> list[tuple[str, str]]:
        """(subject, schema) of each registration asked since the last call, in order, once per
        message that would carry its id."""
        raise NotImplementedError(f"{self.name} registers no schemas")

    def register_schema(self, subject: str, schema: str) -> int:
        """Register one `noted` schema in this codec's registry: its id."""
        raise NotImplementedError(f"{self.name} registers no schemas")

    def registered(self, ids: Mapping[tuple[str, str], int]):
        """A context in which every codec of this protocol on this registry, in this process,
        takes the id of each (subject, schema) of `ids` (what `register_schema` answered the
        driver for them) without asking the registry again."""
        raise NotImplementedError(f"{self.name} registers no schemas")

    def partitions_for(self, event: dict, partitions: int, row_partition: int) -> Sequence[int]:
        """Target partitions of an event: rows go where the dispatcher says, DDL and
        watermarks where this protocol's producer puts them."""
        kind = event["kind"]
        if kind == Kind.ROW:
            return (row_partition,)
        placement = self.ddl_placement if kind == Kind.DDL else self.watermark_placement
        return (0,) if placement == "first" else range(partitions)


_REGISTRY: dict[str, type[Codec]] = {}


def register(cls: type[Codec]) -> type[Codec]:
    if cls.name in _REGISTRY:
        raise ValueError(f"protocol {cls.name} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def protocols() -> list[str]:
    return sorted(_REGISTRY)


def codec_class(protocol: str) -> type[Codec]:
    try:
        return _REGISTRY[protocol]
    except KeyError:
        raise ConfigError(
            f"unknown protocol {protocol!r}; valid protocols: {', '.join(protocols())}"
        ) from None


def get_codec(protocol: str, options: Mapping[str, Any] | None = None, *,
              read_object: Callable[[str], bytes] | None = None) -> Codec:
    """The codec for `protocol` configured with `options` (strings, as in a sink URI);
    `read_object(uri) -> bytes` reads objects the messages point to (default: local files)."""
    return codec_class(protocol)(options, read_object=read_object)


def read_local_object(uri: str) -> bytes:
    """The default object reader of codecs: local paths and file:// URIs only."""
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    elif "://" in uri:
        raise OSError(f"{uri.split('://', 1)[0]}:// objects need a storage reader (read_object) given to the codec")
    with open(uri, "rb") as f:
        return f.read()


def parse_option_pairs(pairs: Iterable[str] | None) -> dict[str, str]:
    """["k=v", ...] (or "k=v&k2=v2") -> {"k": "v", ...}; an item without "=" is an error."""
    result: dict[str, str] = {}
    for item in pairs or ():
        for part in item.split("&"):
            if not part:
                continue
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"option {part!r} is not of the form key=value")
            result[key.strip()] = value.strip()
    return result


SOURCE_KEYS = ("topic", "partition", "offset", "record_timestamp", "object")


def decode_record(codec: Codec, record: KafkaRecord) -> list[dict]:
    """Decode one record and stamp every event with where it came from.

    Errors of any kind become a DecodeError naming the protocol and the record's location."""
    try:
        events = codec.decode(record)
    except DecodeError as e:
        raise e.at(object=record.object, topic=record.topic, partition=record.partition, offset=record.offset)
    except Exception as e:  # a codec bug or an input no check anticipated: still name the record
        raise DecodeError(
            codec.name, f"{type(e).__name__}: {e}", object=record.object, topic=record.topic,
            partition=record.partition, offset=record.offset,
        ) from e
    for index, event in enumerate(events):
        event["topic"] = record.topic
        event["partition"] = record.partition
        event["offset"] = record.offset
        event["record_timestamp"] = record.timestamp
        event["object"] = record.object
        event["event_index"] = index
    return events


def encode_records(
    codec: Codec,
    events: Iterable[dict],
    *,
    topic: str,
    partitions: int,
    dispatch: Callable[[dict], int] = lambda event: 0,
) -> list[KafkaRecord]:
    """Encode an ordered event stream into Kafka records on `partitions` partitions, with
    offsets from 0 per partition: the in-memory twin of the Spark topics writer."""
    streams: dict[int, list[dict]] = {p: [] for p in range(partitions)}
    for event in events:
        row_partition = dispatch(event) if event["kind"] == Kind.ROW else 0
        for p in codec.partitions_for(event, partitions, row_partition):
            streams[p].append(event)
    records = []
    for p, stream in streams.items():
        for offset, message in enumerate(codec.encode(stream, topic=topic, partition=p)):
            records.append(
                KafkaRecord(topic, p, offset, None, message.key, message.value, message.headers)
            )
    return records

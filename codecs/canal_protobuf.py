"""canal-protobuf: the Kafka value Alibaba Canal writes with canal.mq.flatMessage=false.

Layers, kept apart:

* framing — `Packet{type=MESSAGES, body=Messages{batch_id, messages=[Entry bytes]}}`, in the
  two shapes Canal's CanalMessageSerializerUtil writes: the builder form (`version=1`, type,
  body; batch_id omitted when 0), used when canal.mq.partitionHash splits a batch, and the raw
  form (type and body only, batch_id always written) of an unsplit batch;
* schema — our proto3 rendering of Canal's messages (codecs/proto/canal.proto, generated
  canal_pb2), read with the protobuf runtime; fields Canal wraps in `oneof ..._present` take
  their proto2 defaults when absent (entryType ROWDATA, eventType UPDATE, isDdl false, ...);
* values — Canal's Java strings <-> canonical bytes (canal_common: binary as ISO-8859-1,
  Java float text, TIMESTAMP in the canal server's zone given by `source-timezone`).

Events: one per row of every ROWDATA entry (`position` = [binlog file number, binlog offset,
row index in the entry]), one per DDL entry; TRANSACTIONBEGIN / TRANSACTIONEND / HEARTBEAT /
GTIDLOG entries and statement annotations are not events: they are kept (as their bytes, in
`extras`) on the neighbouring event so that a re-encode is byte-exact, and transaction ids they
carry are copied to the rows of their transaction (`canal.xid`, `canal.threadId`).

Byte offsets in errors come from a small wire-format walk (`_spans`): the protobuf runtime
parses but does not say where a nested message starts.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
from collections.abc import Callable, Iterable, Iterator

from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.message import EncodeError as ProtobufEncodeError

from .base import Codec, EncodedMessage, KafkaRecord, Option, register
from .canal_common import canal_sql_type, canal_text, canonical_bytes, time_zone, type_info
from .canal_json import canal_ddl_type
from .ddl_types import classify
from .errors import EncodeError
from .events import CONTENT_FIELDS, ColumnFlag, Kind, Op, new_event
from .mysql_types import enum_set_label
from .proto import canal_pb2 as pb
from .tso import physical_ms

_KEY_FLAGS = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
ENTRY = pb.EntryType
EVENT = pb.EventType
_ROW_OPS = {EVENT.INSERT: Op.INSERT, EVENT.UPDATE: Op.UPDATE, EVENT.DELETE: Op.DELETE}
_OP_EVENT = {op: code for code, op in _ROW_OPS.items()}
# Header props Canal writes, in its order (LogEventConvert.createHeader).
_HEADER_PROPS = ("curtGtid", "curtGtidSn", "curtGtidLct", "rowsCount")
_STANDARD_PACKET = "version=1"
# Extras that describe the message, the transaction or neighbouring entries, not the entry.
_CONTEXT_EXTRAS = ("canal.id", "canal.packet", "canal.xid", "canal.threadId", "canal.leading",
                   "canal.trailing", "canal.entry")


def binlog_file_number(name: str) -> int | None:
    """The numeric suffix of a binlog file name (mysql-bin.000123 -> 123); None without one."""
    stem, dot, suffix = name.rpartition(".")
    if dot and suffix.isdigit():
        return int(suffix)
    return None


def _spans(data: bytes) -> dict[int, list[tuple[int, int]]] | None:
    """Payload spans of the fields of one serialized message, by field number (a varint's own
    bytes, a length-delimited field's payload); None when the bytes are not a plain message
    (groups or truncation)."""
    spans: dict[int, list[tuple[int, int]]] = {}
    i, n = 0, len(data)

    def varint() -> int:
        nonlocal i
        result = shift = 0
        while True:
            if i >= n or shift > 63:
                raise IndexError
            b = data[i]
            i += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    try:
        while i < n:
            tag = varint()
            number, wire = tag >> 3, tag & 7
            if wire == 0:
                start = i
                varint()
                spans.setdefault(number, []).append((start, i))
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            elif wire == 2:
                length = varint()
                spans.setdefault(number, []).append((i, i + length))
                i += length
            else:
                return None
            if i > n:
                return None
    except IndexError:
        return None
    return spans


def _span(data: bytes, number: int, index: int = -1) -> int | None:
    spans = _spans(data)
    try:
        return spans[number][index][0] if spans else None
    except (KeyError, IndexError):
        return None


class _Offsets:
    """The byte offsets DecodeErrors name (the body, an entry, an entry's storeValue). The
    protobuf runtime does not report positions and walking the wire format with `_spans` costs
    about a fifth of a decode, so an offset is computed only when an error names it."""

    __slots__ = ("value", "body", "_body_at", "_entries")

    def __init__(self, value: bytes, body: bytes):
        self.value, self.body = value, body
        self._body_at: int | None = None
        self._entries: list[tuple[int, int]] | None = None

    def body_at(self) -> int:
        if self._body_at is None:
            self._body_at = _span(self.value, 5) or 0
        return self._body_at

    def entry_at(self, i: int) -> int:
        if self._entries is None:
            self._entries = (_spans(self.body) or {}).get(2, [])
        return self.body_at() + self._entries[i][0] if i < len(self._entries) else self.body_at()

    def store_at(self, i: int, raw: bytes) -> int:
        return self.entry_at(i) + (_span(raw, 3) or 0)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _extras(event: dict) -> dict:
    extras = event.get("extras")
    return (extras if isinstance(extras, dict) else dict(extras)) if extras else {}


class _Part:
    """One event's share of `CanalProtobufCodec.frame`: what the message and entry grouping
    compare, and the event (Python) or the compiled encoder's pieces of its entry."""

    __slots__ = ("kind", "event", "mkey", "has_id", "canal_id", "packet", "index", "original", "leading",
                 "trailing", "_key", "_pieces")

    def __init__(self, kind: str, event: dict | None):
        self.kind, self.event = kind, event
        self.original = self.leading = self.trailing = False
        self._key = self._pieces = None

    def key(self) -> bytes:
        """What `_continues` compares of two rows but the row index, as bytes (the compiled
        encoder writes the same for its rows)."""
        if self._key is None:
            event = self.event
            position = _binlog_position(event)
            stripped = sorted((k, v) for k, v in _extras(event).items() if k not in _CONTEXT_EXTRAS)
            self._key = _key_bytes([position[0], position[1], event["op"], event["database"], event["table"],
                                    event["execute_ts_ms"], event["tx_id"], event["key_columns"], stripped])
        return self._key


def _key_bytes(value) -> bytes:
    """An unambiguous serialization (canal_protobuf_encode.rs `key_*` writes the same)."""
    if value is None:
        return b"n"
    if type(value) is int:
        return b"i%d;" % value
    if type(value) is str:
        raw = value.encode("utf-8", "surrogatepass")
        return b"s%d:" % len(raw) + raw
    if type(value) in (list, tuple):
        return (b"l" if type(value) is list else b"t") + b"%d:" % len(value) + b"".join(map(_key_bytes, value))
    return b"r" + repr(value).encode("utf-8", "backslashreplace") + b";"


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


@register
class CanalProtobufCodec(Codec):
    name = "canal-protobuf"
    compiled_class = "CanalProtobufDecoder"
    description = "Alibaba Canal protobuf messages (canal.mq.flatMessage=false)"
    options = (
        Option("source-timezone", "UTC",
               "time zone of the canal server's JVM, in which Canal renders TIMESTAMP values; "
               "decoded TIMESTAMPs are converted to UTC text (and back on encode)"),
        Option("packet-form", "builder",
               "Packet layout for events not decoded from Canal protobuf: builder (version=1, "
               "as with canal.mq.partitionHash) or raw (an unsplit batch)", str, ("builder", "raw")),
        Option("keep-original-entries", False,
               "when an entry differs from what the encoder writes for its events (unknown fields, "
               "other sqlType codes or column indexes, missing proto2-default fields, ...), keep "
               "its bytes in extras so that re-encoding is byte-exact; costs a trial encode per "
               "entry (about twice the decode time)", bool),
    )
    ddl_placement = "first"
    watermark_placement = "all"

    def compiled_decoder(self, extension):
        return extension.CanalProtobufDecoder(compiled_type_rule(self.zone is dt.timezone.utc))

    def validate(self) -> None:
        self.zone: dt.tzinfo = time_zone(self.config["source-timezone"])

    # ================================================================ decode
    def decode(self, record: KafkaRecord) -> list[dict]:
        value = record.value
        if value is None:
            raise self.error("record has no value (a tombstone); Canal always writes one")
        packet = pb.Packet()
        try:
            packet.ParseFromString(value)
        except ProtobufDecodeError as e:
            raise self.error(f"value is not a Canal Packet: {e}", byte_offset=0) from e
        if packet.type != pb.Packet.MESSAGES:
            raise self.error(f"Packet type is {packet.type}, not MESSAGES (7)", byte_offset=0, field="Packet.type")
        compression = packet.compression if packet.HasField("compression") else pb.Packet.NONE
        if compression not in (pb.Packet.NONE, pb.Packet.COMPRESSIONCOMPATIBLEPROTO2):
            raise self.error(
                f"Packet compression {compression} is not NONE; Canal's own readers refuse it too",
                byte_offset=0, field="Packet.compression")
        offsets = _Offsets(value, packet.body)
        messages = pb.Messages()
        try:
            messages.ParseFromString(packet.body)
        except ProtobufDecodeError as e:
            raise self.error(f"Packet body is not a Messages: {e}", byte_offset=offsets.body_at(),
                             field="Packet.body") from e

        packet_form = self._packet_form(packet)
        if packet_form == "raw" and not messages.batch_id and 1 not in (_spans(packet.body) or {}):
            packet_form = "bare"  # no header fields and no batch id: not Canal's raw path
        context = {"canal.id": str(messages.batch_id)}
        if packet_form != _STANDARD_PACKET:
            context["canal.packet"] = packet_form

        events: list[dict] = []
        pending: list[bytes] = []  # non-event entries waiting for the next event
        open_tx: list[dict] = []  # events since the last transaction boundary
        thread_id: str | None = None  # of the open transaction's TRANSACTIONBEGIN
        for i, raw in enumerate(messages.messages):
            at = functools.partial(offsets.entry_at, i)
            store_at = functools.partial(offsets.store_at, i, raw)
            where = f"messages[{i}]"
            entry = pb.Entry()
            try:
                entry.ParseFromString(raw)
            except ProtobufDecodeError as e:
                raise self.error(f"entry is not a Canal Entry: {e}", byte_offset=at(), field=where) from e
            # absent, or the proto3 placeholder 0 that a proto2 reader would not know: ROWDATA
            entry_type = entry.entryType or ENTRY.ROWDATA
            if entry_type == ENTRY.ROWDATA:
                change = self._parse(pb.RowChange, entry.storeValue, store_at, where, "ROWDATA")
                produced = self._entry_events(entry, change, store_at, where)
                if produced is None:
                    pending.append(raw)
                    continue
                first = produced[0]["extras"]
                if pending:
                    first["canal.leading"] = ",".join(_b64(r) for r in pending)
                    pending = []
                if self.config["keep-original-entries"] and not self._reproduces(produced, raw):
                    first["canal.entry"] = _b64(raw)
                if thread_id:
                    for event in produced:
                        event["extras"]["canal.threadId"] = thread_id
                events.extend(produced)
                open_tx.extend(produced)
            elif entry_type == ENTRY.TRANSACTIONBEGIN:
                begin = self._parse(pb.TransactionBegin, entry.storeValue, store_at, where, "TRANSACTIONBEGIN")
                thread_id = str(begin.threadId) if begin.threadId else None
                open_tx = []
                pending.append(raw)
            elif entry_type == ENTRY.TRANSACTIONEND:
                end = self._parse(pb.TransactionEnd, entry.storeValue, store_at, where, "TRANSACTIONEND")
                if end.transactionId:
                    for event in open_tx:
                        event["extras"]["canal.xid"] = end.transactionId
                thread_id = None
                open_tx = []
                pending.append(raw)
            elif entry_type in (ENTRY.HEARTBEAT, ENTRY.GTIDLOG):
                pending.append(raw)  # a heartbeat or a GTID record: no row, kept for re-encoding
            else:
                raise self.error(f"unknown entryType {entry_type}", byte_offset=at(), field=f"{where}.entryType")
        if pending and events:
            events[-1]["extras"]["canal.trailing"] = ",".join(_b64(r) for r in pending)
        for event in events:
            event["extras"] = {**context, **event["extras"]}
        return events

    def _parse(self, message_class, data: bytes, at: Callable[[], int], where: str, entry_type: str):
        message = message_class()
        try:
            message.ParseFromString(data)
        except ProtobufDecodeError as e:
            raise self.error(f"{entry_type} storeValue is not a {message_class.__name__}: {e}",
                             byte_offset=at(), field=f"{where}.storeValue") from e
        return message

    def _reproduces(self, events: list[dict], raw: bytes) -> bool:
        try:
            return self._build_entry(events).SerializeToString() == raw
        except Exception:  # whatever the encoder cannot write, the original bytes can
            return False

    @staticmethod
    def _packet_form(packet) -> str:
        parts = []
        if packet.HasField("magic_number"):
            parts.append(f"magic={packet.magic_number}")
        if packet.HasField("version"):
            parts.append(f"version={packet.version}")
        if packet.HasField("compression"):
            parts.append(f"compression={packet.compression}")
        return ",".join(parts) or "raw"  # Canal's raw path writes type and body only

    def _entry_events(self, entry, change, at: Callable[[], int], where: str) -> list[dict] | None:
        """The events of one ROWDATA entry; None for an entry that is no event (a statement
        annotation, XA COMMIT / ROLLBACK)."""
        header = entry.header
        event_type = change.eventType or EVENT.UPDATE  # absent or 0: the proto2 default
        is_ddl = change.isDdl if change.HasField("isDdl") else False
        extras = self._header_extras(header)
        seq = binlog_file_number(header.logfileName) if header.logfileName else None
        if header.logfileName and (seq is None or seq >= 1 << 63):
            raise self.error(f"binlog file name {header.logfileName!r} has no numeric suffix (below 2^63) to order by",
                             byte_offset=at(), field=f"{where}.header.logfileName")
        execute_ts = header.executeTime or None
        if execute_ts is not None and execute_ts < 0:
            raise self.error(f"executeTime {execute_ts} is negative", byte_offset=at(), field=f"{where}.header.executeTime")
        if header.logfileOffset < 0:
            raise self.error(f"logfileOffset {header.logfileOffset} is negative", byte_offset=at(),
                             field=f"{where}.header.logfileOffset")
        tx_id = header.gtid or None
        database = header.schemaName or None
        table = header.tableName or None

        def position(row: int) -> list[int] | None:
            return None if seq is None else [seq, header.logfileOffset, row]

        if is_ddl:
            if not change.sql:
                raise self.error("DDL entry has no sql", byte_offset=at(), field=f"{where}.sql")
            ddl_type = classify(change.sql)
            canal_type = EVENT.Name(event_type) if event_type in EVENT.values() else str(event_type)
            if canal_type != canal_ddl_type(ddl_type):
                extras["canal.type"] = canal_type
            if change.ddlSchemaName != (database or ""):
                extras["canal.ddlSchemaName"] = change.ddlSchemaName
            return [new_event(
                Kind.DDL, position=position(0), execute_ts_ms=execute_ts, database=database,
                table=table, ddl_query=change.sql, ddl_type=ddl_type, tx_id=tx_id, extras=extras,
            )]
        op = _ROW_OPS.get(event_type)
        if op is None:
            return None  # a statement annotation (QUERY), XA COMMIT / ROLLBACK, ...: no rows
        if not change.rowDatas:
            raise self.error(
                f"{EVENT.Name(event_type)} entry without row data: a statement-format "
                "(binlog_format=STATEMENT/MIXED) change that cannot be replayed as rows",
                byte_offset=at(), field=f"{where}.rowDatas")
        if change.tableId:
            extras["canal.tableId"] = str(change.tableId)
        events = []
        for r, row in enumerate(change.rowDatas):
            row_where = f"{where}.rowDatas[{r}]"
            before = self._image(row.beforeColumns, at, f"{row_where}.beforeColumns")
            after = self._image(row.afterColumns, at, f"{row_where}.afterColumns")
            if op == Op.INSERT:
                before = None
            elif op == Op.DELETE:
                after = None
            if op != Op.DELETE and not after:
                raise self.error(f"{op} row without afterColumns", byte_offset=at(), field=row_where)
            if op != Op.INSERT and not before:
                raise self.error(f"{op} row without beforeColumns", byte_offset=at(), field=row_where)
            main = row.beforeColumns if op == Op.DELETE else row.afterColumns
            events.append(new_event(
                Kind.ROW, op=op, position=position(r), execute_ts_ms=execute_ts, database=database,
                table=table, key_columns=[c.name for c in main if c.isKey], before=before,
                after=after, tx_id=tx_id, extras=dict(extras),
            ))
        return events

    @staticmethod
    def _header_extras(header) -> dict:
        extras = {}
        if header.logfileName:
            extras["canal.logfileName"] = header.logfileName
        if header.serverId:
            extras["canal.serverId"] = str(header.serverId)
        if header.eventLength:
            extras["canal.eventLength"] = str(header.eventLength)
        for pair in header.props:
            extras[f"canal.header.{pair.key}"] = pair.value
        return extras

    def _image(self, columns, at: Callable[[], int], where: str) -> list[dict] | None:
        if not columns:
            return None
        image = []
        zone = self.zone
        for c in columns:
            type_text = c.mysqlType or None
            info = type_info(type_text)
            if c.isNull:
                value = None
            elif info.kind == "text":  # most columns: canonical_bytes' first case, inlined
                value = c.value.encode("utf-8")
            else:
                try:
                    value = canonical_bytes(c.value, type_text, zone)
                except (ValueError, OverflowError) as e:
                    raise self.error(f"column {c.name!r} ({type_text}): {e}", byte_offset=at(),
                                     field=f"{where}.{c.name}") from None
            image.append({
                "name": c.name,
                "mysql_type": type_text,
                "flags": info.flags | _KEY_FLAGS if c.isKey else info.flags,
                "value": value,
                "label": enum_set_label(info.mysql_type, value) if info.labels else None,
            })
        return image

    # ================================================================ encode
    compiled_encoder_class = "CanalProtobufEncoder"

    def compiled_encoder(self, extension):
        """The extension's encoder of row entries' parts (canal_protobuf_encode.rs); its type
        rules come from `compiled_encode_rule`, asked once per type text."""
        return extension.CanalProtobufEncoder(compiled_encode_rule(self.zone is dt.timezone.utc))

    def compiled_entry(self, encoded: tuple) -> _Part:
        canal_id, packet, index, key, head_a, count, head_b, prefix, row = encoded
        part = _Part(Kind.ROW, None)
        part.has_id, part.canal_id, part.packet = canal_id is not None, canal_id, packet
        part.mkey = (canal_id, packet) if canal_id is not None else None
        part.index, part._key = index, key
        part._pieces = (head_a, count, head_b, prefix, row)
        return part

    def encode(self, events: Iterable[dict], *, topic: str, partition: int) -> Iterator[EncodedMessage]:
        return self.frame(self.entry(event, topic=topic, partition=partition) for event in events)

    def entry(self, event: dict, *, topic: str = "", partition: int = 0) -> _Part | None:
        """One event's part of `frame` (None for a watermark: Canal writes none). It keeps the
        event: its bytes are computed in `frame`, where the old all-Python code runs when every
        event of an entry has its dict, so the reference writes what it wrote before."""
        kind = event["kind"]
        if kind == Kind.WATERMARK:
            return None
        if kind not in (Kind.ROW, Kind.DDL):
            raise EncodeError(f"canal-protobuf cannot encode event kind {kind!r}")
        part = _Part(kind, event)
        extras = _extras(event)
        part.has_id = "canal.id" in extras
        part.canal_id, part.packet = extras.get("canal.id"), extras.get("canal.packet")
        part.mkey = (extras["canal.id"], extras.get("canal.packet")) if part.has_id else None
        position = _binlog_position(event)
        part.index = position[2] if kind == Kind.ROW and position else None
        part.original = "canal.entry" in extras
        part.leading = "canal.leading" in extras
        part.trailing = "canal.trailing" in extras
        return part

    def frame(self, entries: Iterable) -> Iterator[EncodedMessage]:
        """Consecutive events decoded from one Canal message (same batch id and packet form)
        form one message again; any other event is a message of its own. Compiled parts
        (rows only, `compiled_entry`) and Python ones group alike."""
        group: list[_Part] = []
        key = None
        for part in entries:
            if part is None:
                continue
            k = part.mkey
            if group and (k is None or k != key):
                yield EncodedMessage(None, self._packet(group))
                group = []
            group.append(part)
            key = k
        if group:
            yield EncodedMessage(None, self._packet(group))

    def _packet(self, group: list[_Part]) -> bytes:
        first = group[0]
        form = first.packet or (
            _STANDARD_PACKET if self.config["packet-form"] == "builder" or first.has_id else "raw")
        batch_id = int(first.canal_id if first.has_id else 0)
        if not -(1 << 63) <= batch_id < 1 << 63:  # Canal's Message id is a Java long
            raise EncodeError(f"canal-protobuf cannot encode event: canal.id {batch_id} is outside a batch id's range (int64)")
        entries: list[bytes] = []
        for parts in self._entries(group):
            head, tail = parts[0], parts[-1]
            if head.event is not None:
                entries.extend(base64.b64decode(r) for r in _extras(head.event).get("canal.leading", "").split(",") if r)
            entries.append(self._entry_of(parts))
            if tail.event is not None:
                entries.extend(base64.b64decode(r) for r in _extras(tail.event).get("canal.trailing", "").split(",") if r)
        messages = pb.Messages(batch_id=batch_id, messages=entries)
        if form == "raw":
            # Canal's raw path writes batch_id even when 0, and no magic/version/compression.
            body = b"\x08" + _varint(batch_id & 0xFFFFFFFFFFFFFFFF) + pb.Messages(messages=entries).SerializeToString()
            return pb.Packet(type=pb.Packet.MESSAGES, body=body).SerializeToString()
        packet = pb.Packet(type=pb.Packet.MESSAGES, body=messages.SerializeToString())
        for part in form.split(","):
            name, _, number = part.partition("=")
            if name == "magic":
                packet.magic_number = int(number)
            elif name == "version":
                packet.version = int(number)
            elif name == "compression":
                packet.compression = int(number)
        return packet.SerializeToString()

    def _entries(self, group: list[_Part]) -> Iterator[list[_Part]]:
        """The parts of one entry: consecutive rows of the same binlog event (same position
        but for the row index, which counts up from 0) and the same header; DDL alone."""
        entry: list[_Part] = []
        for part in group:
            if entry and part.kind == Kind.ROW and self._continues_part(entry[-1], part):
                entry.append(part)
                continue
            if entry:
                yield entry
            entry = [part]
        if entry:
            yield entry

    def _continues_part(self, prev: _Part, part: _Part) -> bool:
        if prev.event is not None and part.event is not None:
            return self._continues(prev.event, part.event)
        # a compiled part: its key holds what `_continues` compares
        if prev.kind != Kind.ROW or prev.index is None or part.index is None or part.index != prev.index + 1:
            return False
        if part.original or part.leading or prev.trailing:
            return False
        return prev.key() == part.key()

    def _entry_of(self, parts: list[_Part]) -> bytes:
        """One entry's bytes: the old code when every part has its event, else (a compiled
        part among them) the entry assembled from the parts' pieces, as `_build_entry` writes it."""
        if all(p.event is not None for p in parts):
            events = [p.event for p in parts]
            return self._entry_bytes(events, original=_extras(events[0]).get("canal.entry"))
        try:
            head_a, count, head_b, prefix, _ = self._pieces(parts[0])
            rows = [self._pieces(p)[4] for p in parts]
        except (ValueError, ProtobufEncodeError) as e:
            raise EncodeError(f"canal-protobuf cannot encode event: {e}") from e
        if count:
            head_a += _field(12, pb.Pair(key="rowsCount", value=str(len(parts))).SerializeToString())
        store = b"".join((prefix, *rows))
        return _field(1, head_a + head_b) + b"\x10\x02" + _field(3, store)

    def _pieces(self, part: _Part) -> tuple:
        """(header before rowsCount, whether rowsCount is added, header after it, RowChange
        before its rows, the RowChange field of its row): what the compiled encoder returns."""
        if part._pieces is None:
            event = part.event
            op = event["op"]
            if op not in _OP_EVENT:
                raise EncodeError(f"row event with op {op!r}")
            event_type = _OP_EVENT[op]
            header = self._header(event, event_type, None)
            props = list(header.props)
            del header.props[:]
            split = sum(p.key in _HEADER_PROPS for p in props)
            count = not any(p.key == "rowsCount" for p in props)
            for pair in props[:split]:
                header.props.add(key=pair.key, value=pair.value)
            gtid, header.gtid = header.gtid, ""
            tail = pb.Header(props=props[split:], gtid=gtid)
            change = pb.RowChange(tableId=int(_extras(event).get("canal.tableId", 0)), eventType=event_type, isDdl=False)
            row = pb.RowChange()
            self._row(row.rowDatas.add(), event)
            part._pieces = (header.SerializeToString(), count, tail.SerializeToString(),
                            change.SerializeToString(), row.SerializeToString())
        return part._pieces

    @staticmethod
    def _continues(prev: dict, event: dict) -> bool:
        here, before = _binlog_position(event), _binlog_position(prev)
        if prev["kind"] != Kind.ROW or not before or not here:
            return False
        if here[:2] != before[:2] or here[2] != before[2] + 1:
            return False
        if "canal.entry" in _extras(event) or "canal.leading" in _extras(event) or "canal.trailing" in _extras(prev):
            return False
        same = ("op", "database", "table", "execute_ts_ms", "tx_id", "key_columns")
        if any(prev[k] != event[k] for k in same):
            return False
        strip = lambda x: {k: v for k, v in _extras(x).items() if k not in _CONTEXT_EXTRAS}  # noqa: E731
        return strip(prev) == strip(event)

    # ---------------------------------------------------------------- one entry
    def _entry_bytes(self, events: list[dict], original: str | None = None) -> bytes:
        if original:
            raw = base64.b64decode(original)
            if self._same_content(raw, events):
                return raw
        return self._build_entry(events).SerializeToString()

    def _same_content(self, raw: bytes, events: list[dict]) -> bool:
        """Whether the kept original entry still says what these events say."""
        entry = pb.Entry()
        change = pb.RowChange()
        try:
            entry.ParseFromString(raw)
            change.ParseFromString(entry.storeValue)
            decoded = self._entry_events(entry, change, 0, "entry")
        except Exception:
            return False
        if decoded is None or len(decoded) != len(events):
            return False
        for mine, theirs in zip(decoded, events):
            theirs_extras = {k: v for k, v in _extras(theirs).items() if k not in _CONTEXT_EXTRAS}
            if {k: mine[k] for k in CONTENT_FIELDS if k != "extras"} != {
                k: theirs[k] for k in CONTENT_FIELDS if k != "extras"
            } or mine["extras"] != theirs_extras:
                return False
        return True

    def _header(self, event: dict, event_type: int, rows: int | None):
        extras = _extras(event)
        position = _binlog_position(event)
        header = pb.Header(version=1, serverenCode="UTF-8", sourceType=pb.MYSQL, eventType=event_type)
        logfile = extras.get("canal.logfileName")
        if logfile is None and position:
            logfile = f"mysql-bin.{position[0]:06d}"
        header.logfileName = logfile or ""
        header.logfileOffset = position[1] if position else 0
        header.serverId = int(extras.get("canal.serverId", 0))
        es = event["execute_ts_ms"]
        if es is None and event["commit_ts"] is not None:
            es = physical_ms(event["commit_ts"])
        header.executeTime = es or 0
        header.schemaName = event["database"] or ""
        header.tableName = event["table"] or ""
        header.eventLength = int(extras.get("canal.eventLength", 0))
        props = {k[len("canal.header."):]: v for k, v in extras.items() if k.startswith("canal.header.")}
        if rows is not None:
            props.setdefault("rowsCount", str(rows))
        for key in _HEADER_PROPS:
            if key in props:
                header.props.add(key=key, value=props.pop(key))
        for key, value in props.items():
            header.props.add(key=key, value=value)
        header.gtid = event["tx_id"] or ""
        return header

    def _build_entry(self, events: list[dict]):
        first = events[0]
        extras = _extras(first)
        change = pb.RowChange()
        try:
            if first["kind"] == Kind.DDL:
                type_name = extras.get("canal.type") or canal_ddl_type(first["ddl_type"] or classify(first["ddl_query"]))
                event_type = EVENT.Value(type_name) if type_name in EVENT.keys() else EVENT.QUERY
                header = self._header(first, event_type, None)
                change.eventType = event_type
                change.isDdl = True
                change.sql = first["ddl_query"] or ""
                change.ddlSchemaName = extras.get("canal.ddlSchemaName", first["database"] or "")
            else:
                op = first["op"]
                if op not in _OP_EVENT:
                    raise EncodeError(f"row event with op {op!r}")
                event_type = _OP_EVENT[op]
                header = self._header(first, event_type, len(events))
                change.tableId = int(extras.get("canal.tableId", 0))
                change.eventType = event_type
                change.isDdl = False
                for event in events:
                    self._row(change.rowDatas.add(), event)
            return pb.Entry(header=header, entryType=ENTRY.ROWDATA, storeValue=change.SerializeToString())
        except (ValueError, ProtobufEncodeError) as e:
            raise EncodeError(f"canal-protobuf cannot encode event: {e}") from e

    def _row(self, row, event: dict) -> None:
        op = event["op"]
        before = event["before"] if op != Op.INSERT else None
        after = event["after"] if op != Op.DELETE else None
        if op != Op.DELETE and not after:
            raise EncodeError(f"{op} event without its after image")
        if op != Op.INSERT and not before:
            raise EncodeError(f"{op} event without its before image")
        keys = set(event["key_columns"] or ())
        zone = self.zone
        before_texts = []
        for index, c in enumerate(before or ()):
            text = canal_text(c, zone)
            before_texts.append(text)
            row.beforeColumns.add(
                index=index, sqlType=canal_sql_type(c["mysql_type"], c["value"]), name=c["name"],
                isKey=c["name"] in keys, isNull=text is None, value=text or "", mysqlType=c["mysql_type"] or "",
            )
        for index, c in enumerate(after or ()):
            text = canal_text(c, zone)
            # Canal's isUpdate: changed against the before column of the same index, or no such column
            updated = index >= len(before_texts) or before_texts[index] != text
            row.afterColumns.add(
                index=index, sqlType=canal_sql_type(c["mysql_type"], c["value"]), name=c["name"],
                isKey=c["name"] in keys, updated=updated, isNull=text is None, value=text or "",
                mysqlType=c["mysql_type"] or "",
            )


def _binlog_position(event: dict) -> list[int] | None:
    """The event's position when it is Canal's (file number, offset, row index); another
    protocol's position (OceanBase's one-element record id) says nothing about a binlog."""
    position = event["position"]
    return position if position is not None and len(position) == 3 else None


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def compiled_encode_rule(utc: bool):
    """The rule of a column type text for the compiled encoder (`canal_common.type_info`):
    (sqlType of NULL, sqlType of a value, unsigned promotion limit or None, its wider sqlType,
    value kind: 0 the UTF-8 text, 1 ISO-8859-1 characters of the bytes, 2 left to Python (a
    FLOAT / DOUBLE, whose Java text numpy writes; a TIMESTAMP moved to another zone))."""
    def rule(type_text):
        info = type_info(type_text)
        kind = info.kind
        code = 0 if kind == "text" or (kind == "timestamp" and utc) else 1 if kind == "binary" else 2
        limit, wider = info.promotion or (None, 0)
        return info.sql_null, info.sql_value, limit, wider, code
    return rule


_COMPILED_KINDS = {"text": 0, "binary": 1, "float": 2, "double": 3}


def compiled_type_rule(utc: bool):
    """The rule of a column type text for the compiled decoder (`canal_common.type_info`, this
    codec's own): (flags, value kind: 0 text, 1 binary, 2 float, 3 double, 4 left to Python,
    labels, is_enum). A TIMESTAMP is its text when the source zone is UTC
    (`timestamp_to_utc` keeps it), else the codec moves it (kind 4)."""
    def rule(type_text):
        info = type_info(type_text)
        kind = info.kind
        if kind == "timestamp":
            kind = "text" if utc else None
        labels = info.labels
        return info.flags, _COMPILED_KINDS.get(kind, 4), list(labels) if labels else None, info.mysql_type.base == "enum"
    return rule

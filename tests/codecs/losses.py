"""What each protocol cannot carry: the ONE table the conversion matrix compares events with.

Every loss is a `Rule`: a small, explicit normalisation of a canonical event stream ("what is
left of these events after a trip through the protocol") with the words of the protocol's page
in docs/protocols/ that state it (`doc`, `says`). tests/codecs/test_conversion_matrix.py checks
that each page says exactly that, and that every rule is needed (dropping it breaks the
expectation for some input). `PROFILES` lists the protocols and options the matrix runs;
`Profile.expect` applies the rules in order:

* `refuses` rules name events the encoder must reject with an EncodeError (the conversion
  cannot be done for them; the matrix checks that it is refused, then converts the rest);
* `losses` rules turn the stream into what decoding gives back: events not carried are
  dropped, fields lost become null or are rederived, columns are coarsened.

A conversion A -> B is expected to give `B.expect(A.expect(stream))`. Anything else is either a
loss missing from this table and from the protocol's page (document it in both) or a codec bug.

Adding a protocol: a `Profile(...)` line in PROFILES with its rules (the matrix test fails until
every registered protocol has one).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable

from cdc_codecs.ddl_types import classify
from cdc_codecs.events import CONTENT_FIELDS, ColumnFlag, Kind, Op
from cdc_codecs.mysql_types import BINARY_BASES, TEXT_BASES, parse_type

F = ColumnFlag
KEY = int(F.PRIMARY_KEY | F.HANDLE_KEY)
SIDES = ("before", "after")
INTEGERS = ("tinyint", "smallint", "mediumint", "int", "bigint")


@dataclasses.dataclass(frozen=True)
class Rule:
    doc: str  # the page under docs/protocols/ that states the loss
    says: str  # words of that page (checked verbatim, whitespace-insensitive)
    apply: Callable  # losses: stream -> stream; refusals: event -> bool

    def __repr__(self) -> str:
        return f"{self.doc.rsplit('/', 1)[-1]}: {self.says!r}"


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str  # how the matrix names it
    protocol: str
    options: dict
    refuses: tuple[Rule, ...]
    losses: tuple[Rule, ...]

    def __repr__(self) -> str:
        return f"Profile({self.name!r})"

    def refused(self, event: dict) -> Rule | None:
        return next((r for r in self.refuses if r.apply(event)), None)

    def expect(self, events: list[dict], without: Rule | None = None) -> list[dict]:
        """What decoding gives back after encoding `events` (the refused ones left out)."""
        stream = [copy.deepcopy(content(e)) for e in events if self.refused(e) is None]
        for rule in self.losses:
            if rule is not without:
                stream = rule.apply(stream)
        return stream


def content(event: dict) -> dict:
    return {k: event[k] for k in CONTENT_FIELDS}


# ------------------------------------------------------------------------------ building blocks

def per_event(fn: Callable[[dict], dict | None]) -> Callable[[list[dict]], list[dict]]:
    """Lift `event -> event, or None when not carried` to a stream rule."""
    return lambda events: [e for e in map(fn, events) if e is not None]


def per_column(fn: Callable[[dict, dict], dict]) -> Callable[[list[dict]], list[dict]]:
    """Lift `(column, its event) -> column` to a stream rule over both images of every row."""

    def apply(event: dict) -> dict:
        for side in SIDES:
            if event[side] is not None:
                event[side] = [fn(dict(c), event) for c in event[side]]
        return event

    return per_event(apply)


def drop_kind(kind: str):
    return per_event(lambda e: None if e["kind"] == kind else e)


def null(*fields: str):
    return per_event(lambda e: {**e, **dict.fromkeys(fields)})


def keys_of(event: dict) -> set:
    return set(event["key_columns"] or ())


def main_image(event: dict) -> list[dict]:
    return event["before"] if event["op"] == Op.DELETE else event["after"]


def event_ms(event: dict) -> int | None:
    """The event time, else the physical part of its commit ts (watermark ts)."""
    if event["execute_ts_ms"] is not None:
        return event["execute_ts_ms"]
    ts = event["watermark_ts"] if event["kind"] == Kind.WATERMARK else event["commit_ts"]
    return None if ts is None else ts >> 18


def whole_seconds(event: dict) -> dict:
    ms = event_ms(event)
    return {**event, "execute_ts_ms": None if ms is None else ms // 1000 * 1000}


def extras(keep: Callable[[str], bool], add: Callable[[dict], dict] = lambda e: {}):
    """extras after the trip: the incoming keys `keep` accepts, then what the decoder adds."""

    def apply(event):
        kept = {k: v for k, v in (event["extras"] or {}).items() if keep(k)}
        kept.update(add(event))
        return {**event, "extras": kept or None}

    return per_event(apply)


def ddl_type_from_query(event: dict) -> dict:
    if event["kind"] == Kind.DDL:
        event["ddl_type"] = classify(event["ddl_query"])
    return event


def not_utf8(event: dict) -> bool:
    """A value of a non-binary type whose bytes are not UTF-8 text."""
    for side in SIDES:
        for c in event[side] or ():
            if c["value"] is not None and not parse_type(c["mysql_type"]).is_binary:
                try:
                    c["value"].decode("utf-8")
                except UnicodeDecodeError:
                    return True
    return False


def replace_non_utf8(column: dict, event: dict, keep: frozenset = frozenset()) -> dict:
    """Bytes that are not UTF-8 in a non-binary column (but types in `keep`) -> U+FFFD."""
    t = parse_type(column["mysql_type"])
    if column["value"] is not None and not t.is_binary and t.base not in keep:
        column["value"] = column["value"].decode("utf-8", "replace").encode()
    return column


def short_type(column: dict, event: dict) -> dict:
    """Base name plus ` unsigned` / ` zerofill` (not for bit / year): no parameters."""
    t = parse_type(column["mysql_type"])
    text = t.base
    if t.base not in ("bit", "year"):
        text += " unsigned" * t.unsigned + " zerofill" * t.zerofill
    return {**column, "mysql_type": text}




def no_label(column: dict, event: dict) -> dict:
    return {**column, "label": None}


def update_without_before(event: dict) -> bool:
    return event["op"] == Op.UPDATE and not event["before"]


# ------------------------------------------------------------------------------ canal-json (TiCDC)

CANAL_JSON = "docs/protocols/canal-json.md"


def _type_says_binary(column: dict) -> bool:
    text = (column["mysql_type"] or "").lower()
    return parse_type(text).is_binary or "binary" in text or "blob" in text


def canal_flags(column: dict, event: dict) -> dict:
    """Canal's and canal-json's flags: BINARY and UNSIGNED from the type, the key from the key."""
    flags = F.BINARY if _type_says_binary(column) else 0
    flags |= F.UNSIGNED if parse_type(column["mysql_type"]).unsigned else 0
    flags |= KEY if column["name"] in keys_of(event) else 0
    return {**column, "flags": int(flags)}


def _canal_json_extras(event: dict) -> dict:
    incoming = event["extras"] or {}
    out = {"canal.ts": incoming.get("canal.ts", str(event["execute_ts_ms"]))}
    if int(incoming.get("canal.id", 0)):
        out["canal.id"] = incoming["canal.id"]
    if "canal.type" in incoming and event["kind"] == Kind.DDL:
        out["canal.type"] = incoming["canal.type"]
    return out


CANAL_JSON_REFUSES = (Rule(CANAL_JSON, "An UPDATE without `before`", update_without_before),)
CANAL_JSON_TYPES = Rule(CANAL_JSON, "**Type parameters**", per_column(lambda c, e: no_label(short_type(c, e), e)))


def canal_json_losses(*type_rules: Rule) -> tuple[Rule, ...]:
    return type_rules + (
        Rule(CANAL_JSON, "**flags are derived**", per_column(canal_flags)),
        Rule(CANAL_JSON, "`position` and `tx_id` are not carried", null("position", "tx_id")),
        Rule(CANAL_JSON, "`execute_ts_ms` is `es`", per_event(lambda e: {**e, "execute_ts_ms": event_ms(e) or 0})),
        Rule(CANAL_JSON, "`ddl_type` is classified from the query", per_event(ddl_type_from_query)),
        Rule(CANAL_JSON, "not UTF-8 become U+FFFD", per_column(replace_non_utf8)),
        Rule(CANAL_JSON, "`extras`: only `canal.ts`", extras(lambda k: False, _canal_json_extras)),
    )


# ------------------------------------------------------------------------------ Canal (protobuf, flat)

CANAL = "docs/protocols/canal-protobuf.md"


def _canal_keys(empty):
    """Key columns as Canal marks them: per column of the row's image, in column order."""

    def apply(event):
        if event["kind"] == Kind.ROW:
            keys = keys_of(event)
            event["key_columns"] = [c["name"] for c in main_image(event) if c["name"] in keys] or empty
        return event

    return per_event(apply)


def _binlog_position_only(event):
    position = event["position"]
    return {**event, "position": position if position is not None and len(position) == 3 else None}


def _canal_protobuf_extras(event):
    incoming = event["extras"] or {}
    out = {"canal.id": incoming.get("canal.id", "0")}
    if event["position"]:
        out["canal.logfileName"] = incoming.get("canal.logfileName", f"mysql-bin.{event['position'][0]:06d}")
    if event["kind"] == Kind.ROW:
        out["canal.header.rowsCount"] = incoming.get("canal.header.rowsCount", "1")
    return out


def _canal_flat_extras(event):
    incoming = event["extras"] or {}
    out = {"canal.ts": incoming.get("canal.ts", str(event["execute_ts_ms"]))}
    if int(incoming.get("canal.id", 0)):
        out["canal.id"] = incoming["canal.id"]
    return out


CANAL_REFUSES = (
    Rule(CANAL, "An UPDATE without `before`", update_without_before),
    Rule(CANAL, "Values of non-binary types whose bytes are not UTF-8 (an EncodeError)", not_utf8),
)
CANAL_COMMON = (
    Rule(CANAL, "`commit_ts` (Canal has none", null("commit_ts")),
    Rule(CANAL, "`watermark` events", drop_kind(Kind.WATERMARK)),
    Rule(CANAL, "`ddl_type` classified from it", per_event(ddl_type_from_query)),
    Rule(CANAL, "column `flags` other than BINARY, UNSIGNED, PRIMARY_KEY | HANDLE_KEY", per_column(canal_flags)),
)
CANAL_PROTOBUF_LOSSES = CANAL_COMMON + (
    Rule(CANAL, "only a Canal position `[file number, offset, row index]` is written", per_event(_binlog_position_only)),
    Rule(CANAL, "`execute_ts_ms` 0 (reads back as null)", per_event(
        lambda e: {**e, "execute_ts_ms": e["execute_ts_ms"] or None})),
    Rule(CANAL, "`key_columns` names not marked `isKey`", _canal_keys([])),
    Rule(CANAL, "`extras`: `canal.id` (`0` for events from other protocols)", extras(
        lambda k: k.startswith("canal.") and k not in ("canal.ts", "canal.id"), _canal_protobuf_extras)),
)
CANAL_FLAT_LOSSES = CANAL_COMMON + (
    Rule(CANAL, "`position` (a flat message has no binlog position)", null("position")),
    Rule(CANAL, "`execute_ts_ms` below the second", per_event(whole_seconds)),
    Rule(CANAL, "is written with `es` 0, which reads back as 0", per_event(lambda e: {**e, "execute_ts_ms": e["execute_ts_ms"] or 0})),
    Rule(CANAL, "`key_columns` `[]` (written as `null`)", _canal_keys(None)),
    Rule(CANAL, "`extras`: only `canal.ts` (the message `ts`) and a non-zero `canal.id`", extras(
        lambda k: False, _canal_flat_extras)),
)


# ------------------------------------------------------------------------------ open protocol

OPEN = "docs/protocols/open-protocol.md"




def _open_type(column: dict, event: dict) -> dict:
    t = parse_type(column["mysql_type"])
    unsigned = column["flags"] & F.UNSIGNED and t.base in (*INTEGERS, "float", "double", "decimal")
    return {**column, "mysql_type": t.base + " unsigned" * bool(unsigned)}


def _open_order(event):
    if event["kind"] == Kind.ROW:
        for side in SIDES:
            if event[side] is not None:
                event[side] = sorted(event[side], key=lambda c: c["name"].encode())
        event["key_columns"] = [c["name"] for c in main_image(event) if c["flags"] & F.HANDLE_KEY]
    return event


def _open_update_as_insert(event):
    return {**event, "op": Op.INSERT} if update_without_before(event) else event






OPEN_REFUSES = (
    Rule(OPEN, "**commit_ts is required**", lambda e: e["kind"] != Kind.WATERMARK and e["commit_ts"] is None),
)
OPEN_LOSSES = (
    Rule(OPEN, "**Type parameters**", per_column(_open_type)),
    Rule(OPEN, "**ENUM / SET labels**", per_column(no_label)),
    Rule(OPEN, "**Column order**", per_event(_open_order)),
    Rule(OPEN, "**UPDATE without old values**", per_event(_open_update_as_insert)),
    Rule(OPEN, "only `open.rid`, `open.ptn`, `open.ddl_action` are kept", extras(
        lambda k: k in ("open.rid", "open.ptn", "open.ddl_action"))),
    Rule(OPEN, "not UTF-8 in a non-binary column written as a JSON string", per_column(
        lambda c, e: replace_non_utf8(c, e, keep=TEXT_BASES))),
)


# ------------------------------------------------------------------------------ avro

AVRO = "docs/protocols/avro.md"
AVRO_SCHEMA_IDS = ("avro.key_schema_id", "avro.value_schema_id")  # registry-assigned: any value


def sanitize(name: str | None) -> str | None:
    if name is None:
        return None
    out = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in name)
    return "_" + out if out[:1].isdigit() else out


def _avro_type(column: dict, event: dict) -> dict:
    t = parse_type(column["mysql_type"])
    base, text = t.base, column["mysql_type"]
    if base in ("tinyint", "smallint", "mediumint", "int"):
        text = ("int unsigned" if base == "int" else "mediumint unsigned") if t.unsigned else "int"
    elif base == "bigint":
        text = "bigint unsigned" if t.unsigned else "bigint"
    elif base == "decimal":
        text = f"decimal({t.params[0]},{t.params[1] if len(t.params) > 1 else 0})" if t.params else "decimal"
    elif base in ("char", "varchar", *TEXT_BASES):
        text = "longtext"
    elif base in BINARY_BASES:
        text = "longblob"
    elif base not in ("enum", "set", "bit"):  # labels and the BIT length stay
        text = base
    return {**column, "mysql_type": text}


def _avro_flags(column: dict, event: dict) -> dict:
    t = parse_type(column["mysql_type"])
    flags = 0
    if t.base in INTEGERS and (t.unsigned or column["flags"] & F.UNSIGNED):
        flags |= F.UNSIGNED
    if t.is_binary:
        flags |= F.BINARY
    if column["flags"] & F.NULLABLE or column["value"] is None:
        flags |= F.NULLABLE
    if column["name"] in keys_of(event):
        flags |= F.HANDLE_KEY
    return {**column, "flags": int(flags)}




def _avro_names(event):
    if event["kind"] == Kind.ROW:
        event["database"], event["table"] = sanitize(event["database"]), sanitize(event["table"])
        event["key_columns"] = [sanitize(k) for k in event["key_columns"] or ()]
        for side in SIDES:
            if event[side] is not None:
                event[side] = [{**c, "name": sanitize(c["name"])} for c in event[side]]
    return event




def _avro_delete(event):
    if event["op"] == Op.DELETE:
        keys = keys_of(event)
        event.update(before=[c for c in event["before"] if c["name"] in keys], commit_ts=None, execute_ts_ms=None)
    return event




def _avro_row_times(event):
    if event["kind"] == Kind.ROW and event["op"] != Op.DELETE:
        event.update(commit_ts=event["commit_ts"] or None, execute_ts_ms=event_ms(event) or None)
    return event


def _avro_derived_times(event):
    if event["kind"] != Kind.ROW:
        ts = event["commit_ts"] if event["kind"] == Kind.DDL else event["watermark_ts"]
        event.update(commit_ts=event["commit_ts"] or None, execute_ts_ms=(ts or 0) >> 18 or None)
    return event


def _avro_extras(event):
    if event["kind"] != Kind.ROW:
        return {}
    ids = {"avro.key_schema_id": "*"} if event["key_columns"] else {}
    if event["op"] != Op.DELETE:
        ids["avro.value_schema_id"] = "*"
    return ids


def _avro_integer_out_of_range(event: dict) -> bool:
    """A value its Avro integer type cannot hold: int for tinyint..mediumint and signed int,
    long for unsigned int and signed bigint (BIGINT UNSIGNED wraps, as in TiCDC). A DELETE
    sends only its key columns, an UPDATE only its new values."""
    if event["kind"] != Kind.ROW:
        return False
    keys = keys_of(event)
    sent = event["after"] if event["op"] != Op.DELETE else [c for c in event["before"] if c["name"] in keys]
    for c in sent:
        t = parse_type(c["mysql_type"])
        if t.base not in INTEGERS or c["value"] is None:
            continue
        unsigned = t.unsigned or c["flags"] & F.UNSIGNED
        bits = 64 if t.base == "bigint" or (t.base == "int" and unsigned) else 32
        lo, hi = (0, (1 << 64) - 1) if t.base == "bigint" and unsigned else (-(1 << bits - 1), (1 << bits - 1) - 1)
        if not lo <= int(c["value"]) <= hi:
            return True
    return False


AVRO_REFUSES = (
    Rule(AVRO, "A DELETE of a table without a handle key cannot be sent", lambda e: e["op"] == Op.DELETE and not keys_of(e)),
    Rule(AVRO, "An integer value outside the range of its Avro type", _avro_integer_out_of_range),
)
AVRO_LOSSES = (
    Rule(AVRO, "`flags`: only UNSIGNED (integers), BINARY (binary strings), NULLABLE and HANDLE_KEY survive",
         per_column(_avro_flags)),
    Rule(AVRO, "`mysql_type` is coarsened to the table above", per_column(_avro_type)),
    Rule(AVRO, "`key_columns` lose characters", per_event(_avro_names)),
    Rule(AVRO, "**UPDATE has no old values**", per_event(lambda e: {**e, "before": None} if e["op"] == Op.UPDATE else e)),
    Rule(AVRO, "**DELETE has no commit ts**", per_event(_avro_delete)),
    Rule(AVRO, "a missing commit ts or event time is written as 0 and reads back as null", per_event(_avro_row_times)),
    Rule(AVRO, "Their `execute_ts_ms` is derived", per_event(_avro_derived_times)),
    Rule(AVRO, "`tx_id`, `position` and other protocols' `extras` are not carried", null("tx_id", "position")),
    Rule(AVRO, "`avro.key_schema_id`, `avro.value_schema_id` (the writer schemas)", extras(lambda k: False, _avro_extras)),
)


# ------------------------------------------------------------------------------ oceanbase-avro

OCEANBASE = "docs/protocols/oceanbase-avro.md"
_OB_KNOWN = {*INTEGERS, "float", "double", "decimal", "date", "datetime", "timestamp", "time", "year", "bit",
             "json", "enum", "set", "char", "varchar", "geometry", "null", *TEXT_BASES, *BINARY_BASES}


def _ob_type(column: dict, event: dict) -> dict:
    """The base type of the column's code; DECIMAL (p,s), BIT (n) and ENUM/SET labels only when
    some image of the event has a value for the column (a value record states them)."""
    t = parse_type(column["mysql_type"])
    base = t.base
    with_params = any(c["name"] == column["name"] and c["value"] is not None for side in SIDES for c in event[side] or ())
    if not base:
        text = None
    elif base not in _OB_KNOWN:
        text = "varchar"
    elif with_params and base in ("decimal", "bit", "enum", "set") and t.params:
        if base == "decimal":
            text = f"decimal({int(t.params[0])},{int((t.params + ('0',))[1])})"
        else:
            text = f"bit({int(t.params[0])})" if base == "bit" else column["mysql_type"]
    else:
        text = base
    return {**column, "mysql_type": text}


def _ob_flags(column: dict, event: dict) -> dict:
    flags = F.BINARY if parse_type(column["mysql_type"]).is_binary else 0
    return {**column, "flags": int(flags | (KEY if column["name"] in keys_of(event) else 0))}


def _ob_positions(events):
    last = 0
    for event in events:
        position = event["position"]
        last = position[0] if position is not None and len(position) == 1 else last + 1
        event["position"] = [last]
    return events


OCEANBASE_REFUSES = (
    Rule(OCEANBASE, "UPDATE images must have the same columns", lambda e: e["op"] == Op.UPDATE and (
        not e["before"] or [c["name"] for c in e["before"]] != [c["name"] for c in e["after"]])),
)
OCEANBASE_LOSSES = (
    Rule(OCEANBASE, "watermarks: not carried", drop_kind(Kind.WATERMARK)),
    Rule(OCEANBASE, "`commit_ts`: always null", null("commit_ts")),
    Rule(OCEANBASE, "`execute_ts_ms`: whole seconds", per_event(whole_seconds)),
    Rule(OCEANBASE, "`position`: only single-element positions", _ob_positions),
    Rule(OCEANBASE, "`ddl_type`: re-classified from the query", per_event(ddl_type_from_query)),
    Rule(OCEANBASE, "`key_columns`: null becomes `[]` for rows", per_event(
        lambda e: {**e, "key_columns": e["key_columns"] or []} if e["kind"] == Kind.ROW else e)),
    Rule(OCEANBASE, "`mysql_type`: the base type of its code", per_column(_ob_type)),
    Rule(OCEANBASE, "`flags`: only BINARY (from the type) and PRIMARY_KEY | HANDLE_KEY", per_column(_ob_flags)),
    Rule(OCEANBASE, "`extras`: only `oceanbase.*` keys", extras(lambda k: k.startswith("oceanbase."))),
)


# ------------------------------------------------------------------------------ craft

CRAFT = "docs/protocols/craft.md"
_CRAFT_NUMERIC = (*INTEGERS, "float", "double", "decimal")
_CRAFT_BINARY = {"varchar": "varbinary", "char": "binary", "tinytext": "tinyblob", "text": "blob",
                 "mediumtext": "mediumblob", "longtext": "longblob"}




def _craft_type(column: dict, event: dict) -> dict:
    base = parse_type(column["mysql_type"]).base
    if column["flags"] & F.BINARY:
        base = _CRAFT_BINARY.get(base, base)
    if column["flags"] & F.UNSIGNED and base in _CRAFT_NUMERIC:
        base += " unsigned"
    return {**column, "mysql_type": base}


def _craft_times(event):
    if event["kind"] == Kind.WATERMARK:
        return {**event, "execute_ts_ms": event["watermark_ts"] >> 18}
    ts = event["commit_ts"] if event["commit_ts"] is not None else event["execute_ts_ms"] << 18
    return {**event, "commit_ts": ts, "execute_ts_ms": ts >> 18}


def _craft_keys(event):
    if event["kind"] == Kind.ROW:
        image = event["before"] or event["after"]
        event["key_columns"] = [c["name"] for c in image if c["flags"] & F.HANDLE_KEY]
    return event


def _craft_integer_out_of_range(event: dict) -> bool:
    for side in SIDES:
        for c in event[side] or ():
            t = parse_type(c["mysql_type"])
            if t.base in INTEGERS and c["value"] is not None:
                unsigned = t.unsigned or c["flags"] & F.UNSIGNED
                lo, hi = (0, (1 << 64) - 1) if unsigned else (-(1 << 63), (1 << 63) - 1)
                if not lo <= int(c["value"]) <= hi:
                    return True
    return False


CRAFT_REFUSES = (
    Rule(CRAFT, "an event with neither cannot be encoded", lambda e: e["kind"] != Kind.WATERMARK and (
        e["commit_ts"] is None and e["execute_ts_ms"] is None)),
    Rule(CRAFT, "Integers outside int64 (signed) or 0..2^64-1 (unsigned, BIT/ENUM/SET) cannot be encoded",
         _craft_integer_out_of_range),
)
CRAFT_LOSSES = (
    Rule(CRAFT, "**Type parameters**", per_column(_craft_type)),
    Rule(CRAFT, "**ENUM / SET labels**", per_column(no_label)),
    Rule(CRAFT, "`execute_ts_ms` is always `commit_ts >> 18`", per_event(_craft_times)),
    Rule(CRAFT, "`key_columns` is rebuilt from handle-key flags", per_event(_craft_keys)),
    Rule(CRAFT, "An UPDATE without a `before` image decodes as an INSERT", per_event(_open_update_as_insert)),
    Rule(CRAFT, "`position`, `tx_id` and other protocols' `extras` are dropped", per_event(
        lambda e: {**e, "position": None, "tx_id": None})),
    Rule(CRAFT, "`craft.partition_id`", extras(lambda k: k.startswith("craft."))),
)


# ------------------------------------------------------------------------------ the matrix

TIDB = {"enable-tidb-extension": "true"}
REGISTRY = "<schema-registry>"  # the test puts its file:// registry here

PROFILES = [
    Profile("canal-json", "canal-json", TIDB, CANAL_JSON_REFUSES, canal_json_losses(CANAL_JSON_TYPES)),
    Profile("canal-json+content-compatible", "canal-json", {**TIDB, "content-compatible": "true"},
            CANAL_JSON_REFUSES, canal_json_losses()),
    Profile("canal-json/canal", "canal-json", {"flat-message-flavor": "canal"}, CANAL_REFUSES, CANAL_FLAT_LOSSES),
    Profile("open-protocol", "open-protocol", {}, OPEN_REFUSES, OPEN_LOSSES),
    Profile("avro", "avro", {**TIDB, "avro-enable-watermark": "true", "schema-registry": REGISTRY},
            AVRO_REFUSES, AVRO_LOSSES),
    Profile("canal-protobuf", "canal-protobuf", {}, CANAL_REFUSES, CANAL_PROTOBUF_LOSSES),
    Profile("oceanbase-avro", "oceanbase-avro", {}, OCEANBASE_REFUSES, OCEANBASE_LOSSES),
    Profile("craft", "craft", {}, CRAFT_REFUSES, CRAFT_LOSSES),
]

"""A replay's re-encoded snapshot and topics (canal-json, with DDL) are the same bytes whether
the compiled encoder writes the row messages or the Python codec does (CDC_REPLAY_NATIVE_ENCODE);
the writer sends the rows its hook leaves alone or projects in Arrow to the compiled encoder
without dicts (counted), and only the rest through dicts."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cdc_codecs.events import EVENT_SCHEMA, ColumnFlag, Kind, Op, column, new_event
from spark_apps import native_decode, native_encode, storage
from spark_apps.ddl import SchemaHistory
from spark_apps.generate import generate, write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.outputs.kafka_records import fed_lean, write_topics_fn
from spark_apps.replay import run
from spark_apps.snapshot import precision_from_history, projector

pytestmark = [pytest.mark.skipif(native_decode.cdc_replay_native is None, reason=f"{native_decode.UNAVAILABLE}")]
TIDB = ["--protocol-option", "enable-tidb-extension=true", "--target-option", "enable-tidb-extension=true"]


def objects(output: str) -> dict[str, bytes]:
    """The output's data objects (the manifest holds run times) by relative path."""
    return {storage.relative(info.uri, output): storage.read_bytes(info.uri)
            for info in storage.list_objects(output) if info.uri.endswith(".jsonl.gz")}


@pytest.mark.spark
@pytest.mark.parametrize("emit,extra", [("snapshot", []), ("topics", ["--target-option", "content-compatible=true"])])
def test_the_compiled_and_python_encoders_write_the_same_objects(spark, tmp_path, monkeypatch, emit, extra):
    # orders: DATETIME(3) (canal-json says `datetime`), ENUM; ledger: no key; DDL adds and
    # drops columns (rows before it are projected in the snapshot); three partitions
    generated = generate(transactions=200, partitions=3, seed=29, ddl_rate=0.05, keyless=True)
    assert any(e["kind"] == "ddl" for e in generated.events)
    assert any(e["table"] == "ledger" for e in generated.events if e["kind"] == "row")
    written = replayed_by_switch(spark, tmp_path, monkeypatch, generated,
                                 ["--protocol", "canal-json", "--emit", emit, "--target-partitions", "3", *TIDB, *extra])
    assert written["1"] and written["1"] == written["0"]


def replayed_by_switch(spark, tmp_path, monkeypatch, generated, args) -> dict:
    """{switch: the output's data objects}: `generated`'s archive replayed with
    $CDC_REPLAY_NATIVE_ENCODE 1 and 0; `args` (protocol, emit, options; or a function of the
    switch giving them: a registry each) follow `--source` and `--output`."""
    source = str(tmp_path / "archive")
    write_archive(generated.records, source)
    written = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(native_encode.ENV, switch)
        output = str(tmp_path / f"out{switch}")
        argv = ["--source", source, "--output", output, *(args(switch) if callable(args) else args)]
        run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
        written[switch] = objects(output)
    return written


# ---------------------------------------------------------------- the writer, fed Arrow batches
# The writer's own input (events with out_topic/out_partition/sort_point, as Spark hands them),
# built by hand so each case is there: a table whose DDL drops and adds columns (rows before
# the DDL need the projection, rows after it do not, unless their image has another column
# order), a keyless table (a DDL too, and rows naming a key), a table with DATETIME(3) (a value
# at another precision: `prepare` renders it) and plain DATETIME, a table no DDL describes, DDL
# and watermark events (Python encodes them), three partitions.

WRITER_SCHEMA = pa.schema([*EVENT_SCHEMA, pa.field("out_topic", pa.string()), pa.field("out_partition", pa.int32()),
                           pa.field("sort_point", pa.list_(pa.int64())), pa.field("sort_rank", pa.int32()),
                           pa.field("timeline", pa.list_(pa.int64()))])
DDL = [(10, "CREATE TABLE p (id INT PRIMARY KEY, a VARCHAR(10), b INT)"),
       (11, "CREATE TABLE k (x INT, y VARCHAR(5))"),
       (12, "CREATE TABLE tm (id INT PRIMARY KEY, d DATETIME(3), e DATETIME)"),
       (20, "ALTER TABLE p DROP COLUMN b"),
       (30, "ALTER TABLE p ADD COLUMN c INT DEFAULT 7"),
       (35, "ALTER TABLE k ADD COLUMN z VARCHAR(3) DEFAULT 'zz'")]
PK = int(ColumnFlag.PRIMARY_KEY)


def _row(ts, table, cols, keys, op=Op.INSERT):
    image = [column(name, value, typ, flags) for name, value, typ, flags in cols]
    return new_event(Kind.ROW, op=op, commit_ts=ts, execute_ts_ms=ts * 1000, database="d", table=table,
                     key_columns=keys, before=image if op == Op.DELETE else None,
                     after=None if op == Op.DELETE else image, partition=0, offset=ts, topic="src")


def writer_events() -> list[dict]:
    events = []
    for ts, query in DDL:
        events.append(new_event(Kind.DDL, commit_ts=ts, database="d", table=query.split()[2], ddl_query=query,
                                ddl_type="create table", offset=ts))
    for i in range(60):
        ts = 13 + i
        idv = str(i).encode()
        if ts < 20:
            p_cols = [("id", idv, "int", PK), ("a", b"x", "varchar(10)", 0), ("b", b"1", "int", 0)]
        elif ts < 30:
            p_cols = [("id", idv, "int", PK), ("a", b"x", "varchar(10)", 0)]
        elif i % 7:
            p_cols = [("id", idv, "int", PK), ("a", b"x", "varchar(10)", 0), ("c", b"8", "int", 0)]
        else:  # an image in another order than the table's: the projection reorders it
            p_cols = [("a", b"x", "varchar(10)", 0), ("id", idv, "int", PK), ("c", b"8", "int", 0)]
        events.append(_row(ts, "p", p_cols, ["id"], op=Op.DELETE if i % 11 == 5 else Op.INSERT))
        k_cols = [("x", idv, "int", 0), ("y", b"y\xc3\xa9", "varchar(5)", 0)]
        k_cols += [("z", b"w", "varchar(3)", 0)] if ts > 35 else []
        # a keyless row whose message names a key: the snapshot writes the table's identity (none)
        events.append(_row(ts, "k", k_cols, ["x"] if i % 5 == 0 else []))
        # d: at its declared precision (as TiCDC renders it) or not (as OceanBase does)
        d = b"2020-01-02 03:04:05.120000" if i % 2 else b"2020-01-02 03:04:05.120"
        events.append(_row(ts, "tm", [("id", idv, "int", PK), ("d", d, "datetime", 0),
                                      ("e", b"2020-01-02 03:04:05", "datetime", 0)], ["id"]))
        events.append(_row(ts, "u", [("id", idv, "bigint", PK), ("v", b"free text", "text", 0)], ["id"]))
    return events


def writer_batches(events, partitions=3, size=50) -> list[pa.RecordBatch]:
    """The events placed and ordered as the writer receives them (a DDL in every partition)."""
    rows = []
    for e in events:
        point = [e["commit_ts"]]
        places = range(partitions) if e["kind"] == Kind.DDL else [int(e["commit_ts"]) % partitions]
        rows += [{**e, "out_topic": "out", "out_partition": p, "sort_point": point, "timeline": point,
                  "sort_rank": 2 if e["kind"] == Kind.DDL else 1} for p in places]
    rows.append({**new_event(Kind.WATERMARK, watermark_ts=99), "out_topic": "out", "out_partition": 0,
                 "sort_point": [99], "timeline": [99], "sort_rank": 3})
    rows.sort(key=lambda r: (r["out_partition"], r["sort_point"], r["sort_rank"]))
    table = pa.Table.from_pylist(rows, WRITER_SCHEMA)
    return table.to_batches(max_chunksize=size)


def writer_prepare(emit: str):
    """The `prepare` the output plan gives the writer for `emit` over the DDL history `DDL`."""
    history = SchemaHistory()
    for ts, query in DDL:
        history.apply(query, [ts], "d")
    if emit == "snapshot":
        return projector({(s.database.lower(), s.name.lower()): s for s in history.tables.values()
                          if s.columns_known})
    return precision_from_history(history)


def written_by_switch(tmp_path, monkeypatch, events, emit, protocol, options, max_records):
    """({switch: (objects, WRITTEN rows but their uri)}, {switch: counts}): `events` written
    by `write_topics_fn` with $CDC_REPLAY_NATIVE_ENCODE 1 and 0 (`options` may be a function
    of the switch: a registry each)."""
    written, stats = {}, {}
    for switch in ("1", "0"):
        monkeypatch.setenv(native_encode.ENV, switch)
        base = str(tmp_path / switch)
        fn = write_topics_fn(protocol, options(switch) if callable(options) else options, base, max_records,
                             writer_prepare(emit))
        rows = [r for b in fn(iter(writer_batches(events))) for r in b.to_pylist()]
        stats[switch] = fn.counts
        written[switch] = (objects(base), [{k: v for k, v in r.items() if k != "uri"} for r in rows])
    return written, stats


def assert_every_row_compiled(events, stats) -> None:
    """`written_by_switch`'s counts when the compiled encoder takes every row event of
    `writer_events` (most straight from the Arrow batch) and Python only DDL and the watermark."""
    on, off = stats["1"], stats["0"]
    total = len(events) + 2 * sum(e["kind"] == Kind.DDL for e in events) + 1
    assert off.native == 0 and on.native + on.python == total
    assert on.python == 3 * len(DDL) + 1 and on.arrow


@pytest.mark.parametrize("emit", ["snapshot", "topics"])
def test_the_writer_encodes_unprepared_rows_from_arrow_and_writes_the_same_bytes(tmp_path, monkeypatch, emit):
    events = writer_events()
    written, stats = written_by_switch(tmp_path, monkeypatch, events, emit,
                                       "canal-json", {"enable-tidb-extension": "true"}, 40)
    assert written["1"][0] and written["1"] == written["0"]
    on, off = stats["1"], stats["0"]
    total = len(events) + 2 * sum(e["kind"] == Kind.DDL for e in events) + 1
    assert off.dicts == total and off.arrow == 0
    assert on.arrow and on.arrow + on.dicts == total and on.native + on.python == total
    # what had to become a dict: DDL (Python encodes it; the watermark is compiled from the
    # batch), and tm's rows whose DATETIME(3) value has six digits (`prepare` renders it); for
    # the snapshot, p's and k's rows written before their last DDL, in another column order or
    # with another key are projected from the batch
    nonrow = 3 * len(DDL)
    rendered = [e for e in events if e["kind"] == Kind.ROW and e["table"] == "tm" and len(e["after"][1]["value"]) > 23]
    assert len(rendered) == 30
    assert on.dicts == nonrow + len(rendered) and on.python == nonrow
    projected = [e for e in events if e["kind"] == Kind.ROW and (
        (e["table"] == "p" and (e["commit_ts"] <= 30 or (e["after"] or e["before"])[0]["name"] != "id"))
        or (e["table"] == "k" and (e["commit_ts"] <= 35 or e["key_columns"])))]
    assert len(projected) == 24 + 23 + 7
    assert on.projected == (len(projected) if emit == "snapshot" else 0)


def lean_batches(batches) -> tuple[list[pa.RecordBatch], dict]:
    """The writer's batches with lean images (`<image>_schema`, `_values`, `_labels`, as the
    replay's lean rows carry them) and their schema dictionary {id: (names, types, flags)}."""
    ids: dict = {}
    lean_fields = [f for f in WRITER_SCHEMA if f.name not in ("before", "after")]
    for side in ("before", "after"):
        lean_fields += [pa.field(f"{side}_schema", pa.int64()), pa.field(f"{side}_values", pa.list_(pa.binary())),
                        pa.field(f"{side}_labels", pa.list_(pa.string()))]
    out = []
    for batch in batches:
        rows = batch.to_pylist()
        for row in rows:
            for side in ("before", "after"):
                image = row.pop(side)
                if image is None:
                    row.update({f"{side}_schema": None, f"{side}_values": None, f"{side}_labels": None})
                    continue
                shape = tuple(tuple(c[k] for c in image) for k in ("name", "mysql_type", "flags"))
                labels = [c["label"] for c in image]
                row.update({f"{side}_schema": ids.setdefault(shape, 7 * len(ids) - 5),
                            f"{side}_values": [c["value"] for c in image],
                            f"{side}_labels": labels if any(label is not None for label in labels) else None})
        out.append(pa.RecordBatch.from_pylist(rows, pa.schema(lean_fields)))
    return out, {sid: shape for shape, sid in ids.items()}


def test_the_writer_takes_lean_images_and_writes_the_same_bytes(tmp_path):
    """Topics are shuffled with lean images (spark_apps/outputs/plan.py, OutputPlan.topics): the
    writer rebuilds them from the schema dictionary and writes what it writes from full images."""
    history = SchemaHistory()
    for ts, query in DDL:
        history.apply(query, [ts], "d")
    events = writer_events()
    next(e for e in events if e["after"])["after"][0]["label"] = "a label"  # rebuilt in its place
    full = writer_batches(events)
    lean, entries = lean_batches(full)
    assert len(entries) > 3
    written = {}
    for name, batches, given in (("full", full, None), ("lean", lean, entries)):
        base = str(tmp_path / name)
        fn = write_topics_fn("canal-json", {"enable-tidb-extension": "true"}, base, 40,
                             precision_from_history(history))
        if given is not None:
            fn = fed_lean(fn, given)
        rows = [r for b in fn(iter(batches)) for r in b.to_pylist()]
        written[name] = (objects(base), [{k: v for k, v in r.items() if k != "uri"} for r in rows])
    assert written["full"][0] and written["lean"] == written["full"]


def test_the_precision_hooks_check_says_which_rows_it_would_change():
    """`precision_from_history(...).unchanged` (columnar, per batch: the rows the compiled
    encoder may take straight from Arrow) is True exactly where `prepare` leaves the event as
    it is: a temporal column matched by its lower-case name, at its declared precision or not,
    in either image, for tables with and without temporal columns."""
    import copy

    from spark_apps.schema import events_from_batch

    history = SchemaHistory()
    for ts, query in DDL:
        history.apply(query, [ts], "d")
    events = writer_events()
    for e in events[::9]:  # names in another case: the schema's are lower-case
        for image in (e["before"], e["after"]):
            for c in image or ():
                c["name"] = c["name"].upper()
    prepare = precision_from_history(history)
    checked = 0
    for batch in writer_batches(events, size=37):
        said = prepare.unchanged(batch)
        for flag, event in zip(said.tolist(), events_from_batch(batch), strict=True):
            assert flag == (prepare(copy.deepcopy(event)) == event)
            checked += not flag
    assert checked == 30  # tm's DATETIME(3) values with six digits, whatever their names' case


class _Recorder:
    """A writer in place of the object writer (as spark_apps.outputs.kafka's producer is): each
    message added with the events and row events fed when it came."""

    seen: list = []

    def __init__(self, base, topic, partition, max_records):
        self.topic, self.partition, self.offset = topic, partition, 0
        self.fed_events = self.fed_rows = 0
        self.written: list[dict] = []

    def add(self, key, value, headers) -> None:
        _Recorder.seen.append((self.topic, self.partition, self.offset, key, value, tuple(headers or ()),
                               self.fed_events, self.fed_rows))
        self.offset += 1

    def flush(self) -> None:
        self.written.append({"uri": "", "topic": self.topic, "partition": self.partition, "first_offset": 0,
                             "last_offset": self.offset - 1, "records": self.offset, "events": self.fed_events,
                             "rows": self.fed_rows, "bytes": 0})


def test_a_writer_without_add_messages_gets_each_message_with_its_counts(tmp_path, monkeypatch):
    """canal-json's entries go to the writer a batch's run at a time (`write_topics_fn`'s
    `by_batch`); a writer that only has `add` (the Kafka producer's) gets the same messages in
    the same order, with the same events and rows fed before each, as the Python codec's path
    (CDC_REPLAY_NATIVE_ENCODE=0, one event at a time) gives it."""
    history = SchemaHistory()
    for ts, query in DDL:
        history.apply(query, [ts], "d")
    seen, written = {}, {}
    for switch in ("1", "0"):
        monkeypatch.setenv(native_encode.ENV, switch)
        _Recorder.seen = []
        fn = write_topics_fn("canal-json", {"enable-tidb-extension": "true"}, str(tmp_path), 40,
                             precision_from_history(history), _Recorder)
        written[switch] = [r for b in fn(iter(writer_batches(writer_events(), size=23))) for r in b.to_pylist()]
        seen[switch] = _Recorder.seen
    assert len(seen["1"]) > 200 and seen["1"] == seen["0"] and written["1"] == written["0"]


def test_an_event_the_codec_cannot_encode_is_named_in_the_writers_error(tmp_path):
    """canal-json's batch path (`by_batch`) raises as the per-event path did: UNENCODABLE, with
    the event's op, table and place (the task fails)."""
    from cdc_codecs.errors import EncodeError

    events = writer_events()
    bad = next(e for e in events if e["kind"] == Kind.ROW and e["table"] == "u" and e["commit_ts"] > 40)
    bad["op"] = "merge"  # no canal-json type for it: the compiled encoder declines, Python refuses
    fn = write_topics_fn("canal-json", {"enable-tidb-extension": "true"}, str(tmp_path), 40)
    with pytest.raises(EncodeError, match=r"UNENCODABLE canal-json cannot encode the merge event of d\.u .* offset "
                       + str(bad["offset"])):
        list(fn(iter(writer_batches(events, size=23))))

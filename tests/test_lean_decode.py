"""spark_apps/lean_decode.py without Spark: the lean rows the decode tasks write keep every value
and label, and two images get the same column list id exactly when their names, MySQL types
and flags are the same, in order (hypothesis, adversarial names: NUL, the escape's own bytes,
separators). The Spark side is in tests/test_transforms.py and tests/test_gaps.py."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_apps.lean_decode import LEAN_ARROW_SCHEMA, aux_batch, lean, _Runs
from spark_apps.schema import DECODED_ARROW_SCHEMA

NAMES = st.sampled_from(["a", "b", "a\x00", "\x00\x02", "\x00", "a\x00\x02b", "é", "x,y", ""]) | st.text(max_size=4)
TYPES = st.none() | st.sampled_from(["int", "varchar(8)", "enum('\x00','\x00\x03')", "\x00\x03", "\x00\x04"])
COLUMN = st.fixed_dictionaries({"name": NAMES, "mysql_type": TYPES, "flags": st.integers(-3, 40),
                                "value": st.none() | st.binary(max_size=4), "label": st.none() | st.text(max_size=3)})
IMAGE = st.none() | st.lists(COLUMN, max_size=4)


def batch(images: list[tuple]) -> pa.RecordBatch:
    rows = [{"kind": "row", "event_index": 0, "topic": "t", "partition": 0, "offset": i, "before": b, "after": a}
            for i, (b, a) in enumerate(images)]
    return pa.RecordBatch.from_pylist(rows, schema=DECODED_ARROW_SCHEMA)


def shape(image):
    return None if image is None else tuple((c["name"], c["mysql_type"], c["flags"]) for c in image)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(IMAGE, IMAGE), min_size=1, max_size=12), st.integers(0, 3))
def test_lean_rows_keep_values_and_labels_and_ids_name_column_lists_exactly(images, skip):
    decoded = batch(images).slice(min(skip, len(images) - 1))  # sliced, as batches can be
    kept = images[min(skip, len(images) - 1):]
    entries: dict = {}
    out = lean(decoded, entries)
    assert out.schema == LEAN_ARROW_SCHEMA and out.num_rows == len(kept)
    ids = {}
    for row, pair in zip(out.to_pylist(), kept):
        assert row["aux"] is None
        for name, image in zip(("before", "after"), pair):
            sid = row[f"{name}_schema"]
            if image is None:
                assert sid is None and row[f"{name}_values"] is None and row[f"{name}_labels"] is None
                continue
            assert row[f"{name}_values"] == [c["value"] for c in image]
            labels = [c["label"] for c in image]
            assert row[f"{name}_labels"] == (labels if any(x is not None for x in labels) else None)
            assert ids.setdefault(shape(image), sid) == sid  # one list, one id
            names, types, flags = entries[sid]
            assert tuple(zip(names, types, flags)) == shape(image)
    assert len(set(ids.values())) == len(ids)  # different lists, different ids
    # the task's aux row carries the dictionary
    aux = aux_batch(entries, _Runs()).to_pylist()[0]
    assert aux["kind"] == "aux" and {e["id"] for e in aux["aux"]["entries"]} == set(entries)
    # the same rows in two batches of one task (the column lists met in the first known to the
    # second): the same ids and the same dictionary
    cut = len(kept) // 2
    shared: dict = {}
    known: dict = {}
    halves = [lean(decoded.slice(0, cut), shared, known), lean(decoded.slice(cut), shared, known)]
    for name in ("before_schema", "after_schema"):
        assert sum((h.column(name).to_pylist() for h in halves), []) == out.column(name).to_pylist()
    assert shared == entries


EVENT = st.fixed_dictionaries({
    "kind": st.sampled_from(["row", "ddl", "watermark", "quarantine", "empty"]),
    "op": st.none() | st.sampled_from(["insert", "update", "delete"]),
    "commit_ts": st.none() | st.integers(0, 50), "watermark_ts": st.none() | st.integers(0, 50),
    "topic": st.none() | st.sampled_from(["t", "u"]), "partition": st.none() | st.integers(0, 2),
    "offset": st.none() | st.integers(0, 20), "event_index": st.integers(0, 2),
    "error_stage": st.none() | st.sampled_from(["archive", "decode"]),
    "before": st.none() | st.just([]),
})


def expected_stats(events: list[dict]) -> dict:
    """The partition statistics as the replay's former Spark aggregate defined them, in plain Python."""
    out: dict = {}
    for e in events:
        if e["topic"] is None or e["error_stage"] == "archive":
            continue
        s = out.setdefault((e["topic"], e["partition"]), {"records": 0, "watermark": [], "commit": [],
                                                          "rows_without_commit_ts": 0, "updates_without_before": 0,
                                                          "offsets": []})
        # a record has an offset: rows a layout adds itself (a storage sink's checkpoint) have none
        s["records"] += e["event_index"] == 0 and e["offset"] is not None
        if e["kind"] == "watermark" and e["watermark_ts"] is not None:
            s["watermark"].append(e["watermark_ts"])
        if e["commit_ts"] is not None:
            s["commit"].append(e["commit_ts"])
        s["rows_without_commit_ts"] += e["kind"] == "row" and e["commit_ts"] is None
        s["updates_without_before"] += e["op"] == "update" and e["before"] is None
        if e["event_index"] == 0 and e["offset"] is not None:
            s["offsets"].append(e["offset"])
    return {k: {"records": s["records"], "watermark": max(s["watermark"], default=None),
                "min_commit_ts": min(s["commit"], default=None), "max_commit_ts": max(s["commit"], default=None),
                "rows_without_commit_ts": s["rows_without_commit_ts"],
                "updates_without_before": s["updates_without_before"],
                "min_offset": min(s["offsets"], default=None), "max_offset": max(s["offsets"], default=None)}
            for k, s in out.items()}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(EVENT, max_size=10), min_size=1, max_size=3))
def test_partition_statistics_gathered_while_decoding_equal_the_aggregate_over_the_events(batches):
    from spark_apps.lean_decode import _Stats, merge_stats

    # one task's batches, and the same events split over two tasks merged as the driver does
    one, halves = _Stats(), [_Stats(), _Stats()]
    for i, events in enumerate(batches):
        b = pa.RecordBatch.from_pylist(events, schema=DECODED_ARROW_SCHEMA)
        one.add(b)
        halves[i % 2].add(b)
    got = {(r.pop("topic"), r.pop("partition")): r for r in one.rows()}
    assert got == expected_stats([e for events in batches for e in events])
    merged: dict = {}
    for half in halves:
        for r in half.rows():
            key = (r.pop("topic"), r.pop("partition"))
            merged[key] = r if key not in merged else merge_stats(merged[key], r)
    assert merged == got


def test_ddl_events_take_the_table_their_statement_names():
    """Canal sends a DDL with the session's database (`inventory`) and a statement naming
    another one: the decode task gives the event the statement's database and table; a
    statement naming the message's own database, none, or one it cannot read keeps the
    message's; row events are never touched."""
    from spark_apps.lean_decode import where_sql_says

    events = [
        {"kind": "ddl", "database": "inventory", "table": "user02", "ddl_query": "CREATE TABLE `xj_`.`user02` (id INT)"},
        {"kind": "ddl", "database": "Shop", "table": "t", "ddl_query": "ALTER TABLE shop.t ADD COLUMN v INT"},
        {"kind": "ddl", "database": "inventory", "table": "t", "ddl_query": "ALTER TABLE t ADD COLUMN v INT"},
        {"kind": "ddl", "database": "inventory", "table": None, "ddl_query": "NOT SQL ("},
        {"kind": "row", "database": "inventory", "table": "user02", "ddl_query": "CREATE TABLE `xj_`.`x` (id INT)"},
    ]
    batch = pa.RecordBatch.from_pylist([{**e, "event_index": 0} for e in events], schema=DECODED_ARROW_SCHEMA)
    out = where_sql_says(batch).to_pylist()
    assert [(r["database"], r["table"]) for r in out] == [
        ("xj_", "user02"), ("Shop", "t"), ("inventory", "t"), ("inventory", None), ("inventory", "user02")]
    assert where_sql_says(batch.slice(1, 3)) is not None  # nothing to change: the batch as it is


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(COLUMN, max_size=4), min_size=1, max_size=6))
def test_one_column_lists_text_in_python_is_the_batch_kernels_text(images):
    """A batch's column list ids come from the text of one event per group, made in Python
    (`canonical_text`); it must be the text the Arrow kernels make for every event
    (`_canonical`), which groups the events when the extension is not built."""
    from spark_apps.lean_decode import _canonical, canonical_text

    column = batch([(None, image) for image in images]).column("after")
    expected = _canonical(column).to_pylist()
    assert [canonical_text([c["name"] for c in image], [c["mysql_type"] for c in image],
                           [c["flags"] for c in image]) for image in images] == expected


def test_column_list_ids_are_the_same_with_and_without_the_extension(monkeypatch):
    """Grouping by the extension's 16 bytes or by the text gives the same ids and entries."""
    from spark_apps import identity as identity_mod
    from spark_apps.lean_decode import schema_ids

    images = [[{"name": "a", "mysql_type": "int", "flags": 1, "value": b"1", "label": None}],
              None, [{"name": "a\x00", "mysql_type": None, "flags": 0, "value": None, "label": None}],
              [{"name": "a", "mysql_type": "int", "flags": 1, "value": b"2", "label": None}], []]
    column = batch([(None, image) for image in images]).column("after")
    with_ext, without = {}, {}
    ids = schema_ids(column, with_ext).to_pylist()
    monkeypatch.setattr(identity_mod, "_native_identities", None)
    assert schema_ids(column, without).to_pylist() == ids and without == with_ext
    assert ids[0] == ids[3] and ids[1] is None and len({ids[0], ids[2], ids[4]}) == 3


def test_each_lean_row_gets_its_own_place_id_numbered_within_its_task(spark):
    """`place_id`: the task's partition index above PLACE_BITS, the row's number in the task
    below, across batches; the `aux` row has none. Over a Spark job: unique in every task."""
    from pyspark.sql import functions as F

    from spark_apps.lean_decode import LEAN_STRUCT, PLACE_BITS, leaned

    def decoded(batches):  # every input row decoded as one row event
        for b in batches:
            yield batch([(None, [{"name": "id", "mysql_type": "int", "flags": 0, "value": b"1", "label": None}])]
                        * b.num_rows)

    rows = [b for b in leaned(decoded)([pa.record_batch({"x": [1, 2, 3]}), pa.record_batch({"x": [4, 5]})])]
    assert [r.column("place_id").to_pylist() for r in rows] == [[0, 1, 2, 3, 4], [None]]  # gathered in one batch
    frame = spark.range(0, 100, 1, 4).mapInArrow(leaned(decoded), LEAN_STRUCT).where(F.col("aux").isNull())
    ids = [r.place_id for r in frame.select("place_id").collect()]
    assert len(ids) == len(set(ids)) == 100
    assert sorted({i >> PLACE_BITS for i in ids}) == [0, 1, 2, 3]


OBJECT_EVENT = st.fixed_dictionaries({
    "kind": st.sampled_from(["row", "row", "ddl", "watermark"]),
    "op": st.sampled_from(["insert", "update", "delete"]),
    "commit_ts": st.none() | st.integers(0, 50), "watermark_ts": st.none() | st.integers(0, 50),
    "topic": st.sampled_from(["t", "u"]), "partition": st.integers(0, 1),
    "event_index": st.integers(0, 1),
    "ddl_query": st.sampled_from(["CREATE TABLE `other`.`x` (a int)", "ALTER TABLE y ADD b int"]),
    "database": st.just("db"), "table": st.just("tb"),
    "after": IMAGE,
})


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.lists(OBJECT_EVENT, min_size=1, max_size=6), st.integers(0, 4)), min_size=1, max_size=6),
       st.integers(1, 12))
def test_lean_rows_gathered_across_the_decoders_batches_are_the_rows_of_one_batch_at_a_time(objects, rows):
    """`leaned` gathers the decoder's batches (one or more per archive object) up to
    LEAN_BATCH_ROWS before making them lean: the rows, their place ids, identities and column
    list ids, and the task's aux row (dictionary, offset runs, statistics, DDL) are those of one
    decoder batch at a time. The offset runs stay per decoder batch: two objects with a hole
    between them are two runs, whatever was gathered."""
    import spark_apps.lean_decode as lean_decode

    batches, offset = [], 0
    for events, hole in objects:  # an object: its records in increasing offsets, a hole before the next
        rows_of = []
        for e in events:
            rows_of.append({**e, "offset": offset})
            offset += 1
        offset += hole
        batches.append(pa.RecordBatch.from_pylist(rows_of, schema=DECODED_ARROW_SCHEMA))

    def decoder(_):
        yield from batches

    def run(limit):
        kept = lean_decode.LEAN_BATCH_ROWS
        lean_decode.LEAN_BATCH_ROWS = limit
        try:
            out = list(lean_decode.leaned(decoder)(iter([])))
        finally:
            lean_decode.LEAN_BATCH_ROWS = kept
        return pa.Table.from_batches(out[:-1], schema=LEAN_ARROW_SCHEMA).to_pylist(), out[-1].to_pylist()

    one_at_a_time = run(1)
    assert run(rows) == one_at_a_time and run(10**6) == one_at_a_time

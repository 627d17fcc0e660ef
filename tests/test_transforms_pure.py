"""spark_apps.transforms is a library of pure DataFrame -> DataFrame functions: building a plan
with any of them must not run a Spark job (the shell in replay.py decides what to compute).
The test counts Spark jobs with the status tracker while every transform builds its plan on a
tiny frame, and also forbids the DataFrame actions outright while it does."""

from __future__ import annotations

import inspect

import pytest
from pyspark.sql import DataFrame

from cdc_codecs.events import Op
from spark_apps import transforms as T

from .support import effect_chain as chain
from .support.lean_rows import lean_images
from .test_transforms import col, frame, row

pytestmark = pytest.mark.spark

ACTIONS = ("collect", "count", "first", "head", "take", "toPandas", "show", "foreach", "foreachPartition",
           "toLocalIterator", "isEmpty", "tail")


def _jobs(spark) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


def test_no_transform_runs_an_action(spark, monkeypatch):
    events = frame(spark, [
        row(Op.INSERT, 0, 10, None, [col("id", 1), col("v", 1)]),
        row(Op.UPDATE, 1, 11, [col("id", 1), col("v", 1)], [col("id", 1), col("v", 2)]),
        row(Op.DELETE, 2, 12, [col("id", 1), col("v", 2)]),
    ])
    from spark_apps.local_data import local_frame

    stretches = local_frame(spark, [("d", "t", [5], [9], "d", "t", None, None)],
                            "database string, table string, after array<bigint>, until array<bigint>, "
                            "final_database string, final_table string, key_aliases array<array<string>>, "
                            f"row_columns {T.ROW_COLUMNS_TYPE}")
    spark.sparkContext.setJobGroup("transforms-purity", "plans only")
    before = _jobs(spark)

    def refuse(name):
        def action(self, *args, **kwargs):
            raise AssertionError(f"a transform called DataFrame.{name}()")
        return action

    for name in ACTIONS:
        monkeypatch.setattr(DataFrame, name, refuse(name), raising=False)

    timed = T.with_timeline(T.partition_event_time(T.infer_commit_ts(events, needed=True), needed=True))
    T.with_inferred_ts(events, T.inferred_commit_ts(events, export_tso=11), broadcast=True)
    tagged = T.tag_status(timed, tables=["d.*"], cut=[12], since=None)
    T.mark_missing_tables(tagged, stretches, [("d", "t")])
    T.mark_unknown_tables(tagged, [("d", "t")], where=tagged["op"].isNotNull())
    T.tag_status(timed, tables=["d.*"], cut=[12], duplicates=T.Duplicates(T.duplicate_places(timed, tables=["d.*"])))
    # the effects by tests/support/effect_chain.py (the product's are engine_v2.tag_effects')
    effects = chain.row_effects(chain.assign_tables(tagged, None, None))
    latest = T.latest_per_key(effects)
    live = T.live_rows(latest)
    T.scd2_images(T.scd2_validity(effects))
    T.fill_previous_images(tagged)
    T.with_partition(live.withColumn("out_topic", T.topic_name("{schema}_{table}")), "index-value", 3)
    T.with_partition(live, "table", 3)
    T.with_partition(live, "ts", 3)
    T.with_partition(live, "canal", 3)
    # lean rows (issue 13 point 3): ids, lean images, keys from rebuilt images, full images again
    T.schema_entries(T.with_schema_ids(timed))
    lean = T.tag_status(lean_images(T.with_schema_ids(timed)), cut=[12])
    dictionary = T.plan_dictionary({7: (("id",), ("int",), (3,))})
    T.rebuilt_image(lean, "after", dictionary)
    for dispatcher in ("index-value", "table", "canal"):
        T.with_partition_lean(lean, dispatcher, 3, dictionary)
    T.with_image_keys(chain.assign_tables(lean, None, None), dictionary)
    T.full_images(T.live_rows(T.unpacked(T.latest_per_key(chain.row_effects(chain.assign_tables(
        T.packed(lean), None, None), dictionary)))), dictionary)
    monkeypatch.undo()
    assert _jobs(spark) == before, "a transform started a Spark job"
    # every public transform of the module was exercised above (a new one must be added here)
    exercised = {"with_timeline", "infer_commit_ts", "inferred_commit_ts", "with_inferred_ts", "tag_status",
                 "latest_per_key", "live_rows", "fill_previous_images", "with_partition", "topic_name",
                 "with_schema_ids", "schema_entries", "full_images", "duplicate_places",
                 "packed", "unpacked", "codegen_boundary", "partition_event_time", "mark_missing_tables",
                 "scd2_validity", "scd2_images", "rebuilt_image", "with_partition_lean",
                 "mark_unknown_tables", "with_image_keys"}
    public = {name for name, fn in inspect.getmembers(T, inspect.isfunction)
              if fn.__module__ == T.__name__ and not name.startswith("_")
              and "DataFrame" in str(inspect.signature(fn).return_annotation)}
    assert public <= exercised, f"transforms not covered by the purity test: {sorted(public - exercised)}"

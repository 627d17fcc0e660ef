"""The last change per key and the SCD2 versions step by step, as engine v1's output stage
computed them before v1 was removed (twenty-fifth session): `assign_tables` (each applied row
event's table at the cut), `row_effects` (its keyed effects), then `transforms.latest_per_key`
or `scd2_versions`. The product runs the same steps fused in one map stage
(`spark_apps.engine_v2.tag_effects`), and tests/test_engine_v2.py compares its effects and last
changes with this chain's; tests/test_transforms.py checks each step by hand. Moved here from
spark_apps/transforms.py in the twenty-seventh session: the product no longer called them.

Unlike tests/reference.py this is not independent of the product: it is built from
spark_apps.transforms' expressions (the table match, the keys, the order), and checks how
engine v2 combines them, not the expressions themselves. `shuffle_exchanges` reads a plan."""

from __future__ import annotations

import re

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_codecs.events import Op
from spark_apps import transforms as T


def assign_tables(rows: DataFrame, intervals: DataFrame | None, known) -> DataFrame:
    """Map each row event to the live table it belongs to at the cut (`final_database`,
    `final_table`, and that table's `key_aliases` and `row_columns`), leaving out events of
    dropped or truncated incarnations (`transforms.mark_missing_tables` quarantined those
    before). `intervals` (ddl.TableInterval rows) and `known` (database, table names any DDL
    mentioned, lower case: a DataFrame or pairs) as outputs.table_frames gives them; None: no
    DDL named a table, every row keeps its own names."""
    if intervals is None:
        return rows.withColumns({"final_database": F.col("database"), "final_table": F.col("table"),
                                 "key_aliases": F.lit(None).cast("array<array<string>>"),
                                 "row_columns": F.lit(None).cast(T.ROW_COLUMNS_TYPE)})
    flagged = T._match_tables(rows, intervals, known)
    kept = flagged.where(F.col("_final_tb").isNotNull() | F.col("_known").isNull())
    return (
        kept.withColumns({"final_database": F.coalesce(F.col("_final_db"), F.col("database")),
                          "final_table": F.coalesce(F.col("_final_tb"), F.col("table"))})
        .drop("_db", "_tb", "_final_db", "_final_tb", "_known")
    )


def row_effects(rows: DataFrame, dictionary: T.SchemaDictionary | None = None) -> DataFrame:
    """One row per (key, effect) of each row event: INSERT/UPDATE upsert the after-image's key;
    DELETE deletes the before-image's key; an UPDATE that changes the key also deletes the
    old key. Columns: the event's plus `row_key`, `effect`, `copy_change` (a table without a
    key), `rank`. Lean rows (`lean_images`) stay lean: the keys are read from images rebuilt
    in the expression (`dictionary`)."""
    lean = "after_values" in rows.columns
    if lean:  # the keys by position from the dictionary's names; computed once per row
        rows = T.with_image_keys(rows, dictionary)
        before_key, after_key = F.col("_before_key"), F.col("_after_key")
    else:
        before_key, after_key = [T.row_key(image, schema_keys=True) for image in T.IMAGES]

    def effect(key, name, copies):
        return F.struct(key.alias("row_key"), F.lit(name).alias("effect"), F.lit(copies).alias("copies"))

    effects = F.when(
        F.col("op") == Op.DELETE, F.array(effect(before_key, "delete", T.COPY_REMOVED))
    ).when(
        (F.col("op") == Op.UPDATE) & F.col("before_schema" if lean else "before").isNotNull()
        & (before_key != after_key),
        F.array(effect(before_key, "delete", T.COPY_REMOVED), effect(after_key, "upsert", T.COPY_ADDED)),
    ).when(
        F.col("op") == Op.INSERT, F.array(effect(after_key, "upsert", T.COPY_ADDED))
    ).otherwise(F.array(effect(after_key, "upsert", T.COPY_KEPT)))
    exploded = rows.withColumn("_effect", F.explode(effects))
    no_keys = F.array().cast("array<string>")
    keyless = F.when(F.col("key_aliases").isNull(), F.size(F.coalesce(F.col("key_columns"), no_keys)) == 0
                     ).otherwise(F.size("key_aliases") == 0)
    return (
        exploded.withColumns({
            "row_key": F.col("_effect.row_key"), "effect": F.col("_effect.effect"),
            # a table without a key is a multiset: how the change moves the count of identical rows
            "copy_change": F.when(keyless, F.col("_effect.copies"))})
        .drop("_effect", "_before", "_after", "_before_key", "_after_key")
        .withColumn("rank", T.change_rank(F.col("effect") == "delete"))
    )


def scd2_versions(effects: DataFrame) -> DataFrame:
    """SCD type 2 of `row_effects`' rows with full images: `transforms.scd2_validity`'s window,
    then `transforms.scd2_images` (what engine v2 does with its lean rows rebuilt between the
    two, stages/engine.py `_versions`)."""
    return T.scd2_images(T.scd2_validity(effects))


def shuffle_exchanges(df: DataFrame) -> int:
    """How many shuffle exchanges Spark plans for `df` (broadcasts not counted: they ship a
    small side table, not the events)."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    return len(re.findall(r"(?<![A-Za-z])Exchange (?:hashpartitioning|rangepartitioning|RoundRobinPartitioning|"
                          r"SinglePartition)", plan))

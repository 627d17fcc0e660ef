"""Lean rows from decoded ones as Spark expressions: `lean_images`, which the tests use to build
the lean frames the replay's decode tasks produce themselves (spark_apps/lean_decode.py makes
rows lean in Arrow, measured cheaper). Moved here from spark_apps/transforms.py in the
twenty-eighth session: the product no longer called it. With `transforms.with_schema_ids` and
`schema_entries` (which bench/ still runs) it is the Spark-expression form
tests/test_transforms.py checks the lean rows with; not independent of the product."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_apps.transforms import IMAGES


def lean_images(df: DataFrame) -> DataFrame:
    """Each image becomes its schema id (`transforms.with_schema_ids`, already added),
    `<image>_values` (array<binary>) and `<image>_labels` (array<string>, null when no column
    has a label); column names, types and flags stay in the dictionary."""
    for image in IMAGES:
        img = F.col(image)
        labels = img["label"]
        df = (df.withColumn(f"{image}_values", img["value"])
              .withColumn(f"{image}_labels", F.when(F.size(F.array_compact(labels)) > 0, labels)))
    return df.drop(*IMAGES)

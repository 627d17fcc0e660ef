"""Spark's Python worker daemon (`spark.python.daemon.module`, set for local masters by
replay.build_session), with the heavy pure-Python modules imported once before it forks.

Spark starts one daemon per executor; the daemon forks a Python worker per task slot, and each
worker imported `pyspark.worker` and our decode path again (about 1.3 CPU s each: pyspark.sql,
sqlglot's MySQL dialect, protobuf, fastavro). Imported here, the forked workers inherit them.
Nothing that starts threads at import may come before the fork (pyspark's own rule): pyarrow
(its thread pools), numpy (OpenBLAS threads), so not `cdc_codecs` either (it imports both);
tests/test_spark_passes.py checks that this daemon holds none of them.
"""

from __future__ import annotations

import importlib

# no pyarrow, numpy, pandas, cdc_codecs, spark_apps.archive_io: they start threads or import what does
PRELOADED = ("pyspark.worker", "sqlglot.dialects.mysql", "sqlglot.tokens", "orjson", "fastavro",
             "google.protobuf.descriptor_pool", "google.protobuf.message")


def preload() -> list[str]:
    """Import PRELOADED; returns those missing (a cluster image may lack one: workers then
    import what they need themselves, as with Spark's own daemon)."""
    missing = []
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


if __name__ == "__main__":
    import gc

    from spark_apps.pyspark_path import prefer_installed

    prefer_installed()  # pyspark from the installed package: its bytecode is cached there
    preload()
    gc.freeze()  # the imported objects stay in pages the forked workers share with the daemon
    from pyspark import daemon

    daemon.manager()

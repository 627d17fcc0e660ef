"""Spark packages (Maven artifacts) the apps load at submit time, and how Spark resolves them.

Spark's own connectors (spark-avro, spark-sql-kafka) are not in pyspark's jars; they come from
Maven Central through Spark's Ivy resolver (`spark.jars.packages`). Two facts of this platform
shape the choices here (docs/development.md has the measurements):

* Maven Central holds Spark's modules up to 4.2.0 while the pinned pyspark is 4.3.0: the
  connectors are taken at 4.2.0, the newest release of the same major line (a test round-trips
  a record through spark-avro on the 4.3.0 runtime). spark-protobuf is not on Maven Central
  here at any version.
* Resolution uses `conf/ivysettings.xml` (local Maven repository, then Maven Central, as mvn
  does here) and caches jars in one folder per user (`CDC_REPLAY_IVY_CACHE`, default
  `~/.cache/cdc-replay/ivy`): a second run downloads nothing, and no jar enters the repository.
"""

from __future__ import annotations

import os

SPARK_CONNECTORS_VERSION = "4.2.0"  # newest Spark module release on Maven Central (see above)
SCALA = "2.13"

PACKAGES = {
    "avro": f"org.apache.spark:spark-avro_{SCALA}:{SPARK_CONNECTORS_VERSION}",
    "kafka": f"org.apache.spark:spark-sql-kafka-0-10_{SCALA}:{SPARK_CONNECTORS_VERSION}",
    "hadoop-aws": "org.apache.hadoop:hadoop-aws:3.5.0",  # matches pyspark's hadoop-client 3.5.0
    "delta": f"io.delta:delta-spark_{SCALA}:4.4.0",  # built against Spark 4.2.0
    "iceberg": f"org.apache.iceberg:iceberg-spark-runtime-4.1_{SCALA}:1.12.0",
}

IVY_SETTINGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conf", "ivysettings.xml")


def ivy_cache() -> str:
    return os.environ.get("CDC_REPLAY_IVY_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "cdc-replay", "ivy")


def coordinates(names: list[str]) -> list[str]:
    unknown = [n for n in names if n not in PACKAGES]
    if unknown:
        raise ValueError(f"unknown Spark package(s) {', '.join(unknown)}; known: {', '.join(sorted(PACKAGES))}")
    return [PACKAGES[n] for n in names]


def spark_conf(names: list[str]) -> dict[str, str]:
    """The Spark settings that load the named packages (empty for no names): give them to a
    SparkSession builder or to spark-submit as --conf."""
    if not names:
        return {}
    return {
        "spark.jars.packages": ",".join(coordinates(names)),
        "spark.jars.ivySettings": IVY_SETTINGS,
        "spark.jars.ivy": ivy_cache(),
    }

"""Spark packages from Maven Central load at submit time: spark-submit, with the settings of
spark_apps.packages (our Ivy settings, the per-user jar cache), runs a local-mode app that
round-trips a record through spark-avro's to_avro/from_avro. The first run downloads the jar;
later runs find it in the cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from spark_apps import launch, packages

pytestmark = pytest.mark.spark

APP = '''
import json, sys
from pyspark.sql import SparkSession, functions as F
from pyspark.sql.avro.functions import from_avro, to_avro

spark = SparkSession.builder.getOrCreate()
schema = json.dumps({"type": "record", "name": "row", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]},
    {"name": "payload", "type": ["null", "bytes"]}]})
rows = [(1, "a", bytearray(b"\\x00\\xff")), (2, None, None)]
df = spark.createDataFrame(rows, "id long, name string, payload binary")
encoded = df.select(to_avro(F.struct("id", "name", "payload"), schema).alias("value"))
back = encoded.select(from_avro("value", schema).alias("r")).select("r.*").orderBy("id").collect()
print("RESULT " + json.dumps({"spark": spark.version, "rows": [[r.id, r.name, r.payload.hex() if r.payload else None]
                                                              for r in back],
                              "avro_bytes": [len(r.value) for r in encoded.collect()]}))
spark.stop()
'''


def test_spark_avro_package_round_trips_a_record(tmp_path):
    app = tmp_path / "avro_round_trip.py"
    app.write_text(APP)
    conf = {**packages.spark_conf(["avro"]), "spark.ui.enabled": "false"}
    command = launch.spark_submit_command([], master="local[1]", app=str(app), conf=conf)
    # our app takes no arguments: drop the `--master X` spark_submit_command appends for the replay app
    command = command[: command.index(str(app)) + 1]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    out = json.loads(lines[0][len("RESULT "):])
    assert out["rows"] == [[1, "a", "00ff"], [2, None, None]]
    assert all(n > 0 for n in out["avro_bytes"])
    assert os.path.isdir(os.path.join(packages.ivy_cache(), "jars"))
    jars = os.listdir(os.path.join(packages.ivy_cache(), "jars"))
    assert any(j.startswith("org.apache.spark_spark-avro_2.13-") for j in jars), jars


def test_unknown_package_is_refused():
    with pytest.raises(ValueError, match="unknown Spark package"):
        packages.spark_conf(["no-such"])
    assert packages.spark_conf([]) == {}

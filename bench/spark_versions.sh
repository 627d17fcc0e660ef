#!/usr/bin/env bash
# The Spark app on other Spark versions than the lock's: for each pyspark version given (default
# 3.5.7 and 4.0.1), an environment under ${CDC_REPLAY_SPARK_VENVS:-/tmp/cdc-replay-spark-venvs}
# with that pyspark, the project (editable, from this clone) and its runtime dependencies at the
# lock's versions, then tests/test_spark_versions.py with it: a
# snapshot and a Delta table replayed on that Spark, checked against tests/reference.py.
#
#     bench/spark_versions.sh 3.5.7          # needs .venv (scripts/bootstrap) and network for the wheels
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
root=${CDC_REPLAY_SPARK_VENVS:-/tmp/cdc-replay-spark-venvs}
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.5.7 4.0.1)
uv=.venv/bin/uv
status=0
for version in "${versions[@]}"; do
    venv="$root/pyspark-$version"
    if [ ! -x "$venv/bin/cdc-replay" ]; then
        echo "[spark-versions] making $venv"
        "$PYTHON" -m venv "$venv"
        # the lock's versions of everything but pyspark
        constraints=$(mktemp)
        grep -vE '^pyspark==' requirements.lock > "$constraints"
        "$uv" pip install --python "$venv/bin/python" --quiet -c "$constraints" --override overrides.txt \
            "pyspark==$version" -e .
        rm -f "$constraints"
        rm -rf cdc_replay.egg-info  # the editable build's metadata: the venvs have their own
    fi
    echo "[spark-versions] pyspark $version: tests/test_spark_versions.py"
    if ! CDC_REPLAY_PYSPARK_PYTHON="$venv/bin/python" CDC_REPLAY_PYSPARK_VERSION="$version" \
            .venv/bin/python -m pytest -p no:cacheprovider -q tests/test_spark_versions.py; then
        status=1
    fi
done
exit $status

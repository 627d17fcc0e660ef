"""The install is what the lock says: pyspark 4.3.0 intact (pyspark-client kept out) and
the codec package does not shadow the standard library's `codecs`."""

import codecs
import importlib.metadata

import pytest


def test_pyspark_python_version_equals_the_jvm_spark_version(spark):
    import pyspark

    assert pyspark.__version__ == "4.3.0"
    assert spark.version == pyspark.__version__


def test_pyspark_client_is_not_installed():
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("pyspark-client")


def test_codec_package_does_not_shadow_the_standard_library():
    import cdc_codecs

    assert codecs.lookup("utf-8").name == "utf-8"
    assert codecs.__file__.endswith("codecs.py") and "site-packages" not in codecs.__file__
    assert cdc_codecs.__file__.endswith("codecs/__init__.py")


def test_python_udfs_run_on_the_venv_python(spark):
    """mapInArrow runs in Python workers: the failure mode of a broken pyspark install."""
    import pyarrow as pa

    def double(batches):
        for batch in batches:
            yield pa.RecordBatch.from_arrays([pa.compute.multiply(batch.column(0), 2)], ["id"])

    assert [r.id for r in spark.range(3).mapInArrow(double, "id long").collect()] == [0, 2, 4]

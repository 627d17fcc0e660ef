"""The install is what the lock says: pyspark 4.3.0 intact (pyspark-client kept out) and
the codec package does not shadow the standard library's `codecs`."""

import codecs
import importlib.metadata
import pathlib

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


def test_codecs_import_nothing_of_the_app():
    """cdc_codecs depends on nothing of ours (nor on Spark or Airflow): importing every module
    of it, in a fresh interpreter, loads none of them."""
    import subprocess
    import sys

    code = (
        "import pkgutil, importlib, sys, cdc_codecs\n"
        "for m in pkgutil.walk_packages(cdc_codecs.__path__, 'cdc_codecs.'): importlib.import_module(m.name)\n"
        "print(sorted({n.split('.')[0] for n in sys.modules} & {'spark_apps', 'cdc_replay_airflow', 'pyspark', 'airflow'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_pyproject_ranges_hold_what_the_lock_pins():
    """pyproject.toml declares ranges (so the package installs into an existing Spark or Airflow
    environment and keeps its pyspark / Airflow); every one of them admits the version
    requirements.lock installs, the set the tests run against, and the dev extra pins it exactly."""
    import re
    import tomllib

    from packaging.requirements import Requirement

    root = pathlib.Path(__file__).parent.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    lock = dict(re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", (root / "requirements.lock").read_text(), re.M))
    lock = {name.lower(): version for name, version in lock.items()}
    extras = project["optional-dependencies"]
    for dep in [*project["dependencies"], *(d for name, deps in extras.items() for d in deps)]:
        req = Requirement(dep)
        assert req.specifier.contains(lock[req.name.lower()]), f"{dep}: the lock has {lock[req.name.lower()]}"
    for dep in extras["dev"]:
        assert str(Requirement(dep).specifier).startswith("=="), f"{dep}: the dev extra pins the lock's version"
    for dep in [*project["dependencies"], *extras["airflow"]]:
        req = Requirement(dep)
        assert "<" in str(req.specifier) and ">=" in str(req.specifier), f"{dep}: a range, lower and upper bound"
    pyspark = next(Requirement(d) for d in project["dependencies"] if d.startswith("pyspark"))
    assert pyspark.specifier.contains("3.5.7") and pyspark.specifier.contains("4.0.1")

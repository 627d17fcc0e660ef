"""Import pyspark and py4j from the installed packages, not from the zips Spark puts first on
sys.path (docs/engine.md "Small runs").

spark-submit (the driver) and Spark's Python worker factory (daemons and workers) put
$SPARK_HOME/python/lib/pyspark.zip and py4j-<version>-src.zip in front of PYTHONPATH. Python
cannot cache the compiled bytecode of a module imported from a zip, so every one of those
processes compiled pyspark's modules from source again: about 0.4 CPU s per process for
pyspark.sql and pyspark.worker, against 0.1 s from a folder with its bytecode cache. With pyspark
installed by pip, SPARK_HOME is the installed package itself and the zips hold the same files
(each module the pip package ships is identical): the installed modules are the same code.

No module here imports anything beyond the standard library; call `prefer_installed()` before
the first `import pyspark`.
"""

from __future__ import annotations

import os
import re
import sys

_PY4J_ZIP = re.compile(r"py4j-(?P<version>[0-9][^-]*)-src\.zip$")


def _installed_py4j_version(folder: str) -> str | None:
    try:
        with open(os.path.join(folder, "py4j", "version.py"), encoding="utf-8") as f:
            found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read())
    except OSError:
        return None
    return found.group(1) if found else None


def redundant_zips(path: list[str]) -> list[str]:
    """The entries of `path` that are the pyspark.zip / py4j zip inside an installed pyspark
    package whose folder (and, for py4j, the same py4j version) is also on `path`."""
    folders = {os.path.realpath(p) for p in path if p and not p.endswith(".zip")}
    drop = []
    for entry in path:
        if not entry.endswith(".zip"):
            continue
        real = os.path.realpath(entry)
        lib = os.path.dirname(real)  # <site-packages>/pyspark/python/lib
        package = os.path.dirname(os.path.dirname(lib))
        site = os.path.dirname(package)
        if (os.path.basename(package) != "pyspark" or os.path.basename(os.path.dirname(lib)) != "python"
                or site not in folders or not os.path.isfile(os.path.join(package, "__init__.py"))):
            continue
        if os.path.basename(real) == "pyspark.zip":
            drop.append(entry)
        elif (m := _PY4J_ZIP.search(os.path.basename(real))) and _installed_py4j_version(site) == m["version"]:
            drop.append(entry)
    return drop


def prefer_installed(path: list[str] | None = None) -> list[str]:
    """Drop the redundant zips from sys.path (or `path`) unless pyspark is imported already;
    returns what was dropped."""
    path = sys.path if path is None else path
    if "pyspark" in sys.modules or "py4j" in sys.modules:
        return []
    dropped = redundant_zips(path)
    for entry in dropped:
        path.remove(entry)
    return dropped

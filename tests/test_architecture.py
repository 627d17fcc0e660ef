"""The import rules of docs/architecture.md, read from the source with `ast` (no import runs):
imports go one way, dags → plugins → spark_apps → codecs, and no module imports one that
imports it back. Cycles that still exist through imports inside functions are listed here by
name and may only go away (issue 29): a new one fails, and a listed one that is gone must be
struck from the list, so the list never hides anything."""

from __future__ import annotations

import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = {"cdc_codecs": ROOT / "codecs", "spark_apps": ROOT / "spark_apps",
            "cdc_replay_airflow": ROOT / "plugins" / "cdc_replay_airflow"}

# Cycles closed by imports inside functions: none remain (issue 29 untied the last two); a new one fails.
KNOWN_CYCLES: set[frozenset] = set()


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def _imports(module: str, path: pathlib.Path) -> list[tuple[str, bool]]:
    """(imported name, at module level?) for every import statement of one file. A `from . import
    x` names the submodule x, not the package (the package is only the way to reach it)."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            subs = [f"{base}.{alias.name}" for alias in node.names]
            names = [s for s in subs if s in MODULES] or [base]
        else:
            continue
        found.extend((name, id(node) in top) for name in names)
    return found


def _graph(module_level_only: bool) -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        targets = set()
        for name, at_top in _imports(module, path):
            if module_level_only and not at_top:
                continue
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    index, low, stack, on_stack, found = {}, {}, [], set(), set()

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def _third_party(module: str) -> set[str]:
    return {name.split(".")[0] for name, _ in _imports(module, MODULES[module])}


def test_codecs_import_nothing_of_ours_and_no_engine():
    for module in (m for m in MODULES if m.startswith("cdc_codecs")):
        imported = _third_party(module)
        assert not imported & {"spark_apps", "cdc_replay_airflow", "pyspark", "airflow", "py4j"}, module


def test_the_spark_apps_never_import_airflow_or_the_plugin():
    for module in (m for m in MODULES if m.startswith("spark_apps")):
        assert not _third_party(module) & {"cdc_replay_airflow", "airflow"}, module


def test_dags_reach_our_code_through_the_plugin_only():
    for path in (ROOT / "dags").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module.split(".")[0] not in {"spark_apps", "cdc_codecs"}, (path.name, node.module)


def test_the_outputs_import_neither_the_driver_nor_the_readers():
    """spark_apps.outputs writes what the plan hands it: nothing of the replay driver, nothing of
    the layouts that read archives (what both sides share lives in a neutral module)."""
    outputs = [m for m in MODULES if m.startswith("spark_apps.outputs")]
    assert "spark_apps.outputs.base" in outputs
    for module in outputs:
        for name, _ in _imports(module, MODULES[module]):
            assert name != "spark_apps.replay" and not name.startswith("spark_apps.layouts"), (module, name)


def test_the_stages_never_import_the_driver():
    """spark_apps/stages/ are run by spark_apps/replay.py over one run context; a stage that
    reached back into the driver would close a cycle through it."""
    stages = [m for m in MODULES if m.startswith("spark_apps.stages")]
    assert stages
    for module in stages:
        assert "spark_apps.replay" not in {name for name, _ in _imports(module, MODULES[module])}, module


def test_no_import_cycle_at_module_level():
    assert _cycles(_graph(module_level_only=True)) == set()


def test_cycles_through_imports_inside_functions_only_go_away():
    cycles = _cycles(_graph(module_level_only=False))
    assert not cycles - KNOWN_CYCLES, f"a new import cycle: {sorted(map(sorted, cycles - KNOWN_CYCLES))}"
    assert not KNOWN_CYCLES - cycles, f"untied, strike it from KNOWN_CYCLES: {sorted(map(sorted, KNOWN_CYCLES - cycles))}"


def test_every_package_is_in_the_distribution():
    """A package folder missing from pyproject's list installs nowhere but in an editable clone
    (a wheel, or `pip install` into an existing Airflow, would lack it)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = set()
    for name, folder in PACKAGES.items():
        for init in folder.rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                parts = init.parent.relative_to(folder).parts
                on_disk.add(".".join((name, *parts)))
    assert on_disk - listed == set(), f"add to pyproject.toml [tool.setuptools] packages: {sorted(on_disk - listed)}"


MAX_PARAMETERS = 6


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The names a call fills (positional and keyword-only), without the `self`/`cls` a method
    is bound to; a `*values` of logging-style arguments and `**kwargs` passed on unread are not counted."""
    a = node.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return names[1:] if names and names[0] in ("self", "cls") else names


def test_no_function_of_the_replay_takes_more_than_six_parameters():
    """Issue 29: the driver, the stages, the outputs and the manifest's builder pass small named
    values (RunContext, the stage results, TargetSpec, the manifest's facts), not long lists."""
    folder = ROOT / "spark_apps"
    paths = [folder / "replay.py", *sorted((folder / "stages").rglob("*.py")),
             *sorted((folder / "outputs").rglob("*.py"))]
    too_long = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if len(_parameters(node)) > MAX_PARAMETERS:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}{tuple(_parameters(node))}")
    # what the stages call outside these folders: the manifest's builder, the Kafka source, the statuses
    for name, function in (("manifest.py", "build"), ("kafka_io.py", "read_decoded"), ("transforms.py", "tag_status")):
        tree = ast.parse((folder / name).read_text())
        node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
        if len(_parameters(node)) > MAX_PARAMETERS:
            too_long.append(f"spark_apps/{name}:{node.lineno} {function}{tuple(_parameters(node))}")
    assert not too_long, ("more than six parameters (group what travels together in a dataclass):\n"
                          + "\n".join(too_long))

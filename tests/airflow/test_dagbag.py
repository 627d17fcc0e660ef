"""DAG files: they import without errors, follow the policies (dag_id = file stem, doc, tags,
retries >= 2), parse in under a second without importing Spark or other heavy modules, and the
backfill form refuses bad values naming the field."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAGS = os.path.join(REPO, "dags")
PLUGINS = os.path.join(REPO, "plugins")
DAG_FILES = sorted(f for f in os.listdir(DAGS) if f.endswith(".py"))
HEAVY = ("pyspark", "cdc_codecs", "sqlglot", "pandas", "pyarrow", "fastavro", "boto3", "spark_apps.replay")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=DAGS)


def test_the_dags_exist():
    assert DAG_FILES == ["cdc_replay_backfill.py", "cdc_replay_manual.py", "cdc_replay_scheduled.py"]


@pytest.mark.parametrize("filename", DAG_FILES)
def test_dag_file_imports_and_follows_the_policies(dagbag, filename):
    path = os.path.join(DAGS, filename)
    assert not {k: v for k, v in dagbag.import_errors.items() if k == path}
    dags = [d for d in dagbag.dags.values() if d.fileloc == path]
    assert [d.dag_id for d in dags] == [filename[:-3]]  # one DAG per file, dag_id = file stem
    dag = dags[0]
    assert dag.tags and "cdc-replay" in dag.tags
    assert dag.doc_md and len(dag.doc_md) > 200
    for task in dag.tasks:
        assert task.retries >= 2, f"{task.task_id} has {task.retries} retries"


PARSE = r"""
import json, os, sys, time
from airflow.dag_processing.dagbag import DagBag  # Airflow itself is not what is measured
before = set(sys.modules)
start = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1])
elapsed = time.perf_counter() - start
heavy = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in sys.argv[2].split(",") or m in sys.argv[2].split(","))
print(json.dumps({"seconds": elapsed, "errors": {k: str(v) for k, v in bag.import_errors.items()},
                  "dags": list(bag.dag_ids), "heavy": heavy}))
"""


@pytest.mark.parametrize("filename", DAG_FILES)
def test_dag_file_parses_fast_without_spark(filename, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_FOLDER": DAGS, "AIRFLOW__CORE__PLUGINS_FOLDER": PLUGINS})
    result = subprocess.run([sys.executable, "-c", PARSE, os.path.join(DAGS, filename), ",".join(HEAVY)],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["errors"] == {} and report["dags"] == [filename[:-3]]
    # what makes parsing slow is importing Spark, the codecs or sqlglot: that is asserted; the
    # time itself is only reported (a timed assertion fails on a loaded machine, proving nothing)
    assert report["heavy"] == [], f"parsing imported {report['heavy']}"
    print(f"{filename} parsed in {report['seconds']:.2f} s")


@pytest.mark.parametrize("conf, field", [
    ({"protocol": "canal-jsn"}, "protocol"),
    ({"source": "ftp://x"}, "source"),
    ({"tables": ["a.b.c"]}, "tables"),
    ({"emit": "all"}, "emit"),
    ({"max_bad_records": -1}, "max_bad_records"),
    ({"as_of": 1.5}, "as_of"),
    ({"target_protocol": "json"}, "target_protocol"),
])
def test_the_form_refuses_bad_values_naming_the_field(dagbag, conf, field):
    from airflow.sdk.exceptions import ParamValidationError

    params = copy.deepcopy(dagbag.dags["cdc_replay_manual"].params)
    with pytest.raises(ParamValidationError, match=f"Invalid input for param {field}:"):
        params.update(conf)  # each value is validated against its schema as it is set
        params.validate()


def test_the_form_defaults_are_valid_and_typed(dagbag):
    dag = dagbag.dags["cdc_replay_manual"]
    values = dag.params.validate()
    assert values["protocol"] == "canal-json" and values["emit"] == "snapshot"
    schema = {k: dag.params.get_param(k).schema for k in dag.params}
    for name, param_schema in schema.items():
        assert param_schema.get("type") or param_schema.get("anyOf"), f"{name} has no type"
        assert param_schema.get("title") and param_schema.get("section"), name
    assert schema["emit"]["enum"] and schema["protocol"]["enum"]
    assert "since" in schema and "until" in schema


# What Airflow 3's trigger form does with a param's schema (airflow/ui, the flexible form):
# a field is marked required when it has a `type` that does not include "null"; a `type` list
# with more than one non-null type (and no enum) becomes a multi-line JSON editor; an enum's
# null choice is labelled by `values_display["null"]`, else shown as the literal "null".
def _marked_required(schema: dict) -> bool:
    kind = schema.get("type")
    return bool(kind) and (not isinstance(kind, list) or "null" not in kind)


def _multi_line_editor(schema: dict) -> bool:
    kind = schema.get("type")
    return isinstance(kind, list) and len([t for t in kind if t != "null"]) > 1 and "enum" not in schema


REQUIRED = {"source", "protocol", "output", "emit", "layout"}  # the output's Kafka fields have defaults: optional


def test_the_form_has_no_null_labels_one_line_commit_ts_and_optional_fields_unmarked(dagbag):
    dag = dagbag.dags["cdc_replay_manual"]
    schema = {k: dag.params.get_param(k).schema for k in dag.params}
    for name, param_schema in schema.items():
        if None in (param_schema.get("enum") or ()):
            assert (param_schema.get("values_display") or {}).get("null"), f"{name} shows a literal null"
        assert not _multi_line_editor(param_schema), f"{name} is drawn as a multi-line JSON editor"
        assert _marked_required(param_schema) == (name in REQUIRED), f"{name}: required mark is wrong"
    for name in ("as_of", "since", "until"):
        assert "TSO or ISO time" in schema[name]["title"]
    params = copy.deepcopy(dag.params)  # the form's text, an API integer and empty all pass
    for value in ("463268123941142528", 463268123941142528, "2026-01-01T00:00:30Z", None, ""):
        params.update({"as_of": value})
        assert params.validate()["as_of"] == value


def test_the_form_asks_layout_and_protocol_before_kafka_only_fields(dagbag):
    """Issue 31 point 6: source, layout, protocol and its options come first; the fields only a
    kafka:// source or output reads are in their own section, after the output's."""
    dag = dagbag.dags["cdc_replay_manual"]
    names = list(dag.params)
    assert names[:4] == ["source", "layout", "protocol", "protocol_options"], names
    kafka = ["kafka_connection", "starting_offsets", "ending_offsets"]
    assert names[-3:] == kafka, names
    sections = [dag.params.get_param(n).schema["section"] for n in names]
    assert {sections[names.index(n)] for n in kafka} == {"Kafka (kafka:// source or output only)"}
    assert sections.index("Kafka (kafka:// source or output only)") > sections.index("Output")
    values = dag.params.validate()
    values.update({"dispatcher": None, "target_topic": None})  # left empty for a Delta snapshot
    from cdc_replay_airflow.request import parse_request

    request = parse_request({**values, "target_format": "delta"})
    assert (request.dispatcher, request.target_topic) == ("index-value", "{topic}")


def test_the_deprecated_backfill_id_is_the_same_dag(dagbag):
    manual, alias = dagbag.dags["cdc_replay_manual"], dagbag.dags["cdc_replay_backfill"]
    assert "deprecated" in alias.tags and "cdc_replay_manual" in alias.doc_md
    assert [t.task_id for t in alias.tasks] == [t.task_id for t in manual.tasks]
    assert set(alias.params) == set(manual.params)


PLUGINS_CHECK = r"""
import json, sys
from airflow import plugins_manager
plugins, errors = plugins_manager._get_plugins()
apps, _middlewares = plugins_manager.get_fastapi_plugins()
views, _react = plugins_manager._get_ui_plugins()
stray = sorted(m for m in sys.modules if m in ("archive", "replay", "tasks", "request", "window", "metrics", "app",
                                               "render", "timeline", "progress", "__init__"))
print(json.dumps({"plugins": [p.name for p in plugins], "errors": errors, "apps": [a["url_prefix"] for a in apps],
                  "views": sorted(v["url_route"] for v in views), "stray": stray}))
"""


def test_the_plugin_registers_only_the_page(tmp_path):
    """Only cdc_replay_plugin.py is a plugin entry (.airflowignore): the hooks, operators and UI
    modules are not imported by the plugin manager as top-level modules named after their files."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__PLUGINS_FOLDER": PLUGINS})
    result = subprocess.run([sys.executable, "-c", PLUGINS_CHECK], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"plugins": ["cdc_replay"], "errors": {}, "apps": ["/cdc-replay"],
                      "views": ["cdc-replay", "cdc-replay-run"], "stray": []}


PROVIDER_CHECK = r"""
import json
from airflow import plugins_manager
from airflow.providers_manager import ProvidersManager
pm = ProvidersManager()
pm.initialize_providers_list()
pm.initialize_providers_plugins()
plugins, errors = plugins_manager._get_plugins()
provider = pm.providers.get("cdc-replay")
print(json.dumps({"provider": provider.data["name"] if provider else None,
                  "provider_plugins": sorted(p.name for p in pm.plugins if p.provider_name == "cdc-replay"),
                  "plugins": [p.name for p in plugins], "errors": errors}))
"""

USER_DAG = """
from airflow.sdk import Param
from cdc_replay_airflow.manual import manual_replay_dag

manual_replay_dag("shop_replay", doc_md="Our own replay of the shop archive, built on cdc-replay's package.",
                  tags=["cdc-replay", "shop"],
                  params={"source": Param("s3://our-archive/shop", type="string", title="Source archive",
                                          section="Source")})
"""


def test_the_installed_package_is_a_provider_with_its_plugin_and_dag_builder(tmp_path):
    """Installed with pip, without this repository's plugins folder: Airflow's providers manager
    lists cdc-replay with its plugin, the plugin loads from the entry point, and a user's own
    DAG file builds the manual replay DAG from the package."""
    empty = tmp_path / "no-plugins"
    empty.mkdir()
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "shop_replay.py").write_text(USER_DAG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and k != "PYTHONPATH"}
    env.update({"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(empty), "AIRFLOW__CORE__DAGS_FOLDER": str(dags)})
    result = subprocess.run([sys.executable, "-c", PROVIDER_CHECK], capture_output=True, text=True, env=env,
                            timeout=180, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"provider": "CDC replay", "provider_plugins": ["cdc_replay"], "plugins": ["cdc_replay"],
                      "errors": {}}
    result = subprocess.run([sys.executable, "-c", PARSE, str(dags), ",".join(HEAVY)], capture_output=True,
                            text=True, env=env, timeout=180, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed["errors"] == {} and parsed["dags"] == ["shop_replay"] and parsed["heavy"] == []


def test_the_task_logs_do_not_end_with_the_metrics_dict(dagbag):
    """validate and publish return the run's metrics (an XCom for the next task and the page);
    Airflow's `Done. Returned value was: {...}` would dump all of it into the task log."""
    for dag_id in ("cdc_replay_manual", "cdc_replay_scheduled"):
        dag = dagbag.dags[dag_id]
        for task_id in ("validate", "publish"):
            assert dag.get_task(task_id).show_return_value_in_logs is False, (dag_id, task_id)

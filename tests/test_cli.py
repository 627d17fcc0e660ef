"""The command line: documented options, early refusals, the spark-submit command, and a real
run through spark-submit (the path users and Airflow take)."""

from __future__ import annotations

import json
import os
import re

import subprocess
import sys

import pytest

from spark_apps import cli
from spark_apps.generate import generate, write_archive
from spark_apps.launch import LOG4J, REPLAY_APP, spark_submit_command

CDC_REPLAY = [sys.executable, "-m", "spark_apps.cli"]


def run_cli(*args, **kw):
    return subprocess.run([*CDC_REPLAY, *args], capture_output=True, text=True, **kw)


def test_help_documents_every_replay_option():
    out = run_cli("replay", "--help").stdout
    for option in ("--source", "--protocol", "--protocol-option", "--output", "--emit", "--target-protocol",
                   "--target-option", "--as-of", "--tables", "--target-topic", "--target-partitions",
                   "--dispatcher", "--max-bad-records", "--max-records-per-object", "--master", "--spark-conf"):
        assert option in out
    assert "snapshot" in out and "topics" in out and "AWS_ENDPOINT_URL" in out
    top = run_cli("--help").stdout
    for command in ("replay", "demo", "generate", "protocols", "summary"):
        assert command in top


def test_every_replay_option_has_a_row_in_the_docs():
    import pathlib

    from spark_apps.options import parser

    doc = (pathlib.Path(__file__).parent.parent / "docs" / "replay.md").read_text()
    table = doc[doc.index("## 10. Options"):]
    options = {o for action in parser()._actions for o in action.option_strings if o.startswith("--")} - {"--help"}
    assert options and not {o for o in options if f"`{o}" not in table}


def test_protocols_lists_options_named_as_ticdc_parameters():
    out = run_cli("protocols").stdout
    assert "canal-json:" in out and "enable-tidb-extension=bool (default False)" in out


@pytest.mark.parametrize("args, message", [
    (["--protocol", "canal-jsn"], "unknown protocol 'canal-jsn'; valid protocols: avro, canal-json, canal-protobuf"),
    (["--protocol", "canal-json", "--protocol-option", "enable-tidb-extension=yes-ish"], "expected true or false"),
    (["--protocol", "canal-json", "--protocol-option", "nonsense"], "not of the form key=value"),
    (["--protocol", "canal-json", "--tables", "a.b.c"], "not of the form db.table"),
])
def test_bad_arguments_are_refused_before_spark_starts(args, message, tmp_path):
    (tmp_path / "src").mkdir()  # output beside the source, never inside it (that is refused first)
    result = run_cli("replay", "--source", str(tmp_path / "src"), "--output", str(tmp_path / "o"), "--emit", "snapshot",
                     *args, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr


def test_spark_submit_command_is_exact():
    python = "/opt/venv/bin/python"
    assert spark_submit_command(["--source", "s3://a/b"], master="spark://m:7077", python=python,
                                py_files="/tmp/x.zip", conf={"spark.executor.memory": "8g"}) == [
        "/opt/venv/bin/spark-submit", "--master", "spark://m:7077", "--name", "cdc-replay",
        "--conf", "spark.pyspark.python=/opt/venv/bin/python",
        "--conf", "spark.pyspark.driver.python=/opt/venv/bin/python",
        "--conf", f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:{LOG4J}",
        "--conf", "spark.executor.memory=8g",
        "--py-files", "/tmp/x.zip", REPLAY_APP, "--master", "spark://m:7077", "--source", "s3://a/b",
    ]
    local = cli.replay_command(["--source", "x", "--protocol", "canal-json", "--output", "y", "--emit", "topics",
                                "--spark-conf", "spark.driver.memory=6g"])
    assert "--py-files" not in local and local[local.index("--master") + 1] == "local[*]"
    assert "spark.driver.memory=6g" in local and "spark.driver.memory=4g" not in local


def test_a_cluster_command_ships_the_compiled_decoders_after_the_users_archives(tmp_path, monkeypatch):
    """Issue 31 point 4: for a cluster master the driver's installed cdc_replay_native goes to
    the executors through spark.archives (after a packed environment the user ships, not
    instead of it), unpacked as launch.NATIVE_SHIPPED; $CDC_REPLAY_NATIVE_WHEEL ships a wheel
    built for the executors instead, or nothing ("off"); local masters ship nothing."""
    import importlib.util
    import zipfile

    from spark_apps.launch import NATIVE_ENV, NATIVE_SHIPPED

    monkeypatch.delenv(NATIVE_ENV, raising=False)
    base = ["--source", "s3://a/b", "--protocol", "canal-json", "--output", "s3://a/o", "--emit", "snapshot",
            "--master", "spark://127.0.0.1:7077"]

    def shipped(argv):
        said = []
        command = cli.replay_command(argv, say=said.append)
        conf = dict(c.split("=", 1) for flag, c in zip(command, command[1:]) if flag == "--conf")
        return conf.get("spark.archives"), said[0]

    archives, said = shipped([*base, "--spark-conf", "spark.archives=/envs/cdc-env.tar.gz#environment"])
    package = importlib.util.find_spec("cdc_replay_native").submodule_search_locations[0]
    assert said == f"compiled decoders shipped to the executors from {package}"
    environment, native = archives.split(",")
    assert environment == "/envs/cdc-env.tar.gz#environment"
    path, name = native.split("#")
    assert name == NATIVE_SHIPPED and path.endswith(".zip")
    names = zipfile.ZipFile(path).namelist()
    assert "cdc_replay_native/__init__.py" in names and any(n.endswith(".abi3.so") for n in names), names
    wheel = tmp_path / "cdc_replay_native-0.1.0-cp311-abi3-manylinux_2_28_aarch64.whl"
    with zipfile.ZipFile(wheel, "w") as w:
        w.writestr("cdc_replay_native/__init__.py", "")
    monkeypatch.setenv(NATIVE_ENV, str(wheel))
    archives, said = shipped(base)
    assert said == f"compiled decoders shipped to the executors from {wheel}"
    assert zipfile.ZipFile(archives.split("#")[0]).namelist() == ["cdc_replay_native/__init__.py"]
    monkeypatch.setenv(NATIVE_ENV, "off")
    archives, said = shipped(base)
    assert archives is None and said.startswith("compiled decoders not shipped ($CDC_REPLAY_NATIVE_WHEEL=off)")
    monkeypatch.setenv(NATIVE_ENV, str(tmp_path))
    with pytest.raises(ValueError, match="not a wheel of cdc_replay_native"):
        shipped(base)
    monkeypatch.delenv(NATIVE_ENV)
    local = cli.replay_command(base[:-2])
    assert not any(c.startswith("spark.archives=") for c in local)


def test_a_local_run_gets_a_c1_only_driver_jvm_and_a_cluster_does_not(tmp_path, monkeypatch):
    """The CLI sizes the source before spark-submit (docs/engine.md "Small runs", "The JIT of
    local runs"): every run on a local master gets -XX:TieredStopAtLevel=1 after our log4j
    option, whatever its size ($CDC_REPLAY_LOCAL_JIT=default gives the JVM's own JIT back); a
    cluster master or the user's own spark.driver.extraJavaOptions do not, and the line it
    prints says why and whether the run counts as small."""
    from spark_apps.launch import CDS_ENV, LOCAL_JIT_ENV, LOCAL_JIT_OPTIONS, SMALL_RUN_ENV, finish_class_archive

    monkeypatch.delenv(SMALL_RUN_ENV, raising=False)
    monkeypatch.delenv(LOCAL_JIT_ENV, raising=False)
    monkeypatch.setenv(CDS_ENV, str(tmp_path / "cds"))
    source = tmp_path / "archive" / "shop" / "p0"
    source.mkdir(parents=True)
    (source / "00000000000000000000.jsonl.gz").write_bytes(b"x" * 300_000)
    (source / "00000000000000000100.jsonl.gz").write_bytes(b"x" * 300_000)
    base = ["--source", str(tmp_path / "archive"), "--protocol", "canal-json", "--output", str(tmp_path / "o"),
            "--emit", "snapshot"]

    def java_options(argv):
        said = []
        command = cli.replay_command(argv, say=said.append)
        options = [c.split("=", 1)[1] for flag, c in zip(command, command[1:])
                   if flag == "--conf" and c.startswith("spark.driver.extraJavaOptions=")]
        # a cluster master: first the line saying what compiled decoders are shipped
        assert len(options) == 1 and len(said) == 1 + any(a.startswith("spark://") for a in argv), said
        return options[0], said[-1]

    options, why = java_options(base)
    # the first small run writes the class-data archive (under a temporary name until it succeeded)
    written = re.fullmatch(rf"-Dlog4j2\.configurationFile=file:{re.escape(LOG4J)} {LOCAL_JIT_OPTIONS} "
                           r"-XX:ArchiveClassesAtExit=(\S+/spark-driver-\w+\.jsa)\.\d+\.tmp -Xlog:cds=off,cds\+dynamic=off", options)
    assert written and written[1].startswith(str(tmp_path / "cds")), options
    assert "small local run (0.6 MB of source, at most $CDC_REPLAY_SMALL_RUN_MB=16)" in why
    assert f"writing the class-data archive {written[1]}" in why
    archive = options.split()[-2].split("=")[-1]
    open(archive, "wb").write(b"jsa")
    finish_class_archive(["x", f"spark.driver.extraJavaOptions={options}"], 1)  # a failed run keeps none
    assert not os.path.exists(archive) and not os.path.exists(written[1])
    open(archive, "wb").write(b"jsa")
    finish_class_archive(["x", f"spark.driver.extraJavaOptions={options}"], 0)
    assert not os.path.exists(archive) and os.path.exists(written[1])
    options, why = java_options(base)  # later small runs map it
    assert options == (f"-Dlog4j2.configurationFile=file:{LOG4J} {LOCAL_JIT_OPTIONS} -XX:SharedArchiveFile={written[1]} "
                       "-Xlog:cds=off,cds+dynamic=off")
    assert f"class-data archive {written[1]}" in why
    monkeypatch.setenv(CDS_ENV, "off")
    assert java_options(base)[0] == f"-Dlog4j2.configurationFile=file:{LOG4J} {LOCAL_JIT_OPTIONS}"
    options, why = java_options([*base, "--master", "spark://127.0.0.1:7077"])
    assert options == f"-Dlog4j2.configurationFile=file:{LOG4J}" and "is a cluster" in why
    options, why = java_options([*base, "--spark-conf", "spark.driver.extraJavaOptions=-Dmine=1"])
    assert options == "-Dmine=1" and "as --spark-conf spark.driver.extraJavaOptions gives them" in why
    kafka = ["--source", "kafka://127.0.0.1:1/t", *base[2:]]
    options, why = java_options(kafka)
    assert LOCAL_JIT_OPTIONS in options and "local run, not small (the source's size is not known before the run)" in why
    monkeypatch.setenv(SMALL_RUN_ENV, "0.5")
    options, why = java_options(base)
    assert options == f"-Dlog4j2.configurationFile=file:{LOG4J} {LOCAL_JIT_OPTIONS}"
    assert why == ("local run, not small (the source holds more than $CDC_REPLAY_SMALL_RUN_MB=0.5 MB): driver JVM "
                   "with -XX:TieredStopAtLevel=1 (C1 JIT only), generated code; no class-data archive")
    monkeypatch.setenv(LOCAL_JIT_ENV, "default")
    options, why = java_options(base)
    assert options == f"-Dlog4j2.configurationFile=file:{LOG4J}"
    assert "driver JVM with its default JIT ($CDC_REPLAY_LOCAL_JIT=default)" in why
    monkeypatch.delenv(LOCAL_JIT_ENV)
    monkeypatch.setenv(SMALL_RUN_ENV, "0")
    options, why = java_options(base)
    assert LOCAL_JIT_OPTIONS in options and "=0 turns the small-run settings off" in why
    monkeypatch.setenv(LOCAL_JIT_ENV, "c2")
    result = run_cli("replay", *base, env={**os.environ, LOCAL_JIT_ENV: "c2"}, timeout=60)
    assert result.returncode == 2 and "$CDC_REPLAY_LOCAL_JIT='c2': use c1" in result.stderr
    monkeypatch.delenv(LOCAL_JIT_ENV)
    monkeypatch.setenv(SMALL_RUN_ENV, "lots")
    result = run_cli("replay", *base, env={**os.environ, SMALL_RUN_ENV: "lots"}, timeout=60)
    assert result.returncode == 2 and "$CDC_REPLAY_SMALL_RUN_MB='lots' is not a number of MB" in result.stderr


def test_every_local_run_maps_the_class_data_archive_and_small_ones_skip_code_generation(tmp_path, monkeypatch):
    """The class-data archive is for every local run whose class path is Spark's own, the C1-only
    JIT for every local run, the interpreted expressions (launch.SMALL_RUN_SPARK_CONF) only up
    to launch.INTERPRETED_RUN_MB, and a --spark-conf of the user's replaces ours key by key."""
    from spark_apps.launch import CDS_ENV, SMALL_RUN_ENV, LOCAL_JIT_OPTIONS, SMALL_RUN_SPARK_CONF, class_archive

    monkeypatch.delenv(SMALL_RUN_ENV, raising=False)
    monkeypatch.setenv(CDS_ENV, str(tmp_path / "cds"))
    archive = class_archive()
    os.makedirs(os.path.dirname(archive))
    open(archive, "wb").write(b"jsa")  # written by an earlier run
    source = tmp_path / "archive" / "shop" / "p0"
    source.mkdir(parents=True)
    (source / "00000000000000000000.jsonl.gz").write_bytes(b"x" * 600_000)
    base = ["--source", str(tmp_path / "archive"), "--protocol", "canal-json", "--output", str(tmp_path / "o"),
            "--emit", "snapshot"]
    mapped = f"-XX:SharedArchiveFile={archive} -Xlog:cds=off,cds+dynamic=off"

    def launched(argv):
        said = []
        command = cli.replay_command(argv, say=said.append)
        conf = dict(c.split("=", 1) for flag, c in zip(command, command[1:]) if flag == "--conf")
        return conf, said[-1]  # a cluster master says first what compiled decoders are shipped

    conf, why = launched(base)
    assert conf["spark.driver.extraJavaOptions"] == f"-Dlog4j2.configurationFile=file:{LOG4J} {LOCAL_JIT_OPTIONS} {mapped}"
    assert {k: conf[k] for k in SMALL_RUN_SPARK_CONF} == SMALL_RUN_SPARK_CONF
    assert why.endswith(f"class-data archive {archive}, spark.sql.codegen.wholeStage=false, "
                        "spark.sql.codegen.factoryMode=NO_CODEGEN")
    conf, why = launched([*base, "--spark-conf", "spark.sql.codegen.wholeStage=true"])
    assert conf["spark.sql.codegen.wholeStage"] == "true" and conf["spark.sql.codegen.factoryMode"] == "NO_CODEGEN"
    assert "wholeStage" not in why
    (source / "00000000000000001000.jsonl.gz").write_bytes(b"x" * 4_000_000)  # 4.6 MB: C1, generated code
    conf, why = launched(base)
    assert LOCAL_JIT_OPTIONS in conf["spark.driver.extraJavaOptions"] and not set(SMALL_RUN_SPARK_CONF) & set(conf)
    assert why.endswith(f"class-data archive {archive}, generated code (over 4 MB)")
    monkeypatch.setenv(SMALL_RUN_ENV, "0.5")  # a large run: the archive and the C1 JIT, generated code
    conf, why = launched(base)
    assert conf["spark.driver.extraJavaOptions"] == f"-Dlog4j2.configurationFile=file:{LOG4J} {LOCAL_JIT_OPTIONS} {mapped}"
    assert not set(SMALL_RUN_SPARK_CONF) & set(conf)
    assert why == ("local run, not small (the source holds more than $CDC_REPLAY_SMALL_RUN_MB=0.5 MB): driver JVM with "
                   f"-XX:TieredStopAtLevel=1 (C1 JIT only), generated code; class-data archive {archive}")
    conf, why = launched([*base, "--spark-conf", "spark.jars=/opt/extra.jar"])  # another class path
    assert conf["spark.driver.extraJavaOptions"] == f"-Dlog4j2.configurationFile=file:{LOG4J} {LOCAL_JIT_OPTIONS}"
    assert why.endswith("; no class-data archive")
    conf, why = launched([*base, "--master", "spark://127.0.0.1:7077"])
    assert conf["spark.driver.extraJavaOptions"] == f"-Dlog4j2.configurationFile=file:{LOG4J}"
    assert not set(SMALL_RUN_SPARK_CONF) & set(conf) and "is a cluster" in why


@pytest.mark.spark
def test_replay_through_spark_submit_fails_on_quarantine_beyond_the_limit(tmp_path):
    generated = generate(transactions=30, partitions=2, seed=5, bad_values=1)
    write_archive(generated.records, str(tmp_path / "archive"))
    output = tmp_path / "out"
    result = run_cli("replay", "--source", str(tmp_path / "archive"), "--protocol", "canal-json",
                     "--protocol-option", "enable-tidb-extension=true", "--output", str(output),
                     "--emit", "snapshot", "--master", "local[1]", "--spark-ui", timeout=600)
    text = result.stdout + result.stderr
    assert result.returncode == 3, text[-3000:]
    # issue 31 point 6: the summary alone on stdout; the run's log and errors on stderr
    assert result.stdout.startswith("cdc-replay run ") and "events read" in result.stdout, result.stdout[-3000:]
    assert "INFO" not in result.stdout and "[replay " not in result.stdout, result.stdout[-3000:]
    assert "[replay " in result.stderr and "cdc-replay: error: 1 records quarantined" in result.stderr
    assert re.search(r"Spark UI at http://\S+:\d+", text), text[-3000:]
    assert "1 records quarantined (more than --max-bad-records 0)" in text
    assert str(output / "_quarantine") in text
    assert "events read" in text and "[reconciled]" in text
    assert (output / "_manifest.json").exists()  # committed, so the quarantine can be inspected
    summary = run_cli("summary", str(output))
    assert summary.returncode == 0 and "quarantined 1" in summary.stdout
    # applied counts that are not table rows are explained
    counts = json.loads((output / "_manifest.json").read_text())["counts"]
    by_kind = counts["applied_by_kind"]
    assert sum(by_kind.values()) == counts["applied"] and by_kind["ddl"] >= 2 and by_kind["watermark"] > 0
    assert f"{by_kind['row']:,} row changes + {by_kind['ddl']:,} DDL" in summary.stdout
    assert "not table rows" in summary.stdout
    # why: one reason class with its first record as a sample, in the manifest and the summary
    reasons = json.loads((output / "_manifest.json").read_text())["quarantine"]["reasons"]
    assert [(r["stage"], r["records"]) for r in reasons] == [("decode", 1)]
    assert reasons[0]["sample"]["object"].endswith(".jsonl.gz") and reasons[0]["sample"]["offset"] is not None
    assert "canal-json" in reasons[0]["reason"] and "offset" not in reasons[0]["reason"]
    assert "    1 x [decode] " in summary.stdout
    # the page's chart: events read per table and commit-time bucket, counted by the run itself
    import cdc_codecs

    codec = cdc_codecs.get_codec("canal-json", {"enable-tidb-extension": "true"})
    read = [e for r in generated.records if not r.value.startswith(b"\x00") for e in codec.decode(r)
            if e["kind"] in ("row", "ddl") and e["commit_ts"] and e["table"]]
    timeline = json.loads((output / "_manifest.json").read_text())["timeline"]
    assert timeline["buckets"] == 60 and sorted(timeline["tables"]) == ["shop.customers", "shop.orders"]
    assert sum(sum(v) for v in timeline["tables"].values()) == len(read)  # duplicates are events read too


@pytest.mark.spark
def test_no_generated_stage_of_a_replay_is_too_long_for_the_jvm_to_compile(tmp_path):
    """Every stage of a snapshot replay through spark-submit, its code generated and its
    dictionary and table names broadcast as on a large archive, stays under the JVM's
    8000-byte compile limit: Spark's log (WholeStageCodegenExec at INFO in our
    log4j2.properties) names no stage it had to run as separate operators instead. The size
    depends on the plan, not the data: a small archive shows it (docs/engine.md, "Part 5")."""
    generated = generate(transactions=300, partitions=2, seed=11)
    write_archive(generated.records, str(tmp_path / "archive"))
    env = {**os.environ, "CDC_REPLAY_SMALL_RUN_MB": "0", "CDC_REPLAY_DICTIONARY_LITERAL_MAX": "0"}
    result = run_cli("replay", "--source", str(tmp_path / "archive"), "--protocol", "canal-json",
                     "--protocol-option", "enable-tidb-extension=true", "--output", str(tmp_path / "out"),
                     "--emit", "snapshot", "--master", "local[2]", env=env, timeout=600)
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-3000:]
    assert "(a broadcast relation)" in text, text[-3000:]
    assert "Found too long generated codes" not in text, re.findall(r".*too long generated codes.*", text)


def test_summary_of_a_missing_incomplete_or_foreign_output_is_one_line(tmp_path, s3_endpoint, capsys):
    cases = {
        str(tmp_path / "nothing"): "no output at",
        str(tmp_path / "half"): "is incomplete: 1 objects but no _manifest.json",
        str(tmp_path / "foreign"): "is not a cdc-replay manifest",
        "s3://no-such-bucket-here/out": "bucket 'no-such-bucket-here' does not exist",
    }
    (tmp_path / "half" / "_staging").mkdir(parents=True)
    (tmp_path / "half" / "_staging" / "part-0.jsonl.gz").write_bytes(b"x")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "_manifest.json").write_text('{"hello": 1}')
    for output, message in cases.items():
        assert cli.main(["summary", output]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, err

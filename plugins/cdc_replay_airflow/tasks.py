"""What the DAGs' tasks do, as plain functions of their inputs and an ArchiveHook (the DAG
files wrap them in @task). Logs say what happens in words a person can follow; no secret
reaches them (the hook masks the connection's keys).

    check / plan   refuse bad fields before any work starts (RequestError names the field)
    stage          list the objects the replay will read (for a data interval: select and
                   stage them) and write the staged-objects manifest
    replay         ReplayOperator (spark-submit of spark_apps/replay.py)
    validate       reconcile the app's manifest with itself and with the staged objects;
                   fail loudly when more records were quarantined than allowed
    publish        remove the staging area, record the metrics, emit the output asset
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from typing import Any

from spark_apps import masking
from spark_apps.contract import (
    AIRFLOW_STAGING,
    LAKE_FORMATS,
    LAST_CUT,
    ManifestError,
    manifest_path,
    read_manifest_doc,
    staging_prefix,
)
from spark_apps.contract import STAGING as STAGING_DIR

from cdc_replay_airflow.metrics import (
    Incomplete,
    ValidationError,
    check_complete,
    check_manifest,
    run_metrics,
    ts_time,
)
from cdc_replay_airflow.request import _options as _option_pairs
from cdc_replay_airflow.request import (
    RequestError,
    app_args,
    ReplayRequest,
    check_codecs,
    parse_request,
    safe_run_id,
)
from cdc_replay_airflow.window import (
    ArchiveObject,
    direct_source,
    interval_output,
    is_archive_object,
    relative,
    select_window,
)
from cdc_codecs.tso import from_datetime

log = logging.getLogger("cdc_replay")

STAGING = AIRFLOW_STAGING  # below the output: the app's commit leaves _staging/ alone
STAGED_MANIFEST = "staged.json"


class Refused(ValueError):
    """A request refused before any work started."""


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def check(conf: dict) -> dict:
    """The backfill form's values -> a checked request (as a dict); raises Refused naming the field."""
    try:
        request = parse_request(conf)
        check_codecs(request)
    except RequestError as e:
        raise Refused(f"refused before any work started: {e}") from e
    log.info("Request checked: replay %s [%s%s] -> %s (%s%s)", request.source, request.protocol,
             "".join(f" {k}={masking.mask_option(k, v)}" for k, v in request.protocol_options), request.output, request.emit,
             f", tables {','.join(request.tables)}" if request.tables else "")
    return xcom_safe(request.as_dict())


OPTION_FIELDS = ("protocol_options", "target_options")


def xcom_safe(request: dict) -> dict:
    """The request (as_dict) with credentials in option values masked: what a task returns is
    an XCom, kept in Airflow's database and shown in the UI. The replay task takes the real
    values again from where the DAG run got them (`restore_secrets`)."""
    return {**request, **{f: masking.mask_options(dict(request.get(f) or {})) for f in OPTION_FIELDS}}


def restore_secrets(request: dict, given: dict | None) -> dict:
    """The request with its masked option values taken from `given` (the DAG run's params or
    the scheduled DAG's Variable: where the values came from before `xcom_safe`)."""
    restored = dict(request)
    for field in OPTION_FIELDS:
        options = dict(request.get(field) or {})
        masked = {k for k, v in options.items() if isinstance(v, str) and masking.MASK in v}
        if not masked:
            continue
        try:
            real = dict(_option_pairs(field, (given or {}).get(field)))
        except RequestError:
            real = {}
        for name in masked:
            value = real.get(name)
            if value is None or masking.mask_option(name, value) != options[name]:
                raise Refused(f"{field}: {name} holds a credential, masked in the task's XCom, and the DAG run's "
                              "request no longer holds it: trigger the run again")
            options[name] = value
        restored[field] = options
    return restored


SCHEDULE_SETTINGS = ("lateness_minutes", "require_complete")


def plan_interval(config: dict | None, start: dt.datetime, end: dt.datetime, *, first_start: dt.datetime | None = None,
                  previous: tuple[dt.datetime, dt.datetime] | None = None, exists=None) -> dict:
    """The scheduled DAG's request for the data interval [start, end).

    * Objects: those archived in [start, end + lateness) (`lateness_minutes`, default one interval:
      a change committed near the end of an interval may be archived in the next one).
    * Changes: those committed in [start, end): `--since TSO(start)-1` (exclusive) and
      `--until TSO(end)-1` (inclusive), so every change lands in exactly one interval although
      objects are read by two.
    * Output: <output>/<interval start>, replaced as a whole on a rerun.
    * emit snapshot: each interval's snapshot is the previous interval's plus this window's
      changes (`--base-snapshot`; Delta/Iceberg: merged into the tables, `--since last`); the
      first interval (start_date) starts from nothing, or from the Variable's `base_export` (a
      Dumpling export or mysqldump the archive continues).
    * `base_export` with history or topics: the first interval holds the export's rows and every
      archived change after its position (no --since); later ones need the chain (the export's
      schemas); a later lake interval is refused while the tables the export started are missing.
    * `require_complete` (default true): validate fails, and retries, while the archive's
      watermarks have not reached the interval's end."""
    if not config:
        raise Refused("refused before any work started: the Variable cdc_replay_scheduled is not set; it holds "
                      "the replay request as JSON (source, protocol, protocol_options, output, emit, ...)")
    config = dict(config)
    settings = {k: config.pop(k) for k in SCHEDULE_SETTINGS if k in config}
    for field in ("since", "until", "as_of", "base_snapshot"):
        if config.get(field) not in (None, ""):
            raise Refused(f"refused before any work started: {field}: is set from the data interval; remove it "
                          "from the Variable cdc_replay_scheduled")
    try:
        request = parse_request(config)
        check_codecs(request)
    except RequestError as e:
        raise Refused(f"refused before any work started: Variable cdc_replay_scheduled: {e}") from e
    if request.kafka_source and request.emit == "snapshot":
        raise Refused("refused before any work started: Variable cdc_replay_scheduled: emit: a kafka:// source is "
                      "replayed interval by interval as offset windows, whose changes are emitted as topics or "
                      "history (a snapshot of Kafka topics: the backfill DAG)")
    if request.kafka_source and request.ending_offsets != "latest":
        raise Refused("refused before any work started: Variable cdc_replay_scheduled: ending_offsets: is set "
                      "from the data interval; remove it (starting_offsets applies to the first interval)")
    if request.base_export and request.kafka_source:
        # a Kafka interval is an offset window whose first one is set by starting_offsets, not by a cut
        raise Refused("refused before any work started: Variable cdc_replay_scheduled: base_export: a kafka:// "
                      "source's intervals are offset windows; replay the export with the backfill DAG, then "
                      "schedule without base_export")
    lateness = settings.get("lateness_minutes")
    if lateness is not None and (isinstance(lateness, bool) or not isinstance(lateness, int) or lateness < 0):
        raise Refused("refused before any work started: Variable cdc_replay_scheduled: lateness_minutes: "
                      f"{lateness!r} is not a whole number of minutes >= 0")
    if request.kafka_source:
        return _plan_kafka_interval(request, start, end, first_start=first_start, lateness=lateness)
    late = dt.timedelta(minutes=lateness) if lateness is not None else (end - start)
    base_output = request.manifest_uri if request.kafka_output else request.output
    since = from_datetime(start) - 1
    until = from_datetime(end) - 1
    base_snapshot = schema_from = chain_missing = None
    first = first_start is not None and start <= first_start
    # Delta/Iceberg snapshots: one set of tables at the output, each interval merged into them
    # (`--since last`: from the cut their metadata holds, so an interval without objects, which
    # is skipped, loses nothing); the other outputs are one prefix per interval
    lake = request.emit == "snapshot" and request.target_format in LAKE_FORMATS
    if lake and request.base_export and first:
        since = None  # the tables are written in full from the export and the archive up to the cut
    elif lake:
        since = LAST_CUT
        if request.base_export and exists is not None and not exists(manifest_path(base_output)):
            # `--since last` over no tables would replay in full without the export's rows
            chain_missing = (f"refused before any work started: the tables at {base_output} start from base_export "
                             "in the DAG's first interval and are not there yet: replay the intervals in order "
                             "from the DAG's start")
    else:
        # the previous interval's output carries what this one starts from: its snapshot (emit
        # snapshot) or the table schemas at its end (DDL in this window needs them)
        previous_output = interval_output(base_output, previous[0]) if previous and previous[1] == start else None
        chained = bool(previous_output and exists and exists(manifest_path(previous_output)))
        if chained and request.emit == "snapshot":
            base_snapshot = previous_output
        elif chained:
            schema_from = previous_output
        elif first and (request.emit == "snapshot" or request.base_export):
            # the first interval: its objects hold the history from the archive's start, or from
            # the export's position (history and topics: its rows as INSERTs, then the archive's)
            since = None
        elif not first and not (request.schema and request.emit != "snapshot" and not request.base_export):
            chain_missing = (  # refused by stage, once it knows the interval has objects at all
                "refused before any work started: intervals are chained (each starts from the previous one's "
                f"{'snapshot' if request.emit == 'snapshot' else 'table schemas'}), and the output of the interval "
                f"ending at {start.isoformat()} "
                f"({previous_output or 'no earlier successful run ends there'}) is missing: replay the intervals in "
                "order from the DAG's start"
                + ("" if request.emit == "snapshot" else ", or give the starting schemas in the Variable's 'schema'"))
    interval_home = base_output if lake else interval_output(base_output, start)
    request = request.replace(output=request.output if request.kafka_output else interval_home, since=since,
                              until=until, manifest_uri=interval_home if request.kafka_output else None,
                              base_snapshot=base_snapshot, schema=None if base_snapshot else request.schema,
                              # an export starts the first interval; later ones start from the previous
                              # interval's snapshot, schemas or tables (which hold what the export gave)
                              base_export=request.base_export if first and since is None else None,
                              base_export_time_zone=(request.base_export_time_zone
                                                     if first and since is None else None))
    objects_window = [start.isoformat(), (end + late).isoformat()]
    log.info("Interval [%s, %s): objects archived in [%s, %s) -> %s; %s%s", start.isoformat(), end.isoformat(),
             objects_window[0], objects_window[1], request.output,
             f"changes committed in the interval (--since {since} --until {until})" if since is not None
             else f"changes up to --until {until}",
             f", on top of the snapshot {base_snapshot}" if base_snapshot else
             (f", starting from the table schemas of {schema_from}" if schema_from else ""))
    return {"request": xcom_safe(request.as_dict()), "interval": [start.isoformat(), end.isoformat()],
            "objects_window": objects_window, "output_base": base_output, "schema_from": schema_from,
            "chain_missing": chain_missing, "lake_window": lake,
            "require_complete": bool(settings.get("require_complete", True))}


# a Kafka offset window is replayed whole: the cut at the highest TSO takes every event read (the
# offsets, not commit ts, split the stream between intervals; events after the window's last
# watermark would otherwise stay pending and no later interval reads them again)
EVERY_EVENT_READ = (1 << 63) - 1


def _plan_kafka_interval(request: ReplayRequest, start: dt.datetime, end: dt.datetime, *,
                         first_start: dt.datetime | None, lateness: int | None) -> dict:
    """A kafka:// source's interval: the records of its offset window (computed by `stage`,
    kafka_window.plan_window), every event of them replayed (no commit ts window)."""
    late = dt.timedelta(minutes=lateness) if lateness is not None else (end - start)
    base_output = request.manifest_uri if request.kafka_output else request.output
    request = request.replace(output=request.output if request.kafka_output else interval_output(base_output, start),
                              manifest_uri=interval_output(base_output, start) if request.kafka_output else None,
                              since=None, until=EVERY_EVENT_READ)
    objects_window = [start.isoformat(), (end + late).isoformat()]
    log.info("Interval [%s, %s): the records of %s from where the previous interval ended up to the first record "
             "stamped at or after %s (read once %s has passed) -> %s", start.isoformat(), end.isoformat(),
             request.source, end.isoformat(), objects_window[1], request.home)
    return {"request": xcom_safe(request.as_dict()), "interval": [start.isoformat(), end.isoformat()],
            "objects_window": objects_window, "output_base": base_output, "schema_from": None,
            "chain_missing": None, "lake_window": False, "require_complete": False,
            "kafka_window": {"home": base_output, "first": first_start is not None and start <= first_start}}


def _staging(output: str) -> str:
    return f"{output.rstrip('/')}/{STAGING}"


def _items(objects: list[ArchiveObject], source: str) -> list[dict]:
    return [{"uri": o.uri, "size": o.size,
             "last_modified": o.last_modified.isoformat() if o.last_modified else None} for o in objects]


def stage(hook, request: dict, *, dag_id: str, run_id: str,
          interval: tuple[dt.datetime, dt.datetime] | None = None, schema_from: str | None = None,
          chain_missing: str | None = None, kafka_servers=None,
          lake_window: bool = False, kafka_window: dict | None = None, kafka_config=None) -> dict:
    """List the objects the replay will read and write their manifest.

    Without an interval the app reads the source as it is (nothing is copied). With one, the
    interval's objects are selected by archive time; if one folder holds exactly them the app
    reads it directly, else they are copied (server-side) below <output>/_staging/airflow/.
    Returns the plan for the replay: the app's request, its run id, and what was staged.

    An interval without archive objects still gets an output, so the chain goes on: the plan
    then says `carry` (the previous interval's output, or None for the first interval) and the
    replay task writes it with carry_forward() instead of running Spark. Raises LookupError
    when there is no archive object and no commit ts window (an installed app without
    --since/--until: nothing to carry)."""
    req = ReplayRequest.from_dict(request)
    servers = None
    if req.kafka_source or req.kafka_output:  # `kafka_servers(conn_id)`: hooks.kafka.bootstrap_servers
        if req.kafka_source and interval is not None and kafka_window is None:
            raise LookupError("a kafka:// source in a data interval needs its offset window (the scheduled DAG's plan)")
        servers = kafka_servers(req.kafka_connection)
        log.info("Kafka connection %s: bootstrap servers %s", req.kafka_connection, servers)
    staging = _staging(req.home)
    cleared = hook.delete_prefix(staging)
    if cleared:
        log.info("Removed %d objects left in %s by an earlier attempt", cleared, staging)
    window = None
    if req.kafka_source and interval is not None:  # the interval's offsets (kafka_window)
        import json

        from cdc_replay_airflow import kafka_window as kw

        config = kafka_config(req.kafka_connection) if kafka_config else {}
        topics = req.source[len("kafka://"):].split(",")
        try:
            window = kw.plan_window(hook, kafka_window["home"], *interval, first=kafka_window["first"],
                                    starting_offsets=req.starting_offsets, servers=servers, topics=topics,
                                    config=config)
        except kw.WindowError as e:
            raise Refused(str(e)) from e
        for line in kw.describe(window):
            log.info("Kafka window %s", line)
        if not any(r["records"] for r in window["partitions"]):
            raise LookupError(f"no record in the Kafka window of [{interval[0].isoformat()}, "
                              f"{interval[1].isoformat()}) (recorded: the next interval starts where it ends)")
        req = req.replace(starting_offsets=json.dumps(window["starting"], sort_keys=True),
                          ending_offsets=json.dumps(window["ending"], sort_keys=True))
        # DDL in this window applies to the tables as the previous intervals left them
        schema_from = kw.previous_output(hook, kafka_window["home"], interval[0])
    if req.kafka_source:  # read by Spark's Kafka connector: nothing to list
        app_request = req.with_kafka_servers(servers)
        if window is not None:  # the records the replay reads: its small-run settings (launch)
            records = sum(r["records"] for r in window["partitions"])
        else:
            from spark_apps.kafka_io import records_in_range

            records = records_in_range(app_request.source, req.starting_offsets, req.ending_offsets,
                                       kafka_config(req.kafka_connection) if kafka_config else {})
        staged = {"source": req.source, "read_from": app_request.source, "mode": "kafka",
                  "window": [t.isoformat() for t in interval] if interval else None,
                  "objects": 0, "bytes": 0, "records": records, "manifest": f"{staging}/{STAGED_MANIFEST}",
                  "offsets": [req.starting_offsets, req.ending_offsets],
                  "kafka_window": window["partitions"] if window else None}
        hook.write_json(staged["manifest"], {**staged, "dag_id": dag_id, "run_id": run_id, "items": [],
                                             "written_at": dt.datetime.now(dt.timezone.utc).isoformat()})
        log.info("The replay reads %s from %s to %s offsets", app_request.source, req.starting_offsets,
                 req.ending_offsets)
        if window is not None and schema_from:
            schemas = hook.read_json(f"{schema_from}/_manifest.json").get("schemas") or []
            if schemas:
                schema_uri = f"{staging}/schema.sql"
                hook.write_text(schema_uri, "".join(f"{statement};\n" for statement in schemas))
                app_request = app_request.replace(schema=schema_uri)
                log.info("Starting schemas: %d tables as the previous interval left them (%s), in %s",
                         len(schemas), schema_from, schema_uri)
        return {"request": xcom_safe(app_request.as_dict()), "original": xcom_safe(request), "staged": staged,
                "run_id": safe_run_id(dag_id, run_id)}
    log.info("Listing %s (%s)", req.source, hook.describe())
    listed = hook.list_objects(req.source)
    whole = req.layout in ("ticdc-storage", "kafka-connect-s3")  # read by the app's own layout plan
    if whole and interval is not None:
        raise LookupError(f"a data interval selects Kafka-record objects; a {req.layout} archive is replayed whole "
                          "(trigger the backfill DAG without an interval)")
    archive = listed if whole else [o for o in listed if is_archive_object(relative(o.uri, req.source))]
    log.info("Listed %s objects under %s: %s archive objects (%s), %s others skipped (_*, .*, not *.jsonl[.gz])",
             f"{len(listed):,}", req.source, f"{len(archive):,}", _mb(sum(o.size for o in archive)),
             f"{len(listed) - len(archive):,}")
    window = None
    read_from = req.source
    mode = "listed"
    chosen = archive
    if interval is not None:
        start, end = interval
        chosen, how = select_window(listed, req.source, start, end)
        window = [start.isoformat(), end.isoformat()]
        log.info("Archived in [%s, %s): %d archive objects (%s) — times from path partitions %d, from "
                 "LastModified %d; %d objects outside", window[0], window[1], len(chosen),
                 _mb(sum(o.size for o in chosen)), how["path"], how["last-modified"], how["outside"])
        if chain_missing:
            raise Refused(chain_missing)
        if not chosen and req.base_export:  # neither carried nor skipped: the export's rows would be lost
            raise Refused(f"refused before any work started: no archive object was archived in [{window[0]}, "
                          f"{window[1]}), the interval that starts from base_export {req.base_export}: the export "
                          "joins the archive that continues it; start the DAG at an interval the archive has "
                          "objects in")
        if not chosen and req.kafka_output:  # nothing to produce, and no output to carry forward
            raise LookupError(f"no archive objects archived in [{window[0]}, {window[1]}) under {req.source}")
        if not chosen and lake_window:  # the tables stay at their cut; the next interval merges from there
            raise LookupError(f"no archive objects archived in [{window[0]}, {window[1]}) under {req.source}; "
                              f"the tables at {req.output} stay at their cut")
        if not chosen and req.until is None:  # no commit ts window: nothing an interval could carry forward
            raise LookupError(f"no archive objects archived in [{window[0]}, {window[1]}) under {req.source}")
        carry_from = req.base_snapshot or schema_from
        direct = direct_source(chosen, listed, req.source)
        if not chosen:
            mode = "carried"
            log.info("No archive object was archived in [%s, %s): the replay task carries %s forward (no Spark "
                     "job), so the next interval has what it starts from", window[0], window[1],
                     f"the snapshot of {carry_from}" if req.base_snapshot else
                     (f"the table schemas of {carry_from}" if carry_from else "an empty output"))
        elif direct is not None:
            read_from, mode = direct, "direct"
            log.info("The interval's objects are exactly those under %s: the replay reads them there", direct)
        else:
            read_from, mode = f"{staging}/objects", "copied"
            pairs = [(o.uri, f"{read_from}/{relative(o.uri, req.source)}", o.size) for o in chosen]
            total_bytes = sum(o.size for o in chosen)
            reported = [-1]

            def progress(done: int, total: int, done_bytes: int) -> None:
                percent = 100 * done // total
                if percent // 10 > reported[0] or done == total:
                    reported[0] = percent // 10
                    log.info("Staged %d of %d objects (%d%%, %s of %s)", done, total, percent, _mb(done_bytes),
                             _mb(total_bytes))

            log.info("Copying the interval's %d objects to %s (server-side copies)", len(pairs), read_from)
            hook.copy_all(pairs, progress)
    elif not archive:
        raise LookupError(f"no archive objects (*.jsonl, *.jsonl.gz) under {req.source}")
    staged = {
        "source": req.source, "read_from": read_from, "mode": mode, "window": window,
        "objects": len(chosen), "bytes": sum(o.size for o in chosen),
        "manifest": f"{staging}/{STAGED_MANIFEST}",
    }
    hook.write_json(staged["manifest"], {**staged, "dag_id": dag_id, "run_id": run_id,
                                         "written_at": dt.datetime.now(dt.timezone.utc).isoformat(),
                                         "items": _items(chosen, req.source)})
    log.info("Staged %d objects (%s) for the replay; their list is in %s", staged["objects"], _mb(staged["bytes"]),
             staged["manifest"])
    app_request = req.replace(source=read_from)
    if servers is not None:
        app_request = app_request.with_kafka_servers(servers)
    if mode == "carried":
        return {"request": xcom_safe(app_request.as_dict()), "original": xcom_safe(request), "staged": staged,
                "run_id": safe_run_id(dag_id, run_id), "carry": {"from": carry_from, "objects_window": window}}
    if schema_from:
        schemas = read_manifest_doc(hook.read_json(manifest_path(schema_from))).get("schemas") or []
        if schemas:
            schema_uri = f"{staging}/schema.sql"
            hook.write_text(schema_uri, "".join(f"{statement};\n" for statement in schemas))
            app_request = app_request.replace(schema=schema_uri)
            log.info("Starting schemas: %d tables as the previous interval left them (%s), in %s", len(schemas),
                     schema_from, schema_uri)
    return {"request": xcom_safe(app_request.as_dict()), "original": xcom_safe(request), "staged": staged,
            "run_id": safe_run_id(dag_id, run_id)}


def _schema_statements(hook, uri: str | None) -> list[str]:
    """The CREATE TABLE statements a --schema source describes (as the app reads it)."""
    if not uri:
        return []
    from spark_apps import schema_files
    from spark_apps.ddl import SchemaHistory

    return SchemaHistory(schema_files.load(uri, hook.list_objects, hook.read_bytes).initial_sql()).create_statements()


def carry_forward(hook, plan: dict) -> dict:
    """The output of an interval without archive objects (stage's plan has `carry`), written
    without Spark so that the next interval finds what it starts from:

    * emit snapshot: the previous interval's snapshot, copied (server-side) — no change was
      archived in the window, so the snapshot at its end is the one at its start;
    * topics / history: no records, with the table schemas the previous interval left.

    Its manifest has the app's shape: no object read, counts of 0 that reconcile, the cut at the
    window's end (`--until`) so the next interval's `--since` matches it, the schemas, and
    `carried_from`. What the archive is known complete up to stays the previous interval's:
    no watermark was read, so with `require_complete` validate refuses to publish it (see
    metrics.check_complete). The first interval carries an empty output. It is written as the
    app writes a run: under the output's lease (spark_apps.lease; Refused while another run
    holds it), staged in `_staging/<run>/data/` and committed by the app's own
    spark_apps.manifest.commit, so a reader that follows `_manifest.json` sees the old output
    or the new, whole, at every moment, and only objects of earlier runs of ours are deleted."""
    with hook.using():  # spark_apps.storage (the lease and the commit too) through the hook's client
        return _carry(hook, plan, ReplayRequest.from_dict(plan["request"]))


def _carry(hook, plan: dict, request: ReplayRequest) -> dict:
    """carry_forward, once its storage goes through the hook's client."""
    import time

    from spark_apps import lease as lease_mod
    from spark_apps import storage

    started = time.time()
    output = storage.normalize(request.output)
    staging = staging_prefix(output, plan["run_id"])
    try:  # one run at a time per output, as the app takes it: before the output is touched
        with lease_mod.running(output, plan["run_id"], request.lease_timeout, staging):
            manifest = _carried_output(hook, plan, request, output, staging, started)
    except lease_mod.LeaseHeld as e:
        raise Refused(str(e)) from None
    out = manifest["output"]
    log.info("Committed %s: %s records (%s rows), %d table schemas, cut at the window's end %s; %s", output,
             f"{out['records']:,}", f"{out['rows']:,}", len(manifest["schemas"]), manifest["cut"]["time"],
             manifest["cut"]["warnings"][0])
    return manifest


def _carried_output(hook, plan: dict, request: ReplayRequest, output: str, staging: str, started: float) -> dict:
    """Stage and commit the carried output, holding the output's lease (as replay's _leased)."""
    from spark_apps import manifest as manifest_mod
    from spark_apps import storage

    if manifest_mod.finish_interrupted(output):
        log.info("Finished the commit an earlier run left interrupted in %s", output)
    storage.delete_prefix(staging)
    previous = plan["carry"].get("from")
    window = plan["carry"].get("objects_window") or [None, None]
    prev = read_manifest_doc(hook.read_json(manifest_path(previous))) if previous else None
    if prev is not None and prev["output"]["emit"] != request.emit:
        raise Refused(f"{previous} is a {prev['output']['emit']} output, this interval's is a {request.emit}: "
                      "intervals of one series must have one emit mode")
    carried = request.emit == "snapshot" and prev is not None
    staged = []
    if carried:
        log.info("Copying the %d objects of the snapshot %s to %s (server-side copies)",
                 len(prev["output"]["objects"]), previous, staging)
        for entry in prev["output"]["objects"]:
            # a manifest left by a commit killed after its switch names the staged copies
            name = re.sub(rf"^{STAGING_DIR}/[^/]+/(data/)?", "", relative(entry["uri"], previous))
            target = storage.join(staging, "data", name)
            storage.copy(entry["uri"], target)
            staged.append({"topic": "", "events": 0, **entry, "uri": target})
    if prev is not None:
        schemas = list(prev.get("schemas") or [])
        complete = prev["cut"].get("complete_commit_ts")
    else:
        schemas = _schema_statements(hook, request.schema)
        complete = None
    # a snapshot keeps its tables' rows (and what the archive first showed of them), with no events
    table_rows = [{k: t[k] for k in ("database", "table", "rows", "keys_first_updated", "keys_first_deleted") if k in t}
                  for t in prev["tables"]] if carried else []
    note = (f"no archive object was archived in [{window[0]}, {window[1]}): "
            + (f"carried forward from {previous}" if previous else "an empty output"))
    until = request.until
    # the app's builder, with nothing read: counts of 0 that reconcile, the cut at the window's end
    manifest = manifest_mod.build(
        manifest_mod.RunFacts(
            run_id=plan["run_id"], args=app_args(request), source=request.source, output=output, started=started,
            source_options=dict(request.protocol_options), target_protocol=request.target_protocol or request.protocol,
            target_options=dict(request.target_options),
            window={"since": request.since, "until": until,
                    "base_snapshot": previous if request.emit == "snapshot" else None,
                    "base_cut": prev["cut"]["commit_ts"] if carried else None}),
        manifest_mod.ReadFacts(
            objects=[], partition_stats=[], counts=[],
            cut={"kind": "commit_ts", "commit_ts": until, "time": ts_time(until), "complete_commit_ts": complete,
                 "description": f"commit ts {until} ({ts_time(until)}), the window's end; {note}", "warnings": [note]}),
        manifest_mod.Outcome(written=staged, quarantine_objects=[], ddl_log=[], ddl_failures=[], table_rows=table_rows,
                             schemas=schemas))
    out = manifest["output"]
    if carried:  # what the previous output's objects hold, as its manifest says
        out.update(topics=prev["output"].get("topics", []), nulled=prev["output"].get("nulled", 0))
    if prev is not None and prev["output"].get("lakehouse"):
        out["lakehouse"] = prev["output"]["lakehouse"]
    manifest["carried_from"] = previous
    manifest_mod.commit(output, staging, manifest)  # the app's commit: switch, copy, switch, clean
    if manifest["foreign_objects"]:
        log.warning("Left %d objects cdc-replay did not write under %s: %s", len(manifest["foreign_objects"]),
                    output, ", ".join(manifest["foreign_objects"][:5]))
    return manifest


def validate(hook, plan: dict, *, dag_id: str, run_id: str, data_interval=(None, None),
             require_complete: bool = False) -> dict:
    """Read the app's manifest and check it (metrics.check_manifest; with `require_complete`,
    metrics.check_complete too). Returns the metrics; raises ValidationError (metrics attached as
    .metrics) when the output must not be published — Incomplete when a retry may succeed."""
    request = plan["request"]
    manifest_uri = manifest_path(ReplayRequest.from_dict(request).home)
    if not hook.exists(manifest_uri):
        raise ValidationError(f"{manifest_uri} does not exist: the replay did not commit its output")
    try:
        manifest = read_manifest_doc(hook.read_json(manifest_uri))
    except ManifestError as e:
        raise ValidationError(f"{manifest_uri} {e}") from None
    metrics = run_metrics(manifest, dag_id=dag_id, run_id=run_id, request=plan["original"],
                          staged=plan["staged"], data_interval=data_interval)
    metrics["timeline"] = _timeline(manifest)
    c = metrics["counts"]
    log.info("Replay %s: %s events read = applied %s + deduplicated %s + pending %s + filtered %s + quarantined %s; "
             "%s records emitted in %s objects to %s", manifest["run_id"], f"{c['read']:,}", f"{c['applied']:,}",
             f"{c['duplicate']:,}", f"{c['pending']:,}", f"{c['filtered']:,}", f"{c['quarantined']:,}",
             f"{c['emitted']:,}", c["output_objects"], metrics["output"])
    try:
        notes = check_manifest(manifest, run_id=plan["run_id"], staged=plan["staged"],
                               max_bad_records=plan["original"]["max_bad_records"])
        if require_complete:
            notes.append(check_complete(manifest, plan["request"]["until"]))
    except ValidationError as e:
        metrics["status"] = "incomplete" if isinstance(e, Incomplete) else "failed validation"
        metrics["error"] = str(e)
        e.metrics = metrics
        raise
    for note in notes:
        log.info("Check: %s", note)
    for warning in metrics["warnings"]:
        log.warning("Replay warning: %s", warning)
    gaps = metrics["gaps"]
    if gaps["count"]:
        log.warning("The archive misses %s offsets in %s holes (a missing or truncated archive object?):",
                    f"{gaps['missing_offsets']:,}", f"{gaps['count']:,}")
        for gap in gaps["listed"][:20]:
            log.warning("  %s/%s offsets %s .. %s", gap["topic"], gap["partition"], f"{gap['from']:,}",
                        f"{gap['to']:,}")
    if metrics["watermark_lag_s"] is not None:
        log.info("Cut at %s; the newest commit ts read is %s later (watermark lag); %s events pending",
                 metrics["cut"]["time"], f"{metrics['watermark_lag_s']:.3f} s", f"{c['pending']:,}")
    return metrics


def _timeline(manifest: dict) -> dict | None:
    """Events per table over commit time for the page's chart: the run computed it while
    counting (the manifest's `timeline`); nothing is read or decoded again here."""
    return manifest.get("timeline")


def publish(hook, plan: dict, metrics: dict) -> dict:
    """The app committed the output (its manifest is written last); remove the staging area
    and mark the metrics published."""
    removed = hook.delete_prefix(_staging(ReplayRequest.from_dict(plan["request"]).home))
    log.info("Removed the staging area (%d objects)", removed)
    published = {**metrics, "status": "published",
                 "published_at": dt.datetime.now(dt.timezone.utc).isoformat()}
    c = metrics["counts"]
    log.info("Published %s: %s records (%s rows) of %s tables, commit ts %s .. %s", metrics["output"],
             f"{c['emitted']:,}", f"{c['rows']:,}", len(metrics["tables"]), metrics["commit_time_range"][0],
             metrics["commit_time_range"][1])
    return published


def table_assets(metrics: dict) -> list[tuple[str, dict[str, Any]]]:
    """Delta/Iceberg outputs: one asset per table, its URI the table's location, so a
    downstream DAG can be scheduled on one table (e.g. s3://lake/shop/shop/customers) being
    refreshed. Tables a rerun left unchanged emit no event."""
    assets = []
    for t in metrics.get("lakehouse") or []:
        if t.get("unchanged"):
            continue
        uri = t["location"] if t["location"].startswith("s3://") else f"file://{t['location']}"
        assets.append((uri, {"table": t["table"], "version": t["version"], "cut_commit_ts": t["cut_commit_ts"],
                             "rows": t["rows"], "dropped": bool(t.get("dropped")), "run_id": metrics["run_id"]}))
    return assets


def output_assets(published: dict, *, series: str | None = None,
                  interval: list | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Every asset event a published run emits, as (uri, extra), for both DAGs: a Kafka output one
    per topic produced into (kafka://servers/topic); else the output (s3:// or file://), after the
    series it belongs to when a scheduled interval gives one; then Delta/Iceberg's tables
    (table_assets). The scheduled DAG adds its data `interval` to the extra."""
    extra = {**asset_extra(published), **({"interval": interval} if interval is not None else {})}
    output = published["output"]
    if output.startswith("kafka://"):
        uris = [f"{output}/{topic}" for topic in sorted({p["topic"] for p in published.get("produced") or []})]
    else:
        uris = ([series] if series else []) + [output]
    uris = [uri if uri.startswith(("s3://", "kafka://")) else f"file://{uri}" for uri in uris]
    return [(uri, extra) for uri in uris] + table_assets(published)


def emit_assets(outlet_events, alias: str, published: dict, **where) -> None:
    """Add output_assets(published, **where) to the task's events for the asset alias."""
    from airflow.sdk import Asset, AssetAlias

    events = outlet_events[AssetAlias(alias)]
    for uri, extra in output_assets(published, **where):
        events.add(Asset(uri), extra=extra)


def asset_extra(metrics: dict) -> dict[str, Any]:
    """A small summary for the asset event (shown in the Assets view)."""
    c = metrics["counts"]
    return {"dag_id": metrics["dag_id"], "run_id": metrics["run_id"], "output": metrics["output"],
            "emit": metrics["emit"], "protocol": metrics["target_protocol"], "events_read": c["read"],
            "records_emitted": c["emitted"], "quarantined": c["quarantined"],
            "commit_ts_range": metrics["commit_ts_range"], "cut_commit_ts": metrics["cut"]["commit_ts"],
            "data_interval": metrics["data_interval"]}

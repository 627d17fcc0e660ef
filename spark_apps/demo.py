"""`cdc-replay demo`: the main job end to end on the embedded default.

A loopback S3 server (moto), a generated TiCDC canal-json archive in a bucket, a Spark
local-mode snapshot replay through the same spark-submit path as `cdc-replay replay`, then
the summary, a few output rows, and a check of every row against the generator's truth."""

from __future__ import annotations

import os
import sys

from cdc_codecs import get_codec
from cdc_codecs.archive import is_archive_object, parse_line

from . import storage
from .generate import generate, write_archive
from .local_s3 import DEMO_CREDENTIALS, moto_server
from .manifest import read_manifest

SOURCE = "s3://cdc-archive/tidb/shop"
OUTPUT = "s3://cdc-lake/replay/shop-snapshot"


def read_snapshot(output: str, protocol: str = "canal-json", options=None) -> dict:
    """{(db, table): {key: {column: value}}} from a snapshot output (decoded, not trusted)."""
    codec = get_codec(protocol, {"enable-tidb-extension": "true"} if options is None else options)
    tables: dict = {}
    for info in storage.list_objects(output):
        if not is_archive_object(storage.relative(info.uri, output)):
            continue
        for line in storage.iter_lines(info.uri):
            for event in codec.decode(parse_line(line)):
                if event["kind"] != "row":
                    continue
                row = {c["name"]: c["value"] for c in event["after"]}
                key = tuple(row[k] for k in (event["key_columns"] or list(row)))
                tables.setdefault((event["database"], event["table"]), {})[key] = row
    return tables


def _show(value: bytes | None, mysql_type: str) -> str:
    if value is None:
        return "NULL"
    if "binary" in mysql_type or "blob" in mysql_type:
        return "0x" + value.hex()
    text = value.decode()
    return text if len(text) <= 24 else text[:21] + "..."


def run_demo(transactions: int = 2000, keep_server: bool = False) -> int:
    from .cli import run_replay

    os.environ.update({k: os.environ.get(k, v) for k, v in DEMO_CREDENTIALS.items()})
    with moto_server(keep=keep_server) as endpoint:
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        print(f"[demo] S3-compatible server (moto) on {endpoint}")
        generated = generate(transactions=transactions, partitions=3, bad_values=2)
        storage.ensure_bucket(SOURCE)
        storage.ensure_bucket(OUTPUT)
        objects = write_archive(generated.records, SOURCE)
        print(f"[demo] wrote {len(generated.records):,} Kafka records of TiCDC canal-json (with duplicates, "
              f"DDL, watermarks, 2 corrupt records) in {len(objects)} objects to {SOURCE}")
        print(f"[demo] replaying with Spark local mode: cdc-replay replay --source {SOURCE} --protocol canal-json "
              f"--protocol-option enable-tidb-extension=true --output {OUTPUT} --emit snapshot "
              f"--target-option enable-tidb-extension=true --max-bad-records 2", flush=True)
        status = run_replay([
            "--source", SOURCE, "--protocol", "canal-json", "--protocol-option", "enable-tidb-extension=true",
            "--output", OUTPUT, "--emit", "snapshot", "--target-option", "enable-tidb-extension=true",
            "--max-bad-records", "2",
        ])
        if status != 0:
            print(f"[demo] replay failed with exit status {status}", file=sys.stderr)
            return status
        manifest = read_manifest(OUTPUT)
        snapshot = read_snapshot(OUTPUT)
        for (db, table), rows in sorted(snapshot.items()):
            print(f"\n[demo] {db}.{table}: {len(rows)} rows; the first 3:")
            sample = [rows[k] for k in sorted(rows, key=lambda k: int(k[0]))[:3]]
            types = {c["name"]: c["mysql_type"] for e in generated.events if e["kind"] == "row" and e["table"] == table
                     for c in (e["after"] or e["before"])}
            columns = list(sample[0]) if sample else []
            print("  " + " | ".join(columns))
            for row in sample:
                print("  " + " | ".join(_show(row[c], types.get(c, "")) for c in columns))
        expected = {k: v for k, v in generated.expected.items()}
        same = snapshot == {k: v for k, v in expected.items() if v}
        total = sum(len(v) for v in snapshot.values())
        print(f"\n[demo] snapshot at commit ts {manifest['cut']['commit_ts']} ({manifest['cut']['time']}): "
              f"{total} rows; matches the generator's state at its last watermark: {'yes' if same else 'NO'}")
        print(f"[demo] manifest: {OUTPUT}/_manifest.json; quarantine: {manifest['quarantine']['location']}")
        return 0 if same else 1

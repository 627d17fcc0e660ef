"""Command-line options of the replay app, shared by `cdc-replay replay` and the Spark app
itself (spark-submit spark_apps/replay.py ...), so both accept exactly the same arguments.
Their choices, the commit-ts rule and every rule on a whole request are the request contract's
(spark_apps.contract). Importing this module imports no Spark: `cdc-replay --help` stays fast."""

from __future__ import annotations

import argparse
import dataclasses

from spark_apps.contract import (  # noqa: F401  (the commit-ts rule and registries are the contract's)
    DISPATCHERS,
    EMITS,
    LAST_CUT,
    LAYOUTS,
    TARGET_FORMATS,
    TARGET_LAYOUTS,
    commit_ts,
    since_ts,
)


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    io = parser.add_argument_group("input and output")
    io.add_argument("--source", required=True, metavar="URI",
                    help="archive to replay: a local directory or s3://bucket/prefix, read as --layout says "
                         "(kafka-records: every *.jsonl object below it, recursively, skipping _* and .* paths, "
                         "holds one Kafka record per line; .gz, .zst, .lz4 and .snappy objects are decompressed). Or Kafka topics: "
                         "kafka://host:port/topic1,topic2 (docs/kafka.md)")
    io.add_argument("--layout", default="auto",
                    choices=LAYOUTS,
                    help="how the source holds the records (docs/layouts.md): kafka-records (our JSON lines), "
                         "ticdc-storage (TiCDC's cloud storage sink: data files, index files, schema files and "
                         "the root metadata checkpoint), kafka-connect-s3 (the Kafka Connect S3 sink's Avro, "
                         "JSON or ByteArray objects with optional .keys/.headers files); auto (default) detects "
                         "it from the object names and logs what it found")
    io.add_argument("--layout-option", action="append", default=[], metavar="K=V",
                    help="layout option (repeatable), named as the producer's setting, e.g. "
                         "format.bytearray.separator=\\r\\n for kafka-connect-s3 ByteArrayFormat objects")
    io.add_argument("--starting-offsets", default="earliest", metavar="OFFSETS",
                    help="Kafka source: where to start, as Spark's Kafka source takes it: earliest (default), "
                         'latest, or JSON per partition {"topic": {"0": 42, "1": -2}} (-2 earliest, -1 latest)')
    io.add_argument("--ending-offsets", default="latest", metavar="OFFSETS",
                    help="Kafka source: where to stop (exclusive): latest (default, the end when the run "
                         "starts) or JSON per partition (-1 latest)")
    io.add_argument("--protocol", required=True, metavar="P",
                    help="protocol of the archived values (see `cdc-replay protocols`)")
    io.add_argument("--protocol-option", action="append", default=[], metavar="K=V",
                    help="source codec option, named as TiCDC's sink-URI parameter, e.g. "
                         "enable-tidb-extension=true (repeatable; K=V&K2=V2 also accepted)")
    io.add_argument("--output", required=True, metavar="URI",
                    help="where the result goes (local directory or s3://bucket/prefix, or kafka://host:port to "
                         "produce the records into a Kafka cluster, see --manifest-uri). It is replaced "
                         "as a whole when the run succeeds: data is staged under <output>/_staging/ and "
                         "committed last, with <output>/_manifest.json; the quarantine is <output>/_quarantine/")
    io.add_argument("--manifest-uri", metavar="URI",
                    help="with --output kafka://host:port: where the manifest (what was produced: topic, "
                         "partition, first/last offset, counts), the quarantine and the produced-partition "
                         "markers go (local directory or s3://bucket/prefix)")
    what = parser.add_argument_group("what to emit")
    what.add_argument("--emit", required=True, choices=EMITS,
                      help="snapshot: one INSERT per live row at the cut; topics: the ordered, "
                           "deduplicated stream (rows and DDL) re-encoded; history: SCD type 2 versions "
                           "of every row (valid-from / valid-to commit ts, operation) as Parquet")
    what.add_argument("--target-format", choices=TARGET_FORMATS,
                      help="kafka (default for snapshot/topics): a Kafka-record archive in --target-protocol; "
                           "parquet (snapshot, and the default for history): one Parquet dataset per table "
                           "at <output>/<db>/<table>/ with typed columns; delta / iceberg (snapshot, history): "
                           "one Delta Lake / Iceberg table per source table, one table version per run stamped "
                           "with the cut (docs/lakehouse.md)")
    what.add_argument("--target-table", default="{schema}.{table}", metavar="TEMPLATE",
                      help="delta/iceberg table name, {schema} and {table} replaced (default: %(default)s): "
                           "Iceberg namespace.table in the catalog; Delta tables live at <output>/<ns>/<table>/")
    what.add_argument("--catalog", action="append", default=[], metavar="K=V",
                      help="Iceberg catalog property for pyiceberg (repeatable), e.g. "
                           "uri=postgresql+psycopg2://u:p@host/db; default: a SQL catalog on SQLite at "
                           "<output>/_catalog.sqlite with <output> as warehouse")
    what.add_argument("--target-layout", default="kafka-records", choices=TARGET_LAYOUTS,
                      help="layout of a Kafka output (docs/layouts.md): kafka-records (default) or ticdc-storage, "
                           "row events per table as TiCDC's cloud storage sink writes them (canal-json data "
                           "files, index files, root metadata with the cut as checkpoint-ts), which --layout "
                           "ticdc-storage reads back")
    what.add_argument("--target-protocol", metavar="Q",
                      help="protocol of the output records (default: the source protocol)")
    what.add_argument("--target-option", action="append", default=[], metavar="K=V",
                      help="target codec option (repeatable), e.g. enable-tidb-extension=true")
    what.add_argument("--as-of", type=commit_ts, metavar="COMMIT_TS",
                      help="replay up to this commit ts: a TSO, or an ISO-8601 time with a zone "
                           "(2026-01-01T03:00:00Z), converted to the TSO of that millisecond. Default: the cut, the highest commit ts every "
                           "source partition's watermark has passed (the archive's end when there are no "
                           "watermarks). Events above it are reported as pending")
    what.add_argument("--until", type=commit_ts, metavar="COMMIT_TS",
                      help="end of a window (inclusive); the same as --as-of")
    what.add_argument("--since", type=since_ts, metavar="COMMIT_TS",
                      help="start of a window (exclusive): changes at or below it are outside the window "
                           "(counted as filtered). A snapshot or history of a window needs --base-snapshot, "
                           "the snapshot at --since; topics of a window are just the window's changes. A "
                           "Delta/Iceberg snapshot merges the window into its tables (no --base-snapshot); "
                           "`--since last` is their last committed cut, read from their metadata")
    what.add_argument("--base-snapshot", metavar="URI",
                      help="output of an earlier snapshot run (its manifest gives its cut, protocol and table "
                           "schemas): the window's changes are applied on top of its rows, so backfills can "
                           "be incremental. --since defaults to its cut")
    what.add_argument("--tables", metavar="db.table,...",
                      help="only these tables; shell wildcards allowed (shop.*, *.orders), case-insensitive")
    what.add_argument("--schema", metavar="URI",
                      help="starting schemas, local or s3://: a SQL file of CREATE TABLE statements (USE db; "
                           "allowed), a TiCDC storage-sink table schema file (schema_<version>_<crc>.json), or a "
                           "prefix holding any number of both (e.g. a storage sink's root: *.sql and "
                           "meta/schema_*.json are read, other objects ignored). They describe tables as they were "
                           "before the archive starts (a table's earliest schema file); DDL in the archive is "
                           "applied on top, and every schema file version is cross-checked with the DDL history "
                           "(disagreements listed in the manifest's schema_conflicts)")
    what.add_argument("--require-schema", action="store_true",
                      help="quarantine row events of tables that neither the archive's DDL, --schema nor "
                           "--base-snapshot describes (default: read them with the schema the messages carry)")
    what.add_argument("--require-contiguous", action="store_true",
                      help="fail the run (exit 2, nothing written) when a source partition's Kafka offsets have "
                           "holes between the lowest and highest offset the archive holds (a missing or truncated "
                           "archive object). Without it the holes are listed in the manifest (gaps) and the summary. "
                           "Transactional producers and compacted topics leave holes too")
    what.add_argument("--target-topic", default="{topic}", metavar="TEMPLATE",
                      help="output topic name; {topic} (source topic), {schema} and {table} are replaced "
                           "(default: %(default)s)")
    what.add_argument("--target-partitions", type=int, metavar="N",
                      help="partitions per output topic (default: as many as the source topics have)")
    what.add_argument("--dispatcher", default="index-value",
                      choices=DISPATCHERS,
                      help="output partition of a row, placed exactly as the producer does: TiCDC's "
                           "index-value (default: crc32 of database+table XOR crc32 of each handle-key column's "
                           "name+value, %% N), table (crc32 of database+table), ts (commit ts %% N); Canal's "
                           "placement (Java String.hashCode of database and key values, abs(h) %% N) or Canal's "
                           "table hash. DDL and watermarks go where the target protocol's producer puts them")
    run = parser.add_argument_group("running")
    run.add_argument("--max-bad-records", type=int, default=0, metavar="N",
                     help="fail the run when more than N records are quarantined (default: %(default)s); "
                          "the output is committed either way so the quarantine can be inspected")
    run.add_argument("--max-records-per-object", type=int, default=100_000, metavar="N",
                     help="roll output objects after N records (default: %(default)s)")
    run.add_argument("--master", default="local[*]",
                     help="Spark master: local[*] (default, embedded) or a cluster URL such as spark://host:7077")
    run.add_argument("--spark-conf", action="append", default=[], metavar="K=V",
                     help="extra Spark configuration (repeatable)")
    run.add_argument("--spark-ui", action="store_true",
                     help="serve Spark's web UI while the run lasts, for following a long run stage by stage "
                          "(off by default: it costs start-up time); its address is logged")
    run.add_argument("--run-id", help="id recorded in the manifest (default: generated)")
    run.add_argument("--s3-read-chunk-size", type=int, default=8 << 20, metavar="BYTES",
                     help="S3 objects are read in Range GETs of this many bytes; a body cut mid-range (connection "
                          "reset) is resumed from the first byte not yet received (default: %(default)s, 8 MiB; "
                          "docs/reliability.md)")
    run.add_argument("--s3-max-attempts", type=int, default=None, metavar="N",
                     help="attempts per S3 request, retried with exponential backoff on throttling (503 SlowDown), "
                          "5xx and connection errors, and resumes of one interrupted body (default: "
                          "AWS_MAX_ATTEMPTS, else 8)")
    run.add_argument("--lease-timeout", type=float, default=None, metavar="SECONDS",
                     help="one run at a time per output: a run holds <output>/_lease.json, its heartbeat refreshed "
                          "while it runs; another run on the output is refused (exit 2) unless the heartbeat is "
                          "older than this, when the lease is taken over (a killed run's on another host; a killed run's on "
                          "this host is taken over at once). Default: "
                          "$CDC_REPLAY_LEASE_TIMEOUT, else 600 (docs/reliability.md)")
    limits = parser.add_argument_group("limits (a message or object beyond one is quarantined with the reason; "
                                       "docs/reliability.md)")
    limits.add_argument("--max-columns", type=int, default=4096, metavar="N",
                        help="columns per row image (default: %(default)s, MySQL's and TiDB's most)")
    limits.add_argument("--max-rows", type=int, default=100_000, metavar="N",
                        help="rows per message (default: %(default)s)")
    limits.add_argument("--max-inflate-ratio", type=float, default=100.0, metavar="RATIO",
                        help="decompressed bytes per compressed object, as a ratio to its stored bytes (at least "
                             "16 MiB); the lines before that point are kept, the rest of the object is not read "
                             "(default: %(default)g)")
    limits.add_argument("--max-line-bytes", type=int, default=64 << 20, metavar="BYTES",
                        help="bytes per line of a line-based object (a Kafka-record line, a storage-sink data "
                             "line); a longer line is never held whole (default: %(default)s, 64 MiB)")
    run.add_argument("--s3-retry-mode", choices=("standard", "adaptive"), default=None,
                     help="botocore's retry mode: standard (default, or AWS_RETRY_MODE) or adaptive (also slows "
                          "the client down while S3 throttles)")


@dataclasses.dataclass
class ReplayArgs:
    source: str
    protocol: str
    output: str
    emit: str
    protocol_option: list
    target_protocol: str | None
    target_option: list
    as_of: int | None
    tables: str | None
    target_format: str | None
    until: int | None
    since: int | None
    base_snapshot: str | None
    schema: str | None
    require_schema: bool
    require_contiguous: bool
    target_topic: str
    target_partitions: int | None
    dispatcher: str
    max_bad_records: int
    max_records_per_object: int
    master: str
    spark_conf: list
    run_id: str | None
    layout: str = "auto"
    layout_option: list = dataclasses.field(default_factory=list)
    target_layout: str = "kafka-records"
    target_table: str = "{schema}.{table}"
    catalog: list = dataclasses.field(default_factory=list)
    starting_offsets: str = "earliest"
    ending_offsets: str = "latest"
    manifest_uri: str | None = None
    spark_ui: bool = False
    s3_read_chunk_size: int = 8 << 20
    s3_max_attempts: int | None = None
    s3_retry_mode: str | None = None
    lease_timeout: float | None = None
    max_columns: int = 4096
    max_rows: int = 100_000
    max_inflate_ratio: float = 100.0
    max_line_bytes: int = 64 << 20

    def read_settings(self):
        """The S3 read settings these options give (spark_apps.storage.ReadSettings)."""
        from spark_apps.storage import ReadSettings, _default_settings

        default = _default_settings()
        return ReadSettings(chunk_size=self.s3_read_chunk_size,
                            max_attempts=self.s3_max_attempts or default.max_attempts,
                            retry_mode=self.s3_retry_mode or default.retry_mode, max_columns=self.max_columns,
                            max_rows=self.max_rows, max_inflate_ratio=self.max_inflate_ratio,
                            max_line_bytes=self.max_line_bytes)

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> "ReplayArgs":
        return cls(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(cls)})

    @property
    def upper(self) -> int | None:
        """--as-of or --until (the same bound)."""
        return self.as_of if self.as_of is not None else self.until

    @property
    def output_format(self) -> str:
        return self.target_format or ("parquet" if self.emit == "history" else "kafka")

    def table_patterns(self) -> list[str]:
        return [p.strip() for p in (self.tables or "").split(",") if p.strip()]


def parser(cls=argparse.ArgumentParser) -> argparse.ArgumentParser:
    p = cls(prog="replay", description="Replay a CDC archive (three layouts: --layout) or Kafka topics with Spark.")
    add_replay_arguments(p)
    return p

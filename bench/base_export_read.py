"""Reading a large Dumpling export in Spark (issue 30 point 6): rows/s, MB/s, tasks, wall
and CPU seconds, load average.

Writes a Dumpling-shaped export (`metadata`, schema files, `{db}.{table}.{n:09d}.sql` data
files of multi-row INSERTs of about Dumpling's default --statement-size, 1 MB; with `--format
csv` `.csv` files in Dumpling's default dialect: a quoted header, numbers bare, strings and
binary (raw) in `"` with backslash escapes, `\\r\\n`) of --size
bytes (default 10G) in four tables: `orders` in files of size/8 and `customers` in files of
size/20 (much larger than the split size at 10 GB: read as byte ranges), `items` in 64 MB
files and `notes` in one small file (one task each). Then reads it with
`base_export.spark.export_rows` in local mode and sums the values' sizes (every row read,
converted and handed to the JVM).

CPU seconds are the whole machine's (/proc/stat, all processes: the JVM, the Python workers,
anything else running), so run it on a quiet machine; the load averages before and after say
how quiet it was. `--profile-mb N` also profiles the task-side reader (no Spark) on the first
N MB of the largest file, to show where a task's time goes; `--reader-mb N` times the reader
alone, fast and value-by-value reference, on N MB of each table.

    python bench/base_export_read.py --size 10G               # the measurement
    python bench/base_export_read.py --size 400M --split 16M  # a quick check
    python bench/base_export_read.py --size 200M --split 16M --format csv
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pathlib
import pstats
import re
import shutil
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

STATEMENT = 1_000_000  # Dumpling's default --statement-size
TABLES = {  # name: (CREATE TABLE body, share of the size, file size as a fraction of the size or bytes)
    "orders": ("`id` bigint NOT NULL, `customer` bigint, `amount` decimal(12,2), `status` varchar(16), "
               "`note` varchar(255), `created` datetime, `payload` varbinary(64), PRIMARY KEY (`id`)", 0.55, 1 / 8),
    "customers": ("`id` bigint NOT NULL, `name` varchar(64), `email` varchar(128), `balance` decimal(14,4), "
                  "`joined` date, PRIMARY KEY (`id`)", 0.25, 1 / 20),
    "items": ("`id` bigint NOT NULL, `sku` varchar(32), `price` decimal(10,2), `weight` double, "
              "PRIMARY KEY (`id`)", 0.19, 64 << 20),
    "notes": ("`id` bigint NOT NULL, `body` text, PRIMARY KEY (`id`)", 0.01, 1.0),
}


def size_arg(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(text)


def row(table: str, i: int) -> str:
    if table == "orders":
        return (f"({i},{i % 100_003},{i % 99_991}.{i % 100:02d},'{('paid', 'open', 'shipped')[i % 3]}',"
                f"'order {i}: it\\'s a \\\"note\\\"\\nsecond line; INSERT INTO x',"
                f"'2026-11-{1 + i % 28:02d} {i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}',x'{i:016x}{i % 251:02x}')")
    if table == "customers":
        return f"({i},'customer {i}','c{i}@example.com',{i % 1_000_003}.{i % 10_000:04d},'2020-{1 + i % 12:02d}-{1 + i % 28:02d}')"
    if table == "items":
        return f"({i},'SKU-{i:08d}',{i % 9_973}.{i % 100:02d},{i % 1000}.{i % 7}25)"
    return f"({i},'note {i} with text\\tand a tab, and ; and \\'quotes\\'')"


def csv_row(table: str, i: int) -> bytes:
    """`row` as Dumpling's CSV writes it (pkg/dumpformat/csvfile: numbers bare, the rest in `"`
    with NUL, CR, LF, `\\` and `"` backslash-escaped, binary raw), without the `\\r\\n`."""
    if table == "orders":
        payload = (i.to_bytes(8, "big") + bytes([i % 251])).replace(b"\\", b"\\\\").replace(b'"', b'\\"')
        payload = payload.replace(b"\0", b"\\0").replace(b"\r", b"\\r").replace(b"\n", b"\\n")
        status = ("paid", "open", "shipped")[i % 3]
        return (f'{i},{i % 100_003},{i % 99_991}.{i % 100:02d},"{status}",'
                f'"order {i}: it\'s a \\"note\\"\\nsecond line; INSERT INTO x",'
                f'"2026-11-{1 + i % 28:02d} {i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}",').encode() \
            + b'"' + payload + b'"'
    if table == "customers":
        return (f'{i},"customer {i}","c{i}@example.com",{i % 1_000_003}.{i % 10_000:04d},'
                f'"2020-{1 + i % 12:02d}-{1 + i % 28:02d}"').encode()
    if table == "items":
        return f'{i},"SKU-{i:08d}",{i % 9_973}.{i % 100:02d},{i % 1000}.{i % 7}25'.encode()
    return f'{i},"note {i} with text\tand a tab, and ; and \'quotes\'"'.encode()


def write_export(folder: pathlib.Path, size: int, file_format: str = "sql") -> int:
    """The export at `folder`; returns the data bytes written."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "metadata").write_text("Started dump at: 2026-11-28 00:00:00\nSHOW MASTER STATUS:\n\tLog: tidb-binlog\n"
                                     "\tPos: 453817264815718401\n\tGTID:\n\nFinished dump at: 2026-11-28 01:00:00\n")
    (folder / "bench-schema-create.sql").write_text("/*!40101 SET NAMES binary*/;\nCREATE DATABASE `bench`;\n")
    total = 0
    for table, (body, share, per_file) in TABLES.items():
        (folder / f"bench.{table}-schema.sql").write_text(
            f"/*!40101 SET NAMES binary*/;\nCREATE TABLE `{table}` ({body}) ENGINE=InnoDB;\n")
        want = int(size * share)
        file_size = int(size * per_file) if isinstance(per_file, float) else per_file
        i, index, written = 0, 0, 0
        if file_format == "csv":
            names = re.findall(r"^`([^`]+)` ", body) + re.findall(r", `([^`]+)` [a-z]", body)
            header = ",".join(f'"{n}"' for n in names).encode() + b"\r\n"
        while file_format == "csv" and written < want:
            with open(folder / f"bench.{table}.{index:09d}.csv", "wb") as out:
                in_file = out.write(header)
                while in_file < file_size and written + in_file < want:
                    lines = []
                    for _ in range(2000):
                        lines.append(csv_row(table, i))
                        i += 1
                    in_file += out.write(b"\r\n".join(lines) + b"\r\n")
            written += in_file
            index += 1
        while file_format == "sql" and written < want:
            with open(folder / f"bench.{table}.{index:09d}.sql", "wb") as out:
                in_file = out.write(b"/*!40101 SET NAMES binary*/;\n")
                while in_file < file_size and written + in_file < want:
                    rows, length = [], 0
                    while length < STATEMENT:
                        text = row(table, i)
                        rows.append(text)
                        length += len(text) + 2
                        i += 1
                    body_text = ",\n".join(rows)
                    in_file += out.write(f"INSERT INTO `{table}` VALUES\n{body_text};\n".encode())
            written += in_file
            index += 1
        total += written
    return total


def cpu_seconds() -> float:
    """CPU time of every process on the machine so far (/proc/stat: user, nice, system, irq, softirq)."""
    fields = open("/proc/stat").readline().split()[1:8]
    return (sum(int(f) for f in fields[:3]) + int(fields[5]) + int(fields[6])) / os.sysconf("SC_CLK_TCK")


def read_in_spark(folder: pathlib.Path, master: str, split: int | None, memory: str) -> dict:
    from spark_apps.base_export import discover
    from spark_apps.base_export.spark import export_parts, export_rows
    from spark_apps.replay import build_session

    spark = build_session(master, "cdc-replay-bench-export", [f"spark.driver.memory={memory}"])
    try:
        load_before = os.getloadavg()
        cpu, started = cpu_seconds(), time.perf_counter()
        export = discover(str(folder))
        parts = export_parts(export, split=split)
        rows, values = export_rows(spark, export, split=split).selectExpr("count(*)", "sum(size(`values`))").first()
        wall = time.perf_counter() - started
        cpu = cpu_seconds() - cpu
        load_after = os.getloadavg()
    finally:
        spark.stop()
    data = sum(f.size for f in export.files)
    return {"files": len(export.files), "tasks": len(parts), "split_files": len({p.file.uri for p in parts if p.end}),
            "data_bytes": data, "rows": rows, "values": values, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "rows_per_s": round(rows / wall), "mb_per_s": round(data / 1e6 / wall, 1),
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after]}


def profile_reader(folder: pathlib.Path, mb: int) -> str:
    """cProfile of one task's reader (split.part_rows) over the first `mb` MB of the largest file."""
    from spark_apps.base_export import discover, part_rows
    from spark_apps.base_export.split import Part

    export = discover(str(folder))
    largest = max(export.files, key=lambda f: f.size)
    part = Part(largest, 0, 0, min(largest.size, mb << 20))
    converters = export.converters()
    profiler = cProfile.Profile()
    started = time.process_time()
    profiler.enable()
    count = sum(1 for _ in part_rows(part, converters))
    profiler.disable()
    seconds = time.process_time() - started
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(8)
    lines = [line for line in out.getvalue().splitlines() if line.strip()][-10:]
    return (f"{count} rows of {largest.uri.rsplit('/', 1)[-1]} ({mb} MB) in {seconds:.1f} CPU s under cProfile "
            f"= {count / seconds:,.0f} rows/s:\n" + "\n".join(lines))


def reader_rates(folder: pathlib.Path, mb: int) -> str:
    """Rows/s of the task-side reader alone (no Spark, no profiler): the fast one
    (`read_sql_rows_at`, `read_csv_rows_at`) and the reference (`..._reference`), on the first
    `mb` MB of each table's largest file (cut at a statement start, or a line start for CSV), in
    1 MB pieces, CPU seconds of this process."""
    from spark_apps.base_export import discover
    from spark_apps.base_export.rows import (read_csv_rows_at, read_csv_rows_at_reference, pieces_of,
                                             read_sql_rows_at, read_sql_rows_at_reference)

    export = discover(str(folder))
    converters = export.converters()
    lines = []
    for table in TABLES:
        f = max((f for f in export.files if f.table == table), key=lambda f: f.size)
        data = pathlib.Path(f.uri.removeprefix("file://")).read_bytes()
        if len(data) > mb << 20:
            data = data[:data.rfind(b"\n" if f.format == "csv" else b"\nINSERT INTO ", 0, mb << 20) + 1]
        rates = []
        if f.format == "csv":
            converter = converters[(f.database.lower(), f.table.lower())]
            readers = [lambda pieces, reader=reader: reader(pieces, converter)
                       for reader in (read_csv_rows_at, read_csv_rows_at_reference)]
        else:
            readers = [lambda pieces, reader=reader: reader(pieces, converters, f.database)
                       for reader in (read_sql_rows_at, read_sql_rows_at_reference)]
        for reader in readers:
            started = time.process_time()
            count = sum(1 for _ in reader(pieces_of(f.uri, data)))
            seconds = time.process_time() - started
            rates.append(f"{count / seconds:,.0f} rows/s, {len(data) / 1e6 / seconds:.1f} MB/s")
        lines.append(f"{table}: {count} rows, {len(data) / 1e6:.1f} MB: fast {rates[0]}; reference {rates[1]}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=size_arg, default=10 << 30, help="export data bytes (10G, 500M, ...)")
    ap.add_argument("--dir", default="/tmp/cdc-replay-bench-export")
    ap.add_argument("--split", type=size_arg, default=None,
                    help="range size (default: $CDC_REPLAY_EXPORT_SPLIT_BYTES or 128M; 0: one task per file)")
    ap.add_argument("--format", choices=("sql", "csv"), default="sql", help="Dumpling's --filetype")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--reuse", action="store_true", help="read the export already at --dir")
    ap.add_argument("--keep", action="store_true", help="keep the export afterwards")
    ap.add_argument("--profile-mb", type=int, default=0)
    ap.add_argument("--reader-mb", type=int, default=0,
                    help="also time the task-side reader alone, fast and reference, on N MB per table")
    args = ap.parse_args()
    folder = pathlib.Path(args.dir)
    if not args.reuse:
        started = time.perf_counter()
        written = write_export(folder, args.size, args.format)
        print(f"wrote {written / 1e6:,.0f} MB to {folder} in {time.perf_counter() - started:.0f} s", flush=True)
    try:
        result = read_in_spark(folder, args.master, args.split, args.driver_memory)
        result["master"], result["cores"] = args.master, os.cpu_count()
        print(json.dumps(result))
        print(f"| {result['data_bytes'] / 1e6:,.0f} MB | {result['files']} files | {result['tasks']} tasks "
              f"({result['split_files']} files split) | {result['rows']:,} rows | {result['wall_s']} s wall | "
              f"{result['cpu_s']} CPU s | {result['rows_per_s']:,} rows/s | {result['mb_per_s']} MB/s | "
              f"load {result['load_before'][0]} -> {result['load_after'][0]} |")
        if args.profile_mb:
            print(profile_reader(folder, args.profile_mb))
        if args.reader_mb:
            print(reader_rates(folder, args.reader_mb))
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Quick decode-speed comparison: craft vs canal-json on the same row events.

    .venv/bin/python scripts/bench_craft.py [rows]

Builds `rows` UPDATE events of a 12-column table (ints, unsigned bigint, decimal, datetime,
double, float, varchar, text, varbinary, enum, NULLs), encodes them with craft (TiCDC's default
max-batch-size=16 and a larger batch) and with canal-json (one message per row, as TiCDC
writes it), then times `decode_record` over the messages: CPU time of this process (so other load on the
machine matters less), best of two rounds with cleared caches ("cold") and two rounds after
("warm"). Prints events per second and the ratio to canal-json.
"""

from __future__ import annotations

import random
import sys
import time

from cdc_codecs import KafkaRecord, craft, decode_record, get_codec
from cdc_codecs.events import ColumnFlag, Kind, Op, column, new_event
from cdc_codecs.mysql_types import parse_type
from cdc_codecs.tso import physical_ms

PK = ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY


def image(rng: random.Random, i: int) -> list[dict]:
    return [
        column("id", str(i), "bigint", PK),
        column("user_id", str(rng.randrange(1, 10**6)), "int"),
        column("big", str(rng.randrange(2**64)), "bigint unsigned", ColumnFlag.UNSIGNED),
        column("amount", f"{rng.randrange(10**8) / 100:.2f}", "decimal(10,2)"),
        column("created", "2024-05-01 12:%02d:%02d" % (rng.randrange(60), rng.randrange(60)), "datetime"),
        column("score", repr(rng.random()), "double"),
        column("ratio", "0.5", "float"),
        column("name", "user-%d" % rng.randrange(10**6), "varchar(64)"),
        column("note", None if rng.random() < 0.5 else "some text " * 3, "text"),
        column("blob", rng.randbytes(16), "varbinary(16)", ColumnFlag.BINARY),
        column("state", str(rng.randrange(1, 4)), "enum('a','b','c')"),
        column("flag", str(rng.randrange(2)), "tinyint"),
    ]


def events(n: int) -> list[dict]:
    rng = random.Random(1)
    out = []
    for i in range(n):
        ts = (1 << 60) + i
        out.append(new_event(
            Kind.ROW, op=Op.UPDATE, commit_ts=ts, execute_ts_ms=physical_ms(ts), database="shop",
            table="orders", key_columns=["id"], before=image(rng, i), after=image(rng, i),
        ))
    return out


def clear_caches() -> None:
    """Forget what earlier rounds taught the decoders (craft's value-text tables and group
    readers, the MySQL type parser's cache), so every round starts cold."""
    for table in (craft._ZIGZAG_TEXT, craft._UVARINT_TEXT, craft._DOUBLE_TEXT, craft._FLOAT_TEXT, craft._READERS):
        table.clear()
    parse_type.cache_clear()


def bench(protocol: str, options: dict, stream: list[dict]) -> tuple[float, float, int, int]:
    codec = get_codec(protocol, options)
    records = [
        KafkaRecord("t", 0, offset, None, m.key, m.value)
        for offset, m in enumerate(codec.encode(stream, topic="t", partition=0))
    ]
    size = sum(len(r.value) for r in records)
    cold = warm = float("inf")
    for round in range(4):
        if round < 2:
            clear_caches()
        decoder = get_codec(protocol, options)
        start = time.process_time()
        count = 0
        for r in records:
            count += len(decode_record(decoder, r))
        elapsed = time.process_time() - start
        if round < 2:
            cold = min(cold, elapsed)
        else:
            warm = min(warm, elapsed)
    assert count == len(stream)
    return count / cold, count / warm, len(records), size


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    stream = events(n)
    results = [
        ("canal-json", {"enable-tidb-extension": "true"}),
        ("craft", {}),
        ("craft", {"max-batch-size": "256"}),
    ]
    base = None
    print(f"{'':42s} {'cold caches':>22s} {'warm caches':>22s}")
    for protocol, options in results:
        cold, warm, messages, size = bench(protocol, options, stream)
        base = base or (cold, warm)
        label = protocol + "".join(f" {k}={v}" for k, v in options.items())
        print(
            f"{label:42s} {cold:9,.0f} ev/s x{cold / base[0]:4.1f}  {warm:9,.0f} ev/s x{warm / base[1]:4.1f}"
            f"  ({messages} messages, {size:,} bytes)"
        )


if __name__ == "__main__":
    main()

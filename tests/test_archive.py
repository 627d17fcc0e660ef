"""The Kafka-record archive format and the storage layer (local and a real S3 server)."""

import gzip

import pytest

from cdc_codecs import KafkaRecord
from cdc_codecs.archive import ArchiveLineError, format_record, is_archive_object, line_former, object_name, parse_line
from spark_apps import storage


def test_record_lines_round_trip_with_binary_keys_values_and_headers():
    record = KafkaRecord("orders", 2, 12345678901, 1700000000000, bytes(range(256)), b"\x00{}",
                         (("h", b"\xff"), ("empty", b"")))
    line = format_record(record)
    assert b"\n" not in line
    assert parse_line(line, "obj") == KafkaRecord(
        "orders", 2, 12345678901, 1700000000000, bytes(range(256)), b"\x00{}", (("h", b"\xff"), ("empty", b"")), "obj")


@pytest.mark.parametrize("topic", ["t", "shop.orders", 'a"b\\c\u00e9\u2028\x01/'])
def test_a_writers_line_former_writes_format_records_lines(topic):
    """The archive target formats its lines with `line_former` (the topic and partition
    rendered once): the same bytes as `format_record` for every kind of key, value and headers,
    and by its `value_line` for a record with a value only."""
    values = [None, b"", bytes(range(256)), b'{"id":1}' * 40]
    headers = [None, (), [("h", b"\xff")], (("a", b""), ("\u00e9\"", b"xyz"))]
    for partition in (0, 7, (1 << 31) - 1):
        line = line_former(topic, partition)
        for offset in (0, 99, (1 << 63) - 1):
            for key in values:
                for value in values:
                    for header in headers:
                        record = KafkaRecord(topic, partition, offset, None, key, value, header or ())
                        assert line(offset, key, value, header) == format_record(record)
            for value in values[1:]:  # a record with a value and nothing else (most of the writer's)
                record = KafkaRecord(topic, partition, offset, None, None, value, ())
                assert line.value_line(offset, value) == format_record(record)


@pytest.mark.parametrize("topic", ["t", 'a"b\\c\u00e9\u2028\x01/'])
def test_the_compiled_value_lines_are_the_value_lines(topic):
    """The extension's `value_lines` (the object writer's runs of value-only records as one
    buffer) writes `value_line`'s bytes, each line with its newline, at consecutive offsets:
    values of every length modulo 3 (base64's padding), empty, binary, large offsets."""
    from spark_apps import native_decode

    assert native_decode.cdc_replay_native is not None, (
        f"{native_decode.UNAVAILABLE}: scripts/bootstrap (the suite's command runs it) builds the extension")
    value_lines = native_decode.cdc_replay_native.value_lines
    values = [bytes(range(n % 256)) * (1 + n // 256) for n in range(0, 700, 7)] + [b"", b'{"id":1}' * 400]
    for partition in (0, (1 << 31) - 1):
        line = line_former(topic, partition)
        for first in (0, 9, (1 << 63) - len(values)):
            assert value_lines(line.head, first, values) == b"".join(
                line.value_line(first + j, value) + b"\n" for j, value in enumerate(values))
            assert value_lines(line.head, first, []) == b""
    with pytest.raises(TypeError):
        value_lines(line.head, 0, [b"x", None])


def test_null_key_value_and_timestamp():
    record = parse_line(b'{"topic":"t","partition":0,"offset":0,"timestamp":null,"key":null,"value":null}')
    assert (record.key, record.value, record.timestamp, record.headers) == (None, None, None, ())


@pytest.mark.parametrize("line, reason", [
    (b"not json", "not JSON"),
    (b"[]", "not a JSON object"),
    (b'{"partition":0,"offset":0}', "topic is missing"),
    (b'{"topic":"t","partition":-1,"offset":0}', "partition"),
    (b'{"topic":"t","partition":0,"offset":"7"}', "offset"),
    (b'{"topic":"t","partition":0,"offset":0,"value":"***"}', "value is not valid base64"),
    (b'{"topic":"t","partition":0,"offset":0,"headers":[["h"]]}', "headers[0]"),
])
def test_bad_lines_name_what_is_wrong(line, reason):
    with pytest.raises(ArchiveLineError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        parse_line(line)


def test_object_names_and_what_readers_skip():
    assert object_name("orders", 3, 42) == "orders/3/orders+3+00000000000000000042.jsonl.gz"
    assert is_archive_object("orders/3/x.jsonl") and is_archive_object("a/b.jsonl.gz")
    assert not is_archive_object("orders/3/x.json")
    assert not is_archive_object("_quarantine/part-00000.jsonl.gz")
    assert not is_archive_object("_staging/run/data/x.jsonl.gz")
    assert not is_archive_object(".hidden/x.jsonl")


@pytest.mark.parametrize("where", ["local", "s3"])
def test_storage_round_trip(where, tmp_path, bucket):
    base = str(tmp_path / "store") if where == "local" else f"{bucket}/prefix"
    lines = [b'{"a":1}', b"", b"\xff\xfe binary-ish", b"last"]
    storage.write_bytes(storage.join(base, "x/one.jsonl.gz"), gzip.compress(b"\n".join(lines) + b"\n"))
    storage.write_bytes(storage.join(base, "x/two.jsonl"), b"a\r\nb\n")
    found = storage.list_objects(base)
    assert [storage.relative(o.uri, base) for o in found] == ["x/one.jsonl.gz", "x/two.jsonl"]
    assert list(storage.iter_lines(found[0].uri)) == lines
    assert list(storage.iter_lines(found[1].uri)) == [b"a", b"b"]
    storage.delete_prefix(base)
    assert storage.list_objects(base) == []

//! The Kafka-record archive's lines (codecs/archive.py) read in the same pass as the decode.
//!
//! Python used to split an archive object into lines, `orjson.loads` each, base64-decode its
//! value and build a `KafkaRecord` per record before the compiled decoder saw the values:
//! about half of the decode's CPU. Here the decompressed bytes come whole; each line is parsed
//! (topic, partition, offset, timestamp, key, value), its key and value decoded and handed to
//! the compiled decoder (any of them: the same record functions as their
//! `decode`), and the record's coordinates written beside its events. A line this
//! path is not sure about (not exactly what `parse_line` accepts, headers, unknown fields, a
//! record the decoder hands back) is returned by its byte span for the Python path, which
//! stays the reference for quarantine rows and error texts.

use std::borrow::Cow;
use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::canal_protobuf::CanalProtobufDecoder;
use crate::craft::CraftDecoder;
use crate::avro::AvroDecoder;
use crate::open_protocol::OpenProtocolDecoder;
use crate::oceanbase_avro::OceanBaseAvroDecoder;
use crate::canal_json::CanalJsonDecoder;
use crate::{buffer_bytes, push_int, Builders, Fallback, I64Col, Positions, StrCol, R};

/// A JSON string, borrowed from the line when it has no escapes.
pub(crate) struct Text<'a>(pub(crate) Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A JSON integer (what Python's `isinstance(x, int) and not isinstance(x, bool)` accepts
/// within 64 bits); floats, booleans and anything else fail.
struct Int(i128);

impl<'de> Deserialize<'de> for Int {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Int;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Int, E> {
                Ok(Int(v as i128))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Int, E> {
                Ok(Int(v as i128))
            }
        }
        d.deserialize_any(V)
    }
}

/// `headers`: only none (absent, null, []) is taken here; any header goes to Python.
struct NoHeaders;

impl<'de> Deserialize<'de> for NoHeaders {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NoHeaders;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("no headers")
            }
            fn visit_unit<E: de::Error>(self) -> Result<NoHeaders, E> {
                Ok(NoHeaders)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NoHeaders, A::Error> {
                match seq.next_element::<IgnoredAny>()? {
                    None => Ok(NoHeaders),
                    Some(_) => Err(de::Error::custom("headers: left to Python")),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// One archive line as `parse_line` reads it (ranges checked after parsing).
struct Line<'a> {
    topic: Text<'a>,
    partition: i128,
    offset: i128,
    timestamp: Option<i128>,
    key: Option<Text<'a>>,
    value: Option<Text<'a>>,
}

impl<'de> Deserialize<'de> for Line<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Line<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an archive line")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Line<'de>, A::Error> {
                let (mut topic, mut partition, mut offset) = (None, None, None);
                let (mut timestamp, mut key, mut value, mut headers) = (None, None, None, None);
                fn once<T, E: de::Error>(slot: &mut Option<T>, v: T) -> Result<(), E> {
                    match slot.replace(v) {
                        None => Ok(()),
                        Some(_) => Err(E::custom("duplicate field: left to Python")),
                    }
                }
                while let Some(k) = map.next_key::<Text>()? {
                    match k.0.as_ref() {
                        "topic" => once(&mut topic, map.next_value::<Text>()?)?,
                        "partition" => once(&mut partition, map.next_value::<Int>()?.0)?,
                        "offset" => once(&mut offset, map.next_value::<Int>()?.0)?,
                        "timestamp" => once(&mut timestamp, map.next_value::<Option<Int>>()?.map(|i| i.0))?,
                        "key" => once(&mut key, map.next_value::<Option<Text>>()?)?,
                        "value" => once(&mut value, map.next_value::<Option<Text>>()?)?,
                        "headers" => once(&mut headers, map.next_value::<Option<NoHeaders>>()?)?,
                        _ => return Err(de::Error::custom("unknown field: left to Python")),
                    }
                }
                match (topic, partition, offset) {
                    (Some(topic), Some(partition), Some(offset)) => Ok(Line {
                        topic,
                        partition,
                        offset,
                        timestamp: timestamp.flatten(),
                        key: key.flatten(),
                        value: value.flatten(),
                    }),
                    _ => Err(de::Error::custom("missing field: left to Python")),
                }
            }
        }
        d.deserialize_map(V)
    }
}

/// `bytes.strip()`'s whitespace: a line of only these is skipped (and still counted).
fn blank(line: &[u8]) -> bool {
    line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c))
}

/// The coordinates of one record taken here, and its value decoded from base64.
struct Taken<'a> {
    topic: Cow<'a, str>,
    partition: i32,
    offset: i64,
    timestamp: Option<i64>,
    keyed: bool, // a key was decoded (into the caller's key buffer)
    valued: bool, // a value was decoded (else a tombstone: only avro decodes those here)
}

/// What `parse_line` would give for this line, when it surely gives a record.
fn parse<'a>(line: &'a [u8], value: &mut Vec<u8>, key: &mut Vec<u8>) -> Result<Taken<'a>, Fallback> {
    let text = std::str::from_utf8(line).map_err(|_| Fallback)?;
    let l: Line = serde_json::from_str(text).map_err(|_| Fallback)?;
    if l.topic.0.is_empty() || !(0..1i128 << 31).contains(&l.partition) || !(0..1i128 << 63).contains(&l.offset) {
        return Err(Fallback);
    }
    let timestamp = match l.timestamp {
        None => None,
        Some(t) if t.abs() < 1i128 << 63 => Some(t as i64),
        Some(_) => return Err(Fallback),
    };
    // strict, canonical base64 only: everything the base64 crate takes, Python's strict mode takes alike
    key.clear();
    if let Some(k) = &l.key {
        STANDARD.decode_vec(k.0.as_bytes(), key).map_err(|_| Fallback)?;
    }
    value.clear();
    if let Some(v) = &l.value {
        STANDARD.decode_vec(v.0.as_bytes(), value).map_err(|_| Fallback)?;
    }
    let (keyed, valued) = (l.key.is_some(), l.value.is_some());
    Ok(Taken { topic: l.topic.0, partition: l.partition as i32, offset: l.offset as i64, timestamp, keyed, valued })
}

/// The compiled decoder a line's record goes to (any of the module's decoder classes).
enum Decoder<'py> {
    CanalJson(PyRefMut<'py, CanalJsonDecoder>),
    Craft(PyRefMut<'py, CraftDecoder>),
    OpenProtocol(PyRefMut<'py, OpenProtocolDecoder>),
    Avro(PyRefMut<'py, AvroDecoder>),
    CanalProtobuf(PyRefMut<'py, CanalProtobufDecoder>, Positions), // with its events' positions
    OceanBaseAvro(PyRefMut<'py, OceanBaseAvroDecoder>, Positions),
}

impl<'py> Decoder<'py> {
    fn of(decoder: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(d) = decoder.extract() {
            return Ok(Decoder::CanalJson(d));
        }
        if let Ok(d) = decoder.extract() {
            return Ok(Decoder::Craft(d));
        }
        if let Ok(d) = decoder.extract() {
            return Ok(Decoder::Avro(d));
        }
        if let Ok(d) = decoder.extract() {
            return Ok(Decoder::CanalProtobuf(d, Positions::new()));
        }
        if let Ok(d) = decoder.extract() {
            return Ok(Decoder::OceanBaseAvro(d, Positions::new()));
        }
        Ok(Decoder::OpenProtocol(decoder.extract()?))
    }

    /// The record (its key when it has one) into the builders, as that decoder's `decode` does.
    fn record(&mut self, py: Python<'_>, key: Option<&[u8]>, value: Option<&[u8]>, rec: i32, b: &mut Builders) -> PyResult<R<()>> {
        if let Decoder::Avro(d) = self {
            return d.record(py, key, value, rec, b); // a tombstone is an avro DELETE
        }
        let Some(value) = value else { return Ok(Err(Fallback)) }; // a tombstone: the Python codec names it
        match self {
            Decoder::CanalJson(d) => d.record(py, value, rec, b),
            Decoder::Craft(d) => d.record(py, value, rec, b),
            Decoder::CanalProtobuf(d, pos) => d.record(py, value, rec, b, pos),
            Decoder::OceanBaseAvro(d, pos) => d.record(py, value, rec, b, pos),
            Decoder::OpenProtocol(d) => Ok(match key {
                Some(key) => d.message(py, key, value, rec, b),
                None => Err(Fallback), // no key: the Python codec names it
            }),
            Decoder::Avro(_) => unreachable!(),
        }
    }
}

/// Each event's record coordinates (the source columns of DECODED_ARROW_SCHEMA).
#[derive(Default)]
struct Source {
    topic: StrCol,
    partition: Vec<i32>,
    offset: Vec<i64>,
    timestamp: I64Col,
    line: Vec<i64>,
}

/// Decode the lines of an archive object's decompressed bytes `data` from byte `start`, at
/// most `max_records` non-blank lines; `line_no`: the number of lines before `start`.
/// `plain`: (topic, base, max line) of a TiCDC storage-sink file (each line is a value):
/// partition 0, offset `base | min(line number, max line)`, no timestamp; otherwise the
/// Kafka-record archive.
/// Returns the event buffers (as `decode`), the source columns of every event, `fallback`:
/// (record ordinal, line number, start, end) of each line left to Python, `consumed` (the byte
/// after the last line read), `line_no` (lines counted so far), `records` (non-blank lines),
/// and `last`: (line number, topic, partition, offset) of the last record taken here, or None.
#[pyfunction]
#[pyo3(signature = (decoder, data, start, line_no, max_records, plain=None))]
pub(crate) fn decode_lines<'py>(
    py: Python<'py>,
    decoder: Bound<'py, PyAny>,
    data: Bound<'py, PyAny>,
    start: usize,
    line_no: i64,
    max_records: usize,
    plain: Option<(String, i64, i64)>,
) -> PyResult<Bound<'py, PyDict>> {
    let buf = PyBuffer::<u8>::get(&data)?;
    let bytes = buffer_bytes(&buf);
    if start > bytes.len() {
        return Err(pyo3::exceptions::PyValueError::new_err("start beyond the data"));
    }
    let mut decoder = Decoder::of(&decoder)?;
    let mut b = Builders::new();
    let mut src = Source { topic: StrCol::new(), ..Default::default() };
    let fallback = PyList::empty(py);
    let (mut value, mut key) = (Vec::new(), Vec::new());
    let (mut pos, mut line_no, mut records) = (start, line_no, 0usize);
    let mut last: Option<(i64, String, i32, i64)> = None;
    while pos < bytes.len() && records < max_records {
        let (end, next) = match memchr::memchr(b'\n', &bytes[pos..]) {
            Some(i) => (pos + i, pos + i + 1),
            None => (bytes.len(), bytes.len()),
        };
        line_no += 1;
        let mut stop = end;
        while stop > pos && bytes[stop - 1] == b'\r' {
            stop -= 1;
        }
        let (first, line) = (pos, &bytes[pos..stop]);
        pos = next;
        if blank(line) {
            continue;
        }
        let ordinal = records as i32;
        records += 1;
        let taken = match &plain {
            Some((topic, base, max_line)) => {
                value.clear();
                value.extend_from_slice(line);
                Ok(Taken { topic: Cow::Borrowed(topic.as_str()), partition: 0, offset: base | line_no.min(*max_line), timestamp: None, keyed: false, valued: true })
            }
            None => parse(line, &mut value, &mut key),
        };
        let first_event = b.rec_idx.len();
        let decoded = match taken {
            Ok(t) => {
                let k = t.keyed.then_some(key.as_slice());
                let v = t.valued.then_some(value.as_slice());
                b.attempt(|b| decoder.record(py, k, v, ordinal, b))?.then_some(t)
            }
            Err(Fallback) => None,
        };
        match decoded {
            Some(t) => {
                for _ in first_event..b.rec_idx.len() {
                    src.topic.push_str(Some(&t.topic));
                    src.partition.push(t.partition);
                    src.offset.push(t.offset);
                    src.timestamp.push(t.timestamp);
                    src.line.push(line_no);
                }
                last = Some((line_no, t.topic.into_owned(), t.partition, t.offset));
            }
            None => fallback.append((ordinal, line_no, first, stop))?,
        }
    }
    let d = b.export(py)?;
    if let Decoder::CanalProtobuf(_, pos) | Decoder::OceanBaseAvro(_, pos) = &decoder {
        pos.export(py, &d)?;
    }
    d.set_item("fallback", fallback)?;
    d.set_item("consumed", pos)?;
    d.set_item("line_no", line_no)?;
    d.set_item("records", records)?;
    d.set_item("last", last)?;
    d.set_item("topic", src.topic.export(py))?;
    d.set_item("partition", pyo3::types::PyBytes::new(py, crate::as_bytes(&src.partition)))?;
    d.set_item("offset", pyo3::types::PyBytes::new(py, crate::as_bytes(&src.offset)))?;
    d.set_item("record_timestamp", src.timestamp.export(py))?;
    d.set_item("line", pyo3::types::PyBytes::new(py, crate::as_bytes(&src.line)))?;
    Ok(d)
}

/// The archive lines of records with a value and nothing else (codecs/archive.py
/// `line_former`'s `value_line`, the same bytes), at offsets `first`, `first + 1`, ..., each
/// with its newline, as one buffer: the object writer's usual records without a Python call,
/// a base64 string and a joined line per record (spark_apps/outputs/kafka_records.py
/// `ObjectWriter`). `head` is the line up to the offset (`{"topic":…,"partition":…,"offset":`).
#[pyfunction]
pub(crate) fn value_lines<'py>(
    py: Python<'py>,
    head: &[u8],
    first: i64,
    values: Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyBytes>> {
    const MIDDLE: &[u8] = b",\"timestamp\":null,\"key\":null,\"value\":\"";
    let values: Vec<Bound<'py, PyBytes>> = values.iter().map(|v| v.cast_into::<PyBytes>().map_err(PyErr::from)).collect::<PyResult<_>>()?;
    let size: usize = values.iter().map(|v| head.len() + 21 + MIDDLE.len() + v.as_bytes().len().div_ceil(3) * 4 + 3).sum();
    let mut out = Vec::with_capacity(size);
    for (j, value) in values.iter().enumerate() {
        out.extend_from_slice(head);
        push_int(&mut out, first + j as i64);
        out.extend_from_slice(MIDDLE);
        let value = value.as_bytes();
        let start = out.len();
        out.resize(start + value.len().div_ceil(3) * 4, 0);
        STANDARD.encode_slice(value, &mut out[start..]).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        out.extend_from_slice(b"\"}\n");
    }
    Ok(PyBytes::new(py, &out))
}

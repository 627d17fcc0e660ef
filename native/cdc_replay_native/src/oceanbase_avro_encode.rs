//! The oceanbase-avro encoder: row events of an Arrow batch in, each event's AvroRecord out as
//! Avro binary (with the Confluent header when avro-framing=confluent) but without its first
//! field, the record id, byte for byte what codecs/oceanbase_avro.py `entry` gives for the same
//! event (fastavro's `schemaless_writer` of `_record`). The id (the event's one-value position,
//! else the previous id + 1) is the codec's `frame`, shared by both paths.
//!
//! Avro's binary encoding is written here (zigzag varints, length-prefixed bytes, union branch
//! indexes, arrays and maps as one counted block then 0, as fastavro writes them): apache-avro
//! would need a `Value` tree per record for the same bytes. Each ColumnValue member is chosen as
//! `_carry` chooses it (the structured member when it renders back to the canonical value and
//! label, else an EnumSetValue of the label, else string / bytes), from the column's type rule
//! (`_encode_rule`, asked once per (mysql_type, flags)).
//!
//! Declined (None: the Python codec encodes the event, or raises): DDL and watermarks, ops
//! other than insert / update / delete, a missing image or images of different columns, a key
//! column not in the image, text that is not UTF-8 where the record holds a string, extras
//! `oceanbase.*` that are null or that Python's `int()` / orjson might read otherwise or the
//! schema does not hold (version, total, index, schemaId, dataTypeNumbers, txind, sourceType,
//! ukIndexes, tags), a FLOAT / DOUBLE whose shortest text is a tie, a DECIMAL value that is
//! not plain `-digits.digits` text, DECIMAL parameters beyond an Avro int, a TIMESTAMP value
//! in a time zone with rules (not a fixed offset), a SET of more than 64 labels.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::encode_common::{plain_int, Col, Events, AFTER, BEFORE};
use crate::open_protocol_encode::tie;

// column kinds (codecs/oceanbase_avro.py `_ENCODE_KINDS`, same order)
#[allow(dead_code)] // no structured member: the string / bytes fallback
const K_TEXT: u8 = 0;
const K_BYTES: u8 = 1;
const K_GEOMETRY: u8 = 2;
const K_INT: u8 = 3;
const K_BIGINT: u8 = 4;
const K_FLOAT: u8 = 5;
const K_DOUBLE: u8 = 6;
const K_DECIMAL: u8 = 7;
const K_BIT: u8 = 8;
const K_DATE: u8 = 9;
const K_TIME: u8 = 10;
const K_DATETIME: u8 = 11;
const K_TIMESTAMP: u8 = 12;
const K_ENUM: u8 = 13;
const K_SET: u8 = 14;
const K_DECLINE: u8 = 15;

// ColumnValue.value union branches (the schema's order)
const U_NULL: i64 = 0;
const U_INT: i64 = 2;
const U_LONG: i64 = 3;
const U_FLOAT: i64 = 4;
const U_DOUBLE: i64 = 5;
const U_BYTES: i64 = 6;
const U_STRING: i64 = 7;
const U_DECIMAL: i64 = 9;
const U_DATE: i64 = 10;
const U_TIME: i64 = 11;
const U_DATETIME: i64 = 12;
const U_TIMESTAMP: i64 = 13;
const U_BIT: i64 = 14;
const U_ENUMSET: i64 = 15;
const U_GEOMETRY: i64 = 16;

const I32: std::ops::RangeInclusive<i128> = i32::MIN as i128..=i32::MAX as i128;
const I64: std::ops::RangeInclusive<i128> = i64::MIN as i128..=i64::MAX as i128;

/// What a column's (mysql_type, flags) imply, from the Python rule once per pair.
struct Rule {
    info: i64, // DataType symbol index
    code: i64, // dataTypeNumber
    kind: u8,
    p1: i64, // DECIMAL precision, BIT length
    p2: i64, // DECIMAL scale
    labels: Option<Vec<String>>,
}

#[pyclass]
pub(crate) struct OceanBaseAvroEncoder {
    rule_fn: Py<PyAny>,
    rules: Vec<Rule>,
    by_type: HashMap<(Option<Vec<u8>>, i32), Option<usize>>,
    confluent: bool,
    schema_id: i64,
    ms_per_unit: i64,
    zone: Vec<u8>,
    offset: Option<i64>,
}

// ---------------------------------------------------------------- Avro binary

fn long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn bytes(out: &mut Vec<u8>, data: &[u8]) {
    long(out, data.len() as i64);
    out.extend_from_slice(data);
}

/// A string: None when the text is not UTF-8 (fastavro would not write it as such).
fn string(out: &mut Vec<u8>, text: &[u8]) -> Option<()> {
    std::str::from_utf8(text).ok()?;
    bytes(out, text);
    Some(())
}

/// A `["null", "string"]` union.
fn opt_string(out: &mut Vec<u8>, text: Option<&[u8]>) -> Option<()> {
    match text {
        None => long(out, 0),
        Some(t) => {
            long(out, 1);
            string(out, t)?;
        }
    }
    Some(())
}

/// An array's items as fastavro writes them: one block of `n` items (none when empty), then 0.
fn array<T>(out: &mut Vec<u8>, items: &[T], mut item: impl FnMut(&mut Vec<u8>, &T) -> Option<()>) -> Option<()> {
    if !items.is_empty() {
        long(out, items.len() as i64);
        for x in items {
            item(out, x)?;
        }
    }
    long(out, 0);
    Some(())
}

// ---------------------------------------------------------------- value texts

fn digits(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(u8::is_ascii_digit)
}

/// `str(int(text)) == text`: `0` or `-`? then digits without a leading zero.
fn canonical_int(raw: &[u8]) -> Option<i128> {
    let body = raw.strip_prefix(b"-").unwrap_or(raw);
    if !digits(body) || (body[0] == b'0' && (body.len() > 1 || body.len() < raw.len())) {
        return None;
    }
    plain_int(raw, 38)
}

/// `-digits` or `-digits.digits` (the form numpy's positional float text takes): the number of
/// fraction digits, or None.
fn plain_decimal(raw: &[u8]) -> Option<usize> {
    let body = raw.strip_prefix(b"-").unwrap_or(raw);
    match body.iter().position(|&b| b == b'.') {
        None => digits(body).then_some(0),
        Some(at) => (digits(&body[..at]) && digits(&body[at + 1..])).then_some(body.len() - at - 1),
    }
}

fn number(s: &[u8]) -> i64 {
    s.iter().fold(0i64, |n, &b| n * 10 + (b - b'0') as i64)
}

/// `_fraction(nanos)`: nothing, 6 or 9 digits.
fn fraction(out: &mut String, nanos: i64) {
    use std::fmt::Write;
    if nanos == 0 {
    } else if nanos % 1000 == 0 {
        write!(out, ".{:06}", nanos / 1000).unwrap();
    } else {
        write!(out, ".{nanos:09}").unwrap();
    }
}

/// `.digits` (1 to 9) at the end of a time as `_nanos` reads it, and the text before it.
fn split_fraction(raw: &[u8]) -> Option<(&[u8], i64)> {
    match raw.iter().position(|&b| b == b'.') {
        None => Some((raw, 0)),
        Some(at) => {
            let f = &raw[at + 1..];
            if !digits(f) || f.len() > 9 {
                return None;
            }
            Some((&raw[..at], number(f) * 10i64.pow(9 - f.len() as u32)))
        }
    }
}

/// `_DATETIME`'s groups: year, month, day, hours, minutes, seconds, nanos (ASCII digits only:
/// other digits render back as ASCII, so they never match).
fn datetime_parts(raw: &[u8]) -> Option<[i64; 7]> {
    let (main, nanos) = split_fraction(raw)?;
    if main.len() != 19 || main[4] != b'-' || main[7] != b'-' || main[10] != b' ' || main[13] != b':' || main[16] != b':' {
        return None;
    }
    let p = |a: usize, b: usize| digits(&main[a..b]).then(|| number(&main[a..b]));
    Some([p(0, 4)?, p(5, 7)?, p(8, 10)?, p(11, 13)?, p(14, 16)?, p(17, 19)?, nanos])
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

/// Days from 1970-01-01 to a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn date_text(y: i64, m: i64, d: i64) -> Option<String> {
    ((0..=9999).contains(&y) && (0..=12).contains(&m) && (0..=31).contains(&d)).then(|| format!("{y:04}-{m:02}-{d:02}"))
}

fn time_text(negative: bool, h: i64, m: i64, s: i64, nanos: i64, max_hours: i64) -> Option<String> {
    if !((0..=max_hours).contains(&h) && (0..60).contains(&m) && (0..60).contains(&s)) {
        return None;
    }
    let mut text = format!("{}{h:02}:{m:02}:{s:02}", if negative { "-" } else { "" });
    fraction(&mut text, nanos);
    Some(text)
}

/// numpy's `format_float_positional(unique=True, trim="-")` of a finite float, as Rust's
/// shortest text; None where the two may differ (a tie between two shortest texts).
fn float_text(value: f64, single: bool) -> Option<String> {
    let text = if single { format!("{}", value as f32) } else { format!("{value}") };
    (!tie(value, &text)).then_some(text)
}

/// ENUM / SET `enum_set_label` of a canonical number, then `enum_set_value` of that label:
/// (label, the number's text it gives back), None where either refuses.
fn enum_set_roundtrip(set: bool, labels: &[String], n: u64) -> Option<(String, String)> {
    let name = if !set {
        if n == 0 {
            String::new()
        } else {
            labels.get(n as usize - 1).filter(|_| n <= labels.len() as u64)?.clone()
        }
    } else {
        if labels.len() < 64 && n >> labels.len() != 0 {
            return None;
        }
        labels.iter().enumerate().filter(|(bit, _)| n >> bit & 1 == 1).map(|(_, l)| l.as_str()).collect::<Vec<_>>().join(",")
    };
    let first = |part: &str| labels.iter().position(|l| l == part);
    let back = if name.is_empty() {
        0u64
    } else if !set {
        first(&name)? as u64 + 1
    } else {
        let mut mask = 0u64;
        for part in name.split(',') {
            mask |= 1u64 << first(part)?;
        }
        mask
    };
    Some((name, back.to_string()))
}

impl OceanBaseAvroEncoder {
    fn rule(&mut self, py: Python<'_>, type_text: Option<&[u8]>, flags: i32) -> PyResult<Option<usize>> {
        let key = (type_text.map(<[u8]>::to_vec), flags);
        if let Some(rule) = self.by_type.get(&key) {
            return Ok(*rule);
        }
        let rule = match type_text.map(std::str::from_utf8).transpose() {
            Err(_) => None,
            Ok(text) => {
                let out: Option<(i64, i64, u8, i64, i64, Option<Vec<String>>)> =
                    self.rule_fn.bind(py).call1((text, flags))?.extract()?;
                out.map(|(info, code, kind, p1, p2, labels)| {
                    self.rules.push(Rule { info, code, kind, p1, p2, labels });
                    self.rules.len() - 1
                })
            }
        };
        self.by_type.insert(key, rule);
        Ok(rule)
    }

    /// The structured member `_carry` picks for a non-NULL value without a label (and ENUM /
    /// SET values with one), when it renders back to the value: written, Some(true); Some(false):
    /// none does; None: Python decides.
    fn structured(&self, out: &mut Vec<u8>, rule: &Rule, raw: &[u8], label: Option<&[u8]>) -> Option<bool> {
        let plain = label.is_none();
        match rule.kind {
            K_BYTES if plain => {
                long(out, U_BYTES);
                bytes(out, raw);
            }
            K_GEOMETRY if plain && raw.len() >= 4 => {
                long(out, U_GEOMETRY);
                long(out, i32::from_le_bytes(raw[..4].try_into().unwrap()) as i64);
                bytes(out, &raw[4..]);
            }
            K_INT | K_BIGINT if plain => {
                let Some(n) = canonical_int(raw) else { return Some(false) };
                if rule.kind == K_INT && I32.contains(&n) {
                    long(out, U_INT);
                } else if I64.contains(&n) {
                    long(out, U_LONG);
                } else {
                    return Some(false);
                }
                long(out, n as i64);
            }
            K_FLOAT | K_DOUBLE if plain => {
                if plain_decimal(raw).is_none() {
                    return Some(false);
                }
                let value: f64 = std::str::from_utf8(raw).ok()?.parse().ok()?;
                let single = rule.kind == K_FLOAT;
                let value = if single { value as f32 as f64 } else { value };
                if !value.is_finite() {
                    return Some(false);
                }
                if float_text(value, single)?.as_bytes() != raw {
                    return Some(false);
                }
                if single {
                    long(out, U_FLOAT);
                    out.extend_from_slice(&(value as f32).to_le_bytes());
                } else {
                    long(out, U_DOUBLE);
                    out.extend_from_slice(&value.to_le_bytes());
                }
            }
            K_DECIMAL if plain => {
                let fraction = plain_decimal(raw)?; // other text: decimal.Decimal decides
                if (fraction as i64) < rule.p2 {
                    return Some(false); // `_decimal_text` adds zeros: not the value
                }
                long(out, U_DECIMAL);
                long(out, rule.p1);
                long(out, rule.p2);
                bytes(out, raw);
            }
            K_BIT if plain => {
                if !digits(raw) || (raw[0] == b'0' && raw.len() > 1) || raw.len() > 20 || !(1..=64).contains(&rule.p1) {
                    return Some(false);
                }
                let n: u128 = std::str::from_utf8(raw).ok()?.parse().ok()?;
                if n >> rule.p1 != 0 {
                    return Some(false);
                }
                long(out, U_BIT);
                long(out, rule.p1);
                bytes(out, raw);
            }
            K_DATE if plain => {
                if raw.len() != 10 || raw[4] != b'-' || raw[7] != b'-' {
                    return Some(false);
                }
                let p = |a: usize, b: usize| digits(&raw[a..b]).then(|| number(&raw[a..b]));
                let (Some(y), Some(m), Some(d)) = (p(0, 4), p(5, 7), p(8, 10)) else { return Some(false) };
                if date_text(y, m, d).is_none() {
                    return Some(false);
                }
                long(out, U_DATE);
                for v in [y, m, d] {
                    long(out, v);
                }
            }
            K_TIME if plain => {
                let (negative, body) = match raw.strip_prefix(b"-") {
                    Some(rest) => (true, rest),
                    None => (false, raw),
                };
                let Some((main, nanos)) = split_fraction(body) else { return Some(false) };
                let parts: Vec<&[u8]> = main.split(|&b| b == b':').collect();
                if parts.len() != 3 || parts[0].len() < 2 || parts[0].len() > 6 || parts[1].len() != 2 || parts[2].len() != 2
                    || !parts.iter().all(|p| digits(p))
                {
                    return Some(false);
                }
                let (h, m, s) = (number(parts[0]), number(parts[1]), number(parts[2]));
                if time_text(negative, h, m, s, nanos, 838).is_none_or(|t| t.as_bytes() != raw) {
                    return Some(false);
                }
                long(out, U_TIME);
                out.push(negative as u8);
                for v in [h, m, s, nanos] {
                    long(out, v);
                }
            }
            K_DATETIME | K_TIMESTAMP if plain => {
                let Some([y, mo, d, h, mi, s, nanos]) = datetime_parts(raw) else { return Some(false) };
                let text = match (date_text(y, mo, d), time_text(false, h, mi, s, nanos, 23)) {
                    (Some(date), Some(time)) => date + " " + &time,
                    _ => return Some(false),
                };
                if rule.kind == K_DATETIME {
                    if text.as_bytes() != raw {
                        return Some(false);
                    }
                    long(out, U_DATETIME);
                    for v in [y, mo, d, h, mi, s, nanos] {
                        long(out, v);
                    }
                    return Some(true);
                }
                // a Python datetime in the codec's zone, and back from its epoch seconds
                let days_in = [31, if is_leap(y) { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
                if !(1..=9999).contains(&y) || !(1..=12).contains(&mo) || d < 1 || d > days_in[mo as usize - 1] {
                    return Some(false);
                }
                let offset = self.offset?; // a zone with rules: Python
                let seconds = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s - offset;
                let (low, high) = (days_from_civil(1, 1, 1) * 86400, days_from_civil(9999, 12, 31) * 86400 + 86399);
                if !(low..=high).contains(&seconds) {
                    return Some(false);
                }
                if text.as_bytes() != raw {
                    return Some(false); // (a fixed offset gives back the same local time)
                }
                long(out, U_TIMESTAMP);
                long(out, seconds);
                long(out, nanos);
                long(out, 1);
                bytes(out, &self.zone);
            }
            K_ENUM | K_SET => match &rule.labels {
                Some(labels) => {
                    let Some(n) = canonical_int(raw).filter(|n| *n >= 0 && *n <= u64::MAX as i128) else { return Some(false) };
                    if rule.kind == K_SET && labels.len() > 64 {
                        return None;
                    }
                    let Some((name, back)) = enum_set_roundtrip(rule.kind == K_SET, labels, n as u64) else { return Some(false) };
                    if back.as_bytes() != raw || label != Some(name.as_bytes()) {
                        return Some(false);
                    }
                    long(out, U_ENUMSET);
                    bytes(out, name.as_bytes());
                    long(out, 1);
                    array(out, labels, |out, l| {
                        bytes(out, l.as_bytes());
                        Some(())
                    })?;
                }
                None if plain => {
                    let Some(n) = canonical_int(raw) else { return Some(false) };
                    if I32.contains(&n) {
                        long(out, U_INT);
                    } else if I64.contains(&n) {
                        long(out, U_LONG);
                    } else {
                        return Some(false);
                    }
                    long(out, n as i64);
                }
                None => return Some(false), // the label: below
            },
            K_DECLINE => return None,
            _ => return Some(false),
        }
        Some(true)
    }

    /// One ColumnValue (`_carry`); None: Python encodes the event.
    fn column_value(&mut self, py: Python<'_>, out: &mut Vec<u8>, col: &Col<'_>) -> PyResult<Option<()>> {
        let Some(at) = self.rule(py, col.mysql_type, col.flags)? else { return Ok(None) };
        let rule = &self.rules[at];
        long(out, rule.info);
        let Some(raw) = col.value else {
            long(out, U_NULL);
            return Ok(Some(()));
        };
        match self.structured(out, rule, raw, col.label) {
            None => return Ok(None),
            Some(true) => return Ok(Some(())),
            Some(false) => {}
        }
        if let Some(label) = col.label {
            if label == raw {
                long(out, U_ENUMSET);
                if string(out, label).is_none() {
                    return Ok(None);
                }
                long(out, 0);
                return Ok(Some(()));
            }
        }
        if matches!(rule.kind, K_BYTES | K_GEOMETRY | K_ENUM | K_SET) || std::str::from_utf8(raw).is_err() {
            long(out, U_BYTES);
        } else {
            long(out, U_STRING);
        }
        bytes(out, raw);
        Ok(Some(()))
    }

    fn image(&mut self, py: Python<'_>, out: &mut Vec<u8>, cols: &[Col<'_>]) -> PyResult<Option<()>> {
        long(out, 1);
        long(out, cols.len() as i64);
        for c in cols {
            if self.column_value(py, out, c)?.is_none() {
                return Ok(None);
            }
        }
        long(out, 0);
        Ok(Some(()))
    }

    /// (the event's one-value position, the record without its id) of row event `e`; None:
    /// Python encodes it.
    fn event(&mut self, py: Python<'_>, ev: &Events, e: usize) -> PyResult<Option<(Option<i64>, Vec<u8>)>> {
        if ev.kind.get(e)? != Some(b"row") {
            return Ok(None);
        }
        let op: i64 = match ev.op.get(e)? {
            Some(b"insert") => 0,
            Some(b"update") => 1,
            Some(b"delete") => 2,
            _ => return Ok(None),
        };
        let [version, txind, position, source_type, source_version, uk, tags, total, index, kept, schema_id] = ev.extras_found(e, [
            b"oceanbase.version", b"oceanbase.txind", b"oceanbase.position", b"oceanbase.sourceType",
            b"oceanbase.sourceVersion", b"oceanbase.ukIndexes", b"oceanbase.tags", b"oceanbase.total",
            b"oceanbase.index", b"oceanbase.dataTypeNumbers", b"oceanbase.schemaId",
        ])?;
        // an int() of an extra, else its default; None: Python decides (or raises)
        let int = |found: Option<Option<&[u8]>>, default: i128, range: std::ops::RangeInclusive<i128>| match found {
            None => Some(default),
            Some(Some(text)) => plain_int(text, 38).filter(|n| range.contains(n)),
            Some(None) => None,
        };
        let mut out = Vec::with_capacity(512);
        if self.confluent {
            let Some(id) = int(schema_id, self.schema_id as i128, 0..=u32::MAX as i128) else { return Ok(None) };
            out.push(0);
            out.extend_from_slice(&(id as u32).to_be_bytes());
        }
        let (Some(version), Some(total), Some(index)) = (int(version, 1, I32), int(total, -1, I64), int(index, -1, I64)) else {
            return Ok(None);
        };
        long(&mut out, 0);
        long(&mut out, version as i64);
        long(&mut out, 1);
        long(&mut out, op);
        if opt_string(&mut out, ev.tx_id.get(e)?).is_none() {
            return Ok(None);
        }
        match txind.flatten() {
            None => long(&mut out, 0),
            Some(t) => {
                let Some(i) = [&b"B"[..], b"M", b"E", b"W"].iter().position(|s| *s == t) else { return Ok(None) };
                long(&mut out, 1);
                long(&mut out, i as i64);
            }
        }
        if opt_string(&mut out, position.flatten()).is_none() {
            return Ok(None);
        }
        let ms = match ev.execute_ts_ms(e)? {
            Some(ms) => Some(ms),
            None => ev.commit_ts(e)?.map(|ts| ts >> 18),
        };
        match ms {
            None => long(&mut out, 0),
            Some(ms) => {
                long(&mut out, 1);
                long(&mut out, ms.div_euclid(self.ms_per_unit));
            }
        }
        match source_type {
            None => long(&mut out, 0),
            Some(None) => return Ok(None),
            Some(Some(t)) => {
                let Some(i) = [&b"OB_MYSQL"[..], b"OB_ORACLE"].iter().position(|s| *s == t) else { return Ok(None) };
                let version = match source_version {
                    None => &b""[..],
                    Some(Some(v)) => v,
                    Some(None) => return Ok(None),
                };
                long(&mut out, 1);
                long(&mut out, i as i64);
                if string(&mut out, version).is_none() {
                    return Ok(None);
                }
            }
        }
        for text in [ev.database.get(e)?, ev.table.get(e)?] {
            if opt_string(&mut out, text).is_none() {
                return Ok(None);
            }
        }

        let before = ev.columns(BEFORE, e)?;
        let after = ev.columns(AFTER, e)?;
        let (Some(before), Some(after)) = (
            if op != 0 { before.filter(|c| !c.is_empty()).map(Some) } else { Some(None) },
            if op != 2 { after.filter(|c| !c.is_empty()).map(Some) } else { Some(None) },
        ) else {
            return Ok(None); // "without the before / after image": Python says so
        };
        let image = if op != 2 { after.as_deref().unwrap() } else { before.as_deref().unwrap() };
        if op == 1 && !before.as_deref().unwrap().iter().map(|c| c.name).eq(image.iter().map(|c| c.name)) {
            return Ok(None);
        }
        let mut codes = Vec::with_capacity(image.len());
        for c in image {
            let Some(at) = self.rule(py, c.mysql_type, c.flags)? else { return Ok(None) };
            codes.push(self.rules[at].code as i128);
        }
        if let Some(text) = kept.flatten().filter(|t| !t.is_empty()) {
            let Some(parsed) = text.split(|&b| b == b',').map(|p| plain_int(p, 38)).collect::<Option<Vec<_>>>() else {
                return Ok(None);
            };
            if parsed.len() == codes.len() {
                codes = parsed;
            }
        }
        if codes.iter().any(|c| !I32.contains(c)) {
            return Ok(None);
        }
        long(&mut out, 1);
        let fields: Vec<(&[u8], i128)> = image.iter().map(|c| c.name).zip(codes).collect();
        if array(&mut out, &fields, |out, (name, code)| {
            string(out, name)?;
            long(out, *code as i64);
            Some(())
        })
        .is_none()
        {
            return Ok(None);
        }
        let mut pk = Vec::new();
        for key in ev.keys(e)?.unwrap_or_default() {
            let Some(i) = image.iter().position(|c| c.name == key) else { return Ok(None) };
            pk.push(i as i64);
        }
        if pk.is_empty() {
            long(&mut out, 0);
        } else {
            long(&mut out, 1);
            array(&mut out, &pk, |out, i| {
                long(out, *i);
                Some(())
            });
        }
        match uk {
            None => long(&mut out, 0),
            Some(None) => return Ok(None),
            Some(Some(text)) => {
                let Ok(lists) = serde_json::from_slice::<Vec<Vec<serde_json::Value>>>(text) else { return Ok(None) };
                long(&mut out, 1);
                let ok = array(&mut out, &lists, |out, list| {
                    array(out, list, |out, v| {
                        let n = v.as_i64().filter(|n| I32.contains(&(*n as i128)))?;
                        long(out, n);
                        Some(())
                    })
                });
                if ok.is_none() {
                    return Ok(None);
                }
            }
        }
        for (side, cols) in [(0, &before), (2, &after)] {
            match cols {
                Some(cols) if op != side => {
                    if self.image(py, &mut out, cols)?.is_none() {
                        return Ok(None);
                    }
                }
                _ => long(&mut out, 0),
            }
        }
        long(&mut out, 0); // sql
        match tags {
            None => long(&mut out, 0),
            Some(None) => return Ok(None),
            Some(Some(text)) => {
                let Ok(map) = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(text) else { return Ok(None) };
                long(&mut out, 1);
                let pairs: Vec<_> = map.iter().collect();
                let ok = array(&mut out, &pairs, |out, (k, v)| {
                    bytes(out, k.as_bytes());
                    bytes(out, v.as_str()?.as_bytes());
                    Some(())
                });
                if ok.is_none() {
                    return Ok(None);
                }
            }
        }
        long(&mut out, total as i64);
        long(&mut out, index as i64);
        long(&mut out, 0); // beforeImageBytes
        long(&mut out, 0); // afterImageBytes
        let id = ev.position(e)?.filter(|p| p.len() == 1).map(|p| p[0]);
        Ok(Some((id, out)))
    }
}

#[pymethods]
impl OceanBaseAvroEncoder {
    /// `rule(type_text, flags) -> (DataType index, dataTypeNumber, kind, p1, p2, labels) or None`
    /// (codecs/oceanbase_avro.py `_encode_rule`); `confluent`: the 5-byte header with
    /// `schema_id` (unless the event keeps its own); `ms_per_unit`: timestamp-unit;
    /// `zone`: the time-zone option as written, `offset`: its fixed offset in seconds (None: a
    /// zone with rules, whose TIMESTAMP values Python encodes).
    #[new]
    fn new(rule: Py<PyAny>, confluent: bool, schema_id: i64, ms_per_unit: i64, zone: String, offset: Option<i64>) -> Self {
        OceanBaseAvroEncoder {
            rule_fn: rule, rules: Vec::new(), by_type: HashMap::new(), confluent, schema_id,
            ms_per_unit: ms_per_unit.max(1), zone: zone.into_bytes(), offset,
        }
    }

    /// Encode `n` events given as Arrow buffers (spark_apps/native_encode.py `_arrays`): per
    /// event (its one-value position or None, the message without the record id), or None for
    /// an event Python must encode.
    fn encode<'py>(&mut self, py: Python<'py>, n: usize, cols: Bound<'py, PyDict>) -> PyResult<Bound<'py, PyList>> {
        let events = Events::new(&cols)?;
        let out = PyList::empty(py);
        for e in 0..n {
            match self.event(py, &events, e)? {
                Some((id, data)) => out.append((id, PyBytes::new(py, &data)))?,
                None => out.append(py.None())?,
            }
        }
        Ok(out)
    }
}

//! The TiCDC Avro encoder: row events of an Arrow batch in, per event the Avro binary of its key
//! record and value record out (without the Confluent header), byte for byte what
//! codecs/avro.py `_record` has fastavro write for the same event.
//!
//! The schemas stay Python: per record shape (topic, key or value, namespace, database, table,
//! per column name / type / flags / nullable, extension fields, schema-id hint) the codec is asked
//! once (`plan(...)`) for an opaque token and the per-column value rules; the codec turns the
//! token into the schema id (registering the schema) when its `frame` writes the message, in
//! stream order, so the registry sees the same registrations in the same order on both paths.
//! Avro's binary encoding is written here (zigzag varints, lengths, union indexes, IEEE floats):
//! apache-avro writes from a `Value` tree per row (an allocation per value and a schema walk) and
//! keeps its varint helpers private.
//!
//! The Python encoder is the reference: every event this one is not sure about comes back as None
//! and the codec encodes it (DDL, watermarks, an unknown op, a missing image, database or table,
//! key columns missing from the image, a shape the codec refuses or whose schema is not valid
//! Avro, an extras key present with a null value, a non-ASCII schema-id hint, integers or BIT
//! values out of range or not plain decimal, float text Python's `float()` might read otherwise,
//! DECIMAL text that is not plain `-digits.digits`, longer than 100 characters or with more
//! fraction digits than the column's scale, ENUM/SET values the codec's label function refuses,
//! a checksum version that is not a plain int64).

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::encode_common::{plain_float, plain_int, Col, Events, AFTER, BEFORE};
use crate::{BinaryArg, BinaryArray};

// value rules (codecs/avro.py `_COMPILED_KINDS`)
const K_RAW: u8 = 0;
const K_INT32: u8 = 1;
const K_INT64: u8 = 2;
const K_U64: u8 = 3;
const K_FLOAT: u8 = 4;
const K_DOUBLE: u8 = 5;
const K_BIT: u8 = 6;
const K_DECIMAL: u8 = 7;
const K_CALL: u8 = 8;

/// The extras the encoder reads (codecs/avro.py `_encode_row`, `_plan`).
const EXTRAS: [&[u8]; 6] = [b"avro.namespace", b"avro.key_schema_id", b"avro.value_schema_id",
                            b"avro.row_level_checksum", b"avro.corrupted", b"avro.checksum_version"];

/// How one column's value is written.
struct Field {
    kind: u8,
    scale: usize,
    nullable: bool,
    call: Option<Py<PyAny>>,
    known: HashMap<Vec<u8>, Option<Vec<u8>>>, // K_CALL: the function's answer per value
}

/// One record shape: the codec's token (turned into the schema id by its `frame`) and its fields.
struct Plan {
    token: Py<PyAny>,
    fields: Vec<Field>,
}

#[pyclass]
pub(crate) struct AvroEncoder {
    plan_fn: Py<PyAny>,
    shape_mask: i32,
    nullable: i32,
    handle_key: i32,
    extension: bool,
    index: HashMap<Vec<u8>, Option<usize>>,
    plans: Vec<Plan>,
    scratch: Vec<u8>,
}

/// The events' output topics: one for the whole call or one per event.
enum Topics {
    One(Vec<u8>),
    Each(BinaryArray),
}

impl Topics {
    fn get(&self, e: usize) -> PyResult<Option<&[u8]>> {
        match self {
            Topics::One(t) => Ok(Some(t)),
            Topics::Each(a) => a.get(e),
        }
    }
}

pub(crate) fn zigzag(out: &mut Vec<u8>, n: i64) {
    let mut u = ((n << 1) ^ (n >> 63)) as u64;
    while u >= 0x80 {
        out.push((u as u8) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

fn avro_bytes(out: &mut Vec<u8>, b: &[u8]) {
    zigzag(out, b.len() as i64);
    out.extend_from_slice(b);
}

fn part(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
    }
}

/// Big-endian bytes of a decimal digit string's value (no leading zero bytes; empty for 0).
fn magnitude(digits: &[u8]) -> Vec<u8> {
    let mut limbs: Vec<u32> = Vec::new(); // little-endian base 2^32
    for chunk in digits.chunks(9) {
        let (mut carry, mul) = (0u64, 10u64.pow(chunk.len() as u32));
        carry += chunk.iter().fold(0u64, |a, d| a * 10 + (d - b'0') as u64);
        for limb in limbs.iter_mut() {
            let v = *limb as u64 * mul + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            limbs.push(carry as u32);
        }
    }
    let mut out: Vec<u8> = limbs.iter().rev().flat_map(|l| l.to_be_bytes()).collect();
    let zeros = out.iter().take_while(|&&b| b == 0).count();
    out.drain(..zeros);
    out
}

fn bit_length(be: &[u8]) -> usize {
    match be.first() {
        None => 0,
        Some(&b) => 8 * (be.len() - 1) + (8 - b.leading_zeros() as usize),
    }
}

/// codecs/avro.py `signed_bytes(decimal_unscaled(text, scale))`; None: Python decides.
fn decimal_bytes(raw: &[u8], scale: usize) -> Option<Vec<u8>> {
    if raw.len() > 100 || scale > 100 {
        return None;
    }
    let (negative, body) = match raw.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, raw),
    };
    let (whole, fraction) = match body.iter().position(|&b| b == b'.') {
        Some(at) => (&body[..at], &body[at + 1..]),
        None => (body, &b""[..]),
    };
    let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    if whole.is_empty() || !digits(whole) || !digits(fraction) || (body.contains(&b'.') && fraction.is_empty()) {
        return None;
    }
    // Decimal.adjusted() must stay within ±100 (the codec refuses the rest)
    let coefficient: Vec<u8> = whole.iter().chain(fraction).copied().collect();
    let significant = coefficient.iter().skip_while(|&&d| d == b'0').count().max(1);
    let adjusted = significant as i64 - 1 - fraction.len() as i64;
    if adjusted.abs() > 100 {
        return None;
    }
    if fraction.len() > scale && fraction[scale..].iter().any(|&d| d != b'0') {
        return None; // more fraction digits than the scale: the codec's error
    }
    let mut unscaled: Vec<u8> = whole.to_vec();
    unscaled.extend_from_slice(&fraction[..fraction.len().min(scale)]);
    unscaled.resize(unscaled.len() + scale.saturating_sub(fraction.len()), b'0');
    let m = magnitude(&unscaled);
    if !negative || m.is_empty() {
        let mut out = vec![0u8; (bit_length(&m) + 8) / 8 - m.len()];
        out.extend_from_slice(&m);
        return Some(out);
    }
    // -m in two's complement: !(m - 1) over (bit_length(m - 1) + 8) / 8 bytes
    let mut less = m;
    for b in less.iter_mut().rev() {
        let (v, borrow) = b.overflowing_sub(1);
        *b = v;
        if !borrow {
            break;
        }
    }
    let zeros = less.iter().take_while(|&&b| b == 0).count();
    less.drain(..zeros);
    let mut out = vec![0u8; (bit_length(&less) + 8) / 8 - less.len()];
    out.extend_from_slice(&less);
    Some(out.iter().map(|b| !b).collect())
}

impl AvroEncoder {
    /// The plan of one record, asked of the codec once per shape; None: Python encodes.
    #[allow(clippy::too_many_arguments)]
    fn plan(&mut self, py: Python<'_>, topic: &[u8], side: &str, namespace: Option<&[u8]>, database: &[u8],
            table: &[u8], cols: &[&Col<'_>], extension: &[&str], hint: Option<&[u8]>) -> PyResult<Option<usize>> {
        let mut key = std::mem::take(&mut self.scratch);
        key.clear();
        for b in [Some(topic), Some(side.as_bytes()), namespace, Some(database), Some(table), hint] {
            part(&mut key, b);
        }
        key.push(extension.len() as u8);
        for c in cols {
            part(&mut key, Some(c.name));
            part(&mut key, c.mysql_type);
            key.extend_from_slice(&(c.flags & self.shape_mask).to_le_bytes());
            key.push((c.flags & self.nullable != 0 || c.value.is_none()) as u8);
        }
        if let Some(found) = self.index.get(&key[..]) {
            let found = *found;
            self.scratch = key;
            return Ok(found);
        }
        let found = self.ask(py, topic, side, namespace, database, table, cols, extension, hint)?;
        self.index.insert(key.clone(), found);
        self.scratch = key;
        Ok(found)
    }

    #[allow(clippy::too_many_arguments)]
    fn ask(&mut self, py: Python<'_>, topic: &[u8], side: &str, namespace: Option<&[u8]>, database: &[u8],
           table: &[u8], cols: &[&Col<'_>], extension: &[&str], hint: Option<&[u8]>) -> PyResult<Option<usize>> {
        let text = |b: &[u8]| std::str::from_utf8(b).ok().map(|s| PyString::new(py, s));
        let (Some(topic), Some(database), Some(table)) = (text(topic), text(database), text(table)) else {
            return Ok(None);
        };
        let namespace = match namespace.map(text) {
            Some(None) => return Ok(None),
            other => other.flatten(),
        };
        let hint = match hint.map(text) {
            Some(None) => return Ok(None),
            other => other.flatten(),
        };
        let mut shape = Vec::with_capacity(cols.len());
        for c in cols {
            let Some(name) = text(c.name) else { return Ok(None) };
            let mysql_type = match c.mysql_type.map(text) {
                Some(None) => return Ok(None),
                other => other.flatten(),
            };
            let nullable = c.flags & self.nullable != 0 || c.value.is_none();
            shape.push((name, mysql_type, c.flags & self.shape_mask, nullable).into_pyobject(py)?.into_any());
        }
        let args = (topic, side, namespace, database, table, PyTuple::new(py, shape)?, PyTuple::new(py, extension.iter().copied())?, hint);
        let answer = self.plan_fn.bind(py).call1(args)?;
        if answer.is_none() {
            return Ok(None);
        }
        let (token, rules): (Py<PyAny>, Vec<(u8, Py<PyAny>)>) = answer.extract()?;
        if rules.len() != cols.len() {
            return Err(pyo3::exceptions::PyValueError::new_err("the plan has not one rule per column"));
        }
        let mut fields = Vec::with_capacity(rules.len());
        for ((kind, arg), c) in rules.into_iter().zip(cols) {
            let scale = if kind == K_DECIMAL { arg.bind(py).extract::<usize>()? } else { 0 };
            let call = (kind == K_CALL).then_some(arg);
            fields.push(Field { kind, scale, nullable: c.flags & self.nullable != 0 || c.value.is_none(), call, known: HashMap::new() });
        }
        self.plans.push(Plan { token, fields });
        Ok(Some(self.plans.len() - 1))
    }

    /// The Avro binary of the columns of plan `p`; false: Python decides.
    fn write(&mut self, py: Python<'_>, p: usize, cols: &[&Col<'_>], out: &mut Vec<u8>) -> PyResult<bool> {
        for (field, c) in self.plans[p].fields.iter_mut().zip(cols) {
            if field.nullable {
                match c.value {
                    None => {
                        out.push(0);
                        continue;
                    }
                    Some(_) => out.push(2),
                }
            }
            let Some(raw) = c.value else { return Ok(false) };
            let ok = match field.kind {
                K_RAW => {
                    avro_bytes(out, raw);
                    true
                }
                K_INT32 | K_INT64 | K_U64 => {
                    let (low, high) = match field.kind {
                        K_INT32 => (i32::MIN as i128, i32::MAX as i128),
                        K_INT64 => (i64::MIN as i128, i64::MAX as i128),
                        _ => (0, u64::MAX as i128),
                    };
                    match plain_int(raw, 38) {
                        Some(n) if low <= n && n <= high => {
                            zigzag(out, n as u64 as i64); // BIGINT UNSIGNED as long wraps, as TiCDC's int64(uint64)
                            true
                        }
                        _ => false,
                    }
                }
                K_FLOAT | K_DOUBLE => match plain_float(raw) {
                    Some(v) if field.kind == K_FLOAT => {
                        out.extend_from_slice(&(v as f32).to_le_bytes());
                        true
                    }
                    Some(v) => {
                        out.extend_from_slice(&v.to_le_bytes());
                        true
                    }
                    None => false,
                },
                K_BIT => match plain_int(raw, 38) {
                    Some(n) if 0 <= n && n <= u64::MAX as i128 => {
                        let be = (n as u64).to_be_bytes();
                        let skip = (be.iter().take_while(|&&b| b == 0).count()).min(7);
                        avro_bytes(out, &be[skip..]);
                        true
                    }
                    _ => false,
                },
                K_DECIMAL => match decimal_bytes(raw, field.scale) {
                    Some(b) => {
                        avro_bytes(out, &b);
                        true
                    }
                    None => false,
                },
                K_CALL => {
                    if !field.known.contains_key(raw) {
                        let answer = match &field.call {
                            Some(f) => f.bind(py).call1((PyBytes::new(py, raw),)).ok().and_then(|v| v.cast::<PyBytes>().ok().map(|b| b.as_bytes().to_vec())),
                            None => None,
                        };
                        field.known.insert(raw.to_vec(), answer);
                    }
                    match &field.known[raw] {
                        Some(b) => {
                            avro_bytes(out, b);
                            true
                        }
                        None => false,
                    }
                }
                _ => false,
            };
            if !ok {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// (key token, key body, value token, value body) of row event `e`; None: Python encodes it.
    #[allow(clippy::type_complexity)]
    fn event(&mut self, py: Python<'_>, events: &Events, topics: &Topics, e: usize)
             -> PyResult<Option<(Option<(usize, Vec<u8>)>, Option<(usize, Vec<u8>)>)>> {
        if events.kind.get(e)? != Some(b"row") {
            return Ok(None); // DDL and watermarks: the reference
        }
        let op = events.op.get(e)?;
        let delete = match op {
            Some(b"insert") | Some(b"update") => false,
            Some(b"delete") => true,
            _ => return Ok(None),
        };
        let Some(image) = events.columns(if delete { BEFORE } else { AFTER }, e)?.filter(|c| !c.is_empty()) else {
            return Ok(None);
        };
        let (Some(database), Some(table), Some(topic)) = (events.database.get(e)?, events.table.get(e)?, topics.get(e)?) else {
            return Ok(None);
        };
        let key_cols: Vec<&Col<'_>> = match events.keys(e)? {
            Some(names) => {
                if names.iter().any(|n| !image.iter().any(|c| c.name == *n)) {
                    return Ok(None); // key columns missing from the image: the codec's error
                }
                image.iter().filter(|c| names.contains(&c.name)).collect()
            }
            None => image.iter().filter(|c| c.flags & self.handle_key != 0).collect(),
        };
        let [namespace, key_hint, value_hint, checksum, corrupted, version] = events.extras_found(e, EXTRAS)?;
        let (key_hint, value_hint) = (key_hint.flatten(), value_hint.flatten());
        if namespace == Some(None) || [key_hint, value_hint].iter().any(|h| h.is_some_and(|h| !h.is_ascii())) {
            return Ok(None); // a null namespace: Python's error; a hint str.isdigit() may read otherwise
        }
        let namespace = namespace.flatten();
        let mut key = None;
        if !key_cols.is_empty() {
            let Some(p) = self.plan(py, topic, "key", namespace, database, table, &key_cols, &[], key_hint)? else {
                return Ok(None);
            };
            let mut body = Vec::with_capacity(16 * key_cols.len());
            if !self.write(py, p, &key_cols, &mut body)? {
                return Ok(None);
            }
            key = Some((p, body));
        }
        if delete {
            return Ok(key.map(|k| (Some(k), None))); // no key: the codec's error
        }
        let mut extension: Vec<&str> = Vec::new();
        let mut tail = Vec::with_capacity(32);
        if self.extension {
            extension.extend(["_tidb_op", "_tidb_commit_ts", "_tidb_commit_physical_time"]);
            let commit = events.commit_ts(e)?.unwrap_or(0);
            avro_bytes(&mut tail, if op == Some(b"insert") { b"c" } else { b"u" });
            zigzag(&mut tail, commit);
            zigzag(&mut tail, events.execute_ts_ms(e)?.unwrap_or(commit >> 18));
            if let (Some(checksum), Some(corrupted), Some(version)) = (checksum, corrupted, version) {
                let (Some(checksum), Some(corrupted), Some(version)) = (checksum, corrupted, version) else {
                    return Ok(None); // a null among them: Python's error
                };
                let Some(version) = plain_int(version, 19).filter(|n| i64::try_from(*n).is_ok()) else { return Ok(None) };
                extension.extend(["_tidb_row_level_checksum", "_tidb_corrupted", "_tidb_checksum_version"]);
                avro_bytes(&mut tail, checksum);
                tail.push((corrupted == b"true") as u8);
                zigzag(&mut tail, version as i64);
            }
        }
        let cols: Vec<&Col<'_>> = image.iter().collect();
        let Some(p) = self.plan(py, topic, "value", namespace, database, table, &cols, &extension, value_hint)? else {
            return Ok(None);
        };
        let mut body = Vec::with_capacity(16 * cols.len() + tail.len());
        if !self.write(py, p, &cols, &mut body)? {
            return Ok(None);
        }
        body.extend_from_slice(&tail);
        Ok(Some((key, Some((p, body)))))
    }
}

#[pymethods]
impl AvroEncoder {
    /// `plan(topic, "key" | "value", namespace or None, database, table, shape, extension, hint)
    /// -> (token, [(value rule, arg)] per column) or None` (codecs/avro.py `_compiled_record`;
    /// shape: per column (name, mysql_type, flags & shape_mask, nullable)); `nullable`,
    /// `handle_key`: the flag bits; `extension`: enable-tidb-extension.
    #[new]
    fn new(plan: Py<PyAny>, shape_mask: i32, nullable: i32, handle_key: i32, extension: bool) -> Self {
        AvroEncoder {
            plan_fn: plan, shape_mask, nullable, handle_key, extension, index: HashMap::new(), plans: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Encode `n` events given as Arrow buffers (spark_apps/native_encode.py `_arrays`, with
    /// `topic`: one str or the events' topics as a binary array): per event (key token, key body,
    /// value token, value body), None for an absent record, or None for an event Python must
    /// encode.
    fn encode<'py>(&mut self, py: Python<'py>, n: usize, cols: Bound<'py, PyDict>) -> PyResult<Bound<'py, PyList>> {
        let events = Events::new(&cols)?;
        let topic = cols.get_item("topic")?.ok_or_else(|| pyo3::exceptions::PyKeyError::new_err("topic"))?;
        let topics = match topic.extract::<String>() {
            Ok(text) => Topics::One(text.into_bytes()),
            Err(_) => Topics::Each(BinaryArray::new(topic.extract::<BinaryArg>()?)?),
        };
        let out = PyList::empty(py);
        for e in 0..n {
            match self.event(py, &events, &topics, e)? {
                Some((key, value)) => {
                    let mut items: Vec<Bound<'py, PyAny>> = Vec::with_capacity(4);
                    for record in [key, value] {
                        match record {
                            Some((p, body)) => {
                                items.push(self.plans[p].token.bind(py).clone());
                                items.push(PyBytes::new(py, &body).into_any());
                            }
                            None => {
                                items.push(py.None().into_bound(py));
                                items.push(py.None().into_bound(py));
                            }
                        }
                    }
                    out.append(PyTuple::new(py, items)?)?
                }
                None => out.append(py.None())?,
            }
        }
        Ok(out)
    }
}

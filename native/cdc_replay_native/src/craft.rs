//! TiCDC Craft (codecs/craft.py is the reference): a batch of craft messages in, Arrow buffers
//! of the canonical events out, with no Python object per value.
//!
//! A message is decoded here only when every check of the Python codec passes and every event
//! would pass `archive_io.event_problem`; anything else (DDL, a malformed message, a value its
//! type rejects, a non-finite float, a non-ASCII key name) goes back to the Python codec, which
//! writes the events or the quarantine row. What a (type code, flags) pair means (the canonical
//! MySQL type text and how its value bytes are rendered) comes from the Python codec's own
//! functions (`rule` callback), once per distinct pair.

use std::collections::HashMap;
use std::io::Write;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{decode_batch, BinaryArg, BinaryArray, Builders, Fallback, R};

const VERSION: u64 = 1;
const ROW: u64 = 1;
const DDL: u64 = 2;
const RESOLVED: u64 = 3;
const GROUP_NEW: u8 = 1;
const GROUP_OLD: u8 = 2;
const MAX_LENGTH: u64 = (1 << 31) - 1;
const I64_MAX: u64 = (1 << 63) - 1;
const HANDLE_KEY: u64 = 1 << 1;
const EXTRA_PARTITION: &str = "craft.partition_id";

// ------------------------------------------------------------------------------ primitives

/// One uvarint at *p before `end` (Go's binary.Uvarint rules: at most 10 bytes, no overflow).
#[inline]
fn uvarint(d: &[u8], p: &mut usize, end: usize) -> R<u64> {
    let mut x: u64 = 0;
    let mut shift = 0u32;
    loop {
        if *p >= end {
            return Err(Fallback);
        }
        let b = d[*p];
        *p += 1;
        if b < 0x80 {
            if shift == 63 && b > 1 {
                return Err(Fallback);
            }
            return Ok(x | (b as u64) << shift);
        }
        x |= ((b & 0x7F) as u64) << shift;
        shift += 7;
        if shift > 63 {
            return Err(Fallback);
        }
    }
}

fn count(d: &[u8], p: &mut usize, end: usize) -> R<usize> {
    let n = uvarint(d, p, end)?;
    if n > MAX_LENGTH {
        return Err(Fallback);
    }
    Ok(n as usize)
}

fn uvarints(d: &[u8], p: &mut usize, end: usize, n: usize) -> R<Vec<u64>> {
    let mut out = Vec::with_capacity(n.min(end.saturating_sub(*p)));
    for _ in 0..n {
        out.push(uvarint(d, p, end)?);
    }
    Ok(out)
}

#[inline]
fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// A delta chunk of zigzag varints, summed without wrapping (as Python's integers are).
fn delta_varints(d: &[u8], p: &mut usize, end: usize, n: usize) -> R<Vec<i128>> {
    let mut out = Vec::with_capacity(n.min(end.saturating_sub(*p)));
    let mut last: i128 = 0;
    for _ in 0..n {
        last += unzigzag(uvarint(d, p, end)?) as i128;
        out.push(last);
    }
    Ok(out)
}

/// A value's varint, which must fill its bytes exactly (craft's `_TextTable._parse`).
fn value_varint(raw: &[u8]) -> R<u64> {
    let mut v: u64 = 0;
    for (i, &b) in raw.iter().enumerate() {
        if b < 0x80 {
            if i + 1 != raw.len() || i > 9 || (i == 9 && b > 1) {
                return Err(Fallback);
            }
            return Ok(v | (b as u64) << (7 * i));
        }
        if i < 9 {
            v |= ((b & 0x7F) as u64) << (7 * i);
        }
    }
    Err(Fallback)
}

fn f64_of(raw: &[u8]) -> R<f64> {
    let bytes: [u8; 8] = raw.try_into().map_err(|_| Fallback)?;
    let v = f64::from_le_bytes(bytes);
    if !v.is_finite() {
        return Err(Fallback); // NaN / infinities: rare, spelled by the Python codec
    }
    Ok(v)
}

/// Decimal fraction digits of a binary float's exact value `mantissa * 2^exp` (0: an integer).
fn fraction_digits(mantissa: u64, exp: i32) -> i32 {
    if mantissa == 0 {
        return 0;
    }
    (-(exp + mantissa.trailing_zeros() as i32)).max(0)
}

/// Whether the shortest text `text` of a float whose exact value has `fraction` decimal fraction
/// digits (`exact`: its exact integer digits) may be one of two equally close candidates. Rust
/// and the reference (Python's repr, NumPy's Dragon4) both print the shortest text closest to
/// the value but break an exact tie differently (2.50390625 as float32: 2.5039063 / 2.5039062),
/// so such values go to Python. A tie is a value exactly halfway between two candidates of at
/// most `max_digits` digits: its exact digits end in a 5, one place after the candidates'.
fn may_tie(text: &[u8], fraction: i32, max_digits: usize, exact: impl Fn() -> String) -> bool {
    match text.iter().position(|&c| c == b'.') {
        Some(dot) => fraction == 0 || fraction == (text.len() - dot) as i32, // text.len() - dot - 1 + 1
        None if fraction > 0 => true,
        None => {
            let exact = exact();
            let digits = exact.trim_start_matches('-').trim_end_matches('0');
            digits.ends_with('5') && digits.len() <= max_digits + 1
        }
    }
}

/// The shortest text that reads back as `v`, without exponent (Go's FormatFloat(v, 'f', -1,
/// 64), NumPy's format_float_positional(unique=True, trim="-")), appended to `out`; non-finite
/// values and possible ties go to Python.
pub(crate) fn shortest_f64(v: f64, out: &mut Vec<u8>) -> R<()> {
    if !v.is_finite() {
        return Err(Fallback);
    }
    let start = out.len();
    write!(out, "{}", v).unwrap();
    let bits = v.to_bits();
    let (biased, m) = (((bits >> 52) & 0x7FF) as i32, bits & ((1 << 52) - 1));
    let (m, e) = if biased == 0 { (m, -1074) } else { (m | 1 << 52, biased - 1075) };
    if may_tie(&out[start..], fraction_digits(m, e), 17, || format!("{:.0}", v)) {
        return Err(Fallback);
    }
    Ok(())
}

/// As `shortest_f64` for a float32 (the f64 rounded to it; an overflow goes to Python).
pub(crate) fn shortest_f32(v: f64, out: &mut Vec<u8>) -> R<()> {
    let v = v as f32;
    if !v.is_finite() {
        return Err(Fallback);
    }
    let start = out.len();
    write!(out, "{}", v).unwrap();
    let bits = v.to_bits() as u64;
    let (biased, m) = (((bits >> 23) & 0xFF) as i32, bits & ((1 << 23) - 1));
    let (m, e) = if biased == 0 { (m, -149) } else { (m | 1 << 23, biased - 150) };
    if may_tie(&out[start..], fraction_digits(m, e), 9, || format!("{:.0}", v)) {
        return Err(Fallback);
    }
    Ok(())
}

// ------------------------------------------------------------------------------ decoding

/// How a column's value bytes become canonical bytes (the kinds of `craft._value_decoder`).
#[derive(Clone, Copy)]
enum ValueKind {
    Raw,
    Uvarint,
    Zigzag,
    Double,
    Float,
}

struct TypeRule {
    mysql_type: String,
    kind: ValueKind,
}

/// The message's events so far are in the builders; a column group's column slot.
struct Group {
    keys: Vec<usize>,  // term ids of the HANDLE_KEY columns
    names: Vec<usize>, // term ids of every column
}

#[pyclass]
pub(crate) struct CraftDecoder {
    rule_fn: Py<PyAny>,
    rules: Vec<TypeRule>,
    by_code: HashMap<(u64, u64), usize>,
    text: Vec<u8>,
}

impl CraftDecoder {
    fn rule(&mut self, py: Python<'_>, code: u64, flags: u64) -> R<usize> {
        if let Some(&i) = self.by_code.get(&(code, flags)) {
            return Ok(i);
        }
        // the reference rejects an unknown code: the Python codec quarantines the message
        let out = self.rule_fn.bind(py).call1((code, flags)).map_err(|_| Fallback)?;
        let (mysql_type, kind): (String, u8) = out.extract().map_err(|_| Fallback)?;
        let kind = match kind {
            0 => ValueKind::Raw,
            1 => ValueKind::Uvarint,
            2 => ValueKind::Zigzag,
            3 => ValueKind::Double,
            4 => ValueKind::Float,
            _ => return Err(Fallback),
        };
        self.rules.push(TypeRule { mysql_type, kind });
        let i = self.rules.len() - 1;
        self.by_code.insert((code, flags), i);
        Ok(i)
    }

    /// One column group's columns appended to the image pool of its side.
    #[allow(clippy::too_many_arguments)]
    fn group(
        &mut self,
        py: Python<'_>,
        d: &[u8],
        mut p: usize,
        end: usize,
        terms: &[&str],
        after: bool,
        b: &mut Builders,
    ) -> R<Group> {
        let n = count(d, &mut p, end)?;
        if n == 0 {
            return Err(Fallback);
        }
        let ids = delta_varints(d, &mut p, end, n)?;
        let mut names = Vec::with_capacity(n);
        for id in ids {
            if id < 0 || id >= terms.len() as i128 {
                return Err(Fallback);
            }
            names.push(id as usize);
        }
        let codes = uvarints(d, &mut p, end, n)?;
        let flags = uvarints(d, &mut p, end, n)?;
        if flags.iter().any(|&f| f > MAX_LENGTH) {
            return Err(Fallback);
        }
        let mut rules = Vec::with_capacity(n);
        for (&c, &f) in codes.iter().zip(&flags) {
            rules.push(self.rule(py, c, f)?);
        }
        let lengths = uvarints(d, &mut p, end, n)?;
        let pool = if after { &mut b.after_cols } else { &mut b.before_cols };
        let mut keys = Vec::new();
        for i in 0..n {
            let zz = lengths[i];
            let rule = &self.rules[rules[i]];
            let value: Option<&[u8]> = if zz & 1 == 1 {
                if zz != 1 {
                    return Err(Fallback);
                }
                None
            } else {
                let len = (zz >> 1) as usize;
                if len > end - p {
                    return Err(Fallback);
                }
                let raw = &d[p..p + len];
                p += len;
                self.text.clear();
                match rule.kind {
                    ValueKind::Raw => Some(raw),
                    ValueKind::Uvarint => {
                        write!(self.text, "{}", value_varint(raw)?).unwrap();
                        Some(&self.text[..])
                    }
                    ValueKind::Zigzag => {
                        write!(self.text, "{}", unzigzag(value_varint(raw)?)).unwrap();
                        Some(&self.text[..])
                    }
                    ValueKind::Double => {
                        shortest_f64(f64_of(raw)?, &mut self.text)?;
                        Some(&self.text[..])
                    }
                    ValueKind::Float => {
                        shortest_f32(f64_of(raw)?, &mut self.text)?;
                        Some(&self.text[..])
                    }
                }
            };
            pool.name.push_str(Some(terms[names[i]]));
            pool.mysql_type.push_str(Some(&rule.mysql_type));
            pool.flags.push(flags[i] as i32);
            pool.value.push(value);
            pool.label.push(None);
            if flags[i] & HANDLE_KEY != 0 {
                keys.push(names[i]);
            }
        }
        if p != end {
            return Err(Fallback);
        }
        Ok(Group { keys, names })
    }

    /// One craft message into the builders (`rec`: its record index).
    pub(crate) fn record(&mut self, py: Python<'_>, d: &[u8], rec: i32, b: &mut Builders) -> PyResult<R<()>> {
        Ok(self.message(py, d, rec, b))
    }

    fn message(&mut self, py: Python<'_>, d: &[u8], rec: i32, b: &mut Builders) -> R<()> {
        let n = d.len();
        if n == 0 {
            return Err(Fallback);
        }
        let mut p = 0;
        if uvarint(d, &mut p, n)? != VERSION {
            return Err(Fallback);
        }
        // trailer: a uvarint with its bytes reversed, read from the last byte backwards
        let tail_start = p.max(n.saturating_sub(10));
        let tail: Vec<u8> = d[tail_start..].iter().rev().copied().collect();
        let mut used = 0;
        let size = uvarint(&tail, &mut used, tail.len())?;
        let trailer = n - used;
        if size > (trailer - p) as u64 {
            return Err(Fallback);
        }
        let tables_start = trailer - size as usize;
        let mut tables: Vec<Vec<i128>> = Vec::new();
        let mut q = tables_start;
        while q < trailer {
            let c = count(d, &mut q, trailer)?;
            tables.push(delta_varints(d, &mut q, trailer, c)?);
        }
        if tables.len() < 2 || tables[0].len() != 2 || tables[0][0] < 0 || tables[0][1] < 0 {
            return Err(Fallback);
        }
        let body_sizes = &tables[1];
        let events = body_sizes.len();
        if events == 0 || body_sizes.iter().any(|&s| s < 0) {
            return Err(Fallback);
        }
        let header_end = p as i128 + tables[0][0];
        let dict_start = header_end + body_sizes.iter().sum::<i128>();
        if dict_start + tables[0][1] != tables_start as i128 {
            return Err(Fallback);
        }
        let (header_end, dict_start) = (header_end as usize, dict_start as usize);

        // term dictionary
        let mut terms: Vec<&str> = Vec::new();
        if tables_start > dict_start {
            let mut q = dict_start;
            let c = count(d, &mut q, tables_start)?;
            let lengths = uvarints(d, &mut q, tables_start, c)?;
            for len in lengths {
                if len > (tables_start - q) as u64 {
                    return Err(Fallback);
                }
                let e = q + len as usize;
                terms.push(std::str::from_utf8(&d[q..e]).map_err(|_| Fallback)?);
                q = e;
            }
            if q != tables_start {
                return Err(Fallback);
            }
        }
        let name = |id: i128| -> R<Option<&str>> {
            if id == -1 {
                Ok(None)
            } else if id >= 0 && id < terms.len() as i128 {
                Ok(Some(terms[id as usize]))
            } else {
                Err(Fallback)
            }
        };

        // headers
        let mut q = p;
        let mut ts = Vec::with_capacity(events);
        let mut last: u64 = 0;
        for _ in 0..events {
            last = last.wrapping_add(uvarint(d, &mut q, header_end)?);
            ts.push(last);
        }
        let types = uvarints(d, &mut q, header_end, events)?;
        let partitions = delta_varints(d, &mut q, header_end, events)?;
        let schema_ids = delta_varints(d, &mut q, header_end, events)?;
        let table_ids = delta_varints(d, &mut q, header_end, events)?;
        if q != header_end {
            return Err(Fallback);
        }
        let mut schemas = Vec::with_capacity(events);
        let mut tables_names = Vec::with_capacity(events);
        for i in 0..events {
            schemas.push(name(schema_ids[i])?);
            tables_names.push(name(table_ids[i])?);
        }
        if ts.iter().any(|&t| t > I64_MAX) {
            return Err(Fallback);
        }
        let has_rows = types.contains(&ROW);
        if tables.len() != if has_rows { 2 + events } else { 2 } {
            return Err(Fallback);
        }

        let mut body = header_end;
        for i in 0..events {
            let end = body + tables[1][i] as usize;
            let commit_ts = ts[i] as i64;
            let partition = partitions[i] as i64; // Go's int64 wrap-around, as `_wrap_i64`
            let extra = (partition != -1).then(|| partition.to_string());
            let extras: Vec<(&str, String)> = extra.into_iter().map(|v| (EXTRA_PARTITION, v)).collect();
            b.rec_idx.push(rec);
            b.event_index.push(i as i32);
            b.execute_ts.push(Some(commit_ts >> 18));
            b.tx_id.push(None);
            b.push_extras(&extras);
            match types[i] {
                ROW => {
                    let (Some(database), Some(table)) = (schemas[i], tables_names[i]) else {
                        return Err(Fallback); // a row without its names: the Python path quarantines it
                    };
                    if database.is_empty() || table.is_empty() {
                        return Err(Fallback);
                    }
                    self.row(py, d, body, end, &tables[2 + i], &terms, b)?;
                    b.commit_ts.push(Some(commit_ts));
                    b.database.push_str(Some(database));
                    b.table.push_str(Some(table));
                    b.watermark_ts.push(None);
                }
                RESOLVED => {
                    if end != body {
                        return Err(Fallback);
                    }
                    b.push_watermark(commit_ts);
                }
                DDL => return Err(Fallback), // classified by the Python reference
                _ => return Err(Fallback),
            }
            body = end;
        }
        Ok(())
    }

    /// A row event's column groups: kind, op, key columns and both images.
    #[allow(clippy::too_many_arguments)]
    fn row(
        &mut self,
        py: Python<'_>,
        d: &[u8],
        mut p: usize,
        end: usize,
        group_sizes: &[i128],
        terms: &[&str],
        b: &mut Builders,
    ) -> R<()> {
        if group_sizes.is_empty()
            || group_sizes.iter().any(|&s| s < 1)
            || group_sizes.iter().sum::<i128>() != (end - p) as i128
        {
            return Err(Fallback);
        }
        let (mut before, mut after): (Option<Group>, Option<Group>) = (None, None);
        for &size in group_sizes {
            let group_end = p + size as usize;
            let is_after = match d[p] {
                GROUP_NEW => true,
                GROUP_OLD => false,
                _ => return Err(Fallback),
            };
            if (is_after && after.is_some()) || (!is_after && before.is_some()) {
                return Err(Fallback);
            }
            let g = self.group(py, d, p + 1, group_end, terms, is_after, b)?;
            if is_after {
                after = Some(g);
            } else {
                before = Some(g);
            }
            p = group_end;
        }
        // TiCDC takes the table info (so the key) from the old group when there is one
        let keys = &before.as_ref().or(after.as_ref()).unwrap().keys;
        let op = match (&before, &after) {
            (Some(_), Some(_)) => "update",
            (None, Some(_)) => "insert",
            _ => "delete",
        };
        // archive_io.event_problem: every key column is in the image that carries the key
        let carrier = if op == "delete" { &before } else { &after };
        let carrier = carrier.as_ref().unwrap();
        for &k in keys {
            let key = terms[k];
            // found here => found by Python's lower-case comparison; not found: Python decides
            // (it quarantines, or matches through Unicode case folding)
            let found = carrier.names.iter().any(|&c| {
                let c = terms[c];
                c == key || (c.is_ascii() && key.is_ascii() && c.eq_ignore_ascii_case(key))
            });
            if !found {
                return Err(Fallback);
            }
        }
        b.kind.push_str(Some("row"));
        b.op.push_str(Some(op));
        for &k in keys {
            b.keys.push_str(Some(terms[k]));
        }
        b.key_columns.push(true, b.keys.len());
        b.before.push(before.is_some(), b.before_cols.len());
        b.after.push(after.is_some(), b.after_cols.len());
        Ok(())
    }
}

#[pymethods]
impl CraftDecoder {
    /// `rule(type_code, flags) -> (mysql_type, value kind: 0 raw, 1 uvarint, 2 zigzag varint,
    /// 3 float64, 4 float32)`, from the Python codec (spark_apps/native_decode.py).
    #[new]
    fn new(rule: Py<PyAny>) -> Self {
        CraftDecoder { rule_fn: rule, rules: Vec::new(), by_code: HashMap::new(), text: Vec::new() }
    }

    /// As `CanalJsonDecoder.decode`: a batch of craft messages given as Arrow binary buffers.
    fn decode<'py>(&mut self, py: Python<'py>, values: BinaryArg<'py>) -> PyResult<Bound<'py, PyDict>> {
        let values = BinaryArray::new(values)?;
        decode_batch(py, &values, |py, raw, rec, b| self.record(py, raw, rec, b))
    }
}

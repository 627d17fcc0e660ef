//! The canal-json encoder (TiCDC flavour): row events of an Arrow batch in, one message value
//! per event out, byte for byte what codecs/canal_json.py `CanalJsonCodec.encode` writes for
//! the same event. The Python encoder stays the reference: every event this one is not sure
//! about (DDL, a watermark without enable-tidb-extension, an unknown op, a missing image, text
//! that is not UTF-8, a value whose unsigned promotion Python's `int()` would read differently,
//! ...) comes back as None and the caller encodes it with the Python codec
//! (spark_apps/native_encode.py).
//!
//! An image's column names, types and flags are rendered once per *shape* (`Shape`: the
//! `"name":` keys, the sqlType and mysqlType objects), kept for the few shapes met last: the
//! rows of a table come with the same few shapes, so a row renders only its values.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::encode_common::{plain_int, quote_go, Col, Events, AFTER, BEFORE};
use crate::push_int;

/// What a column's (type text, flags) imply, from the Python rule `_encode_rule` once per pair.
struct Rule {
    type_json: Vec<u8>,            // the mysqlType text, quoted
    code: i64,                     // the sqlType before the unsigned promotion
    promotion: Option<(Vec<u8>, i64)>, // (limit in decimal, wider code)
    binary: bool,
}

#[pyclass]
pub(crate) struct CanalJsonEncoder {
    rule_fn: Py<PyAny>,
    tidb_extension: bool,
    only_updated: bool, // content-compatible or only-output-updated-columns
    rules: Vec<Rule>,
    by_type: HashMap<i32, HashMap<Vec<u8>, usize>>, // flags -> type text -> rule (looked up without a copy)
    untyped: HashMap<i32, usize>,                   // flags -> rule of a column with no type text
    shapes: Vec<Shape>, // at most SHAPES
    recent: Vec<usize>, // indexes in `shapes`, the last used first
}

/// The shapes kept (the 1M bench's writer tasks: 98% of images are one of the last 8 used).
const SHAPES: usize = 16;

/// An image's column names, type texts and flags (what the shape is compared by), and what
/// they render to: each column's rule and `"name":` key, the sqlType object at the rules'
/// codes before any unsigned promotion, the mysqlType object. `declined`: a name or type text
/// that is not UTF-8 (every image of this shape goes to Python).
struct Shape {
    names: Vec<u8>,
    types: Vec<u8>,
    cols: Vec<ShapeCol>,
    keys: Vec<u8>,
    sql_type: Vec<u8>,
    mysql_type: Vec<u8>,
    declined: bool,
}

struct ShapeCol {
    name_end: usize,         // in `names`
    type_end: Option<usize>, // in `types`; None: no type text
    flags: i32,
    rule: usize,
    key_end: usize, // in `keys`
}

impl Shape {
    fn matches(&self, cols: &[Col<'_>]) -> bool {
        if cols.len() != self.cols.len() {
            return false;
        }
        let (mut name_at, mut type_at) = (0, 0);
        for (c, s) in cols.iter().zip(&self.cols) {
            if c.flags != s.flags || c.name != &self.names[name_at..s.name_end] {
                return false;
            }
            match (c.mysql_type, s.type_end) {
                (None, None) => {}
                (Some(t), Some(end)) if t == &self.types[type_at..end] => type_at = end,
                _ => return false,
            }
            name_at = s.name_end;
        }
        true
    }

    fn key(&self, j: usize) -> &[u8] {
        &self.keys[if j == 0 { 0 } else { self.cols[j - 1].key_end }..self.cols[j].key_end]
    }
}

/// A row's values as JSON in `json`, each column's at `spans[j]`; `codes`: the sqlType codes
/// when an unsigned promotion changed one (else the shape's).
struct Values {
    json: Vec<u8>,
    spans: Vec<(usize, usize)>,
    codes: Option<Vec<i64>>,
}

/// Go's JSON escaping as TiCDC writes it (codecs/gojson.py): `text` is valid UTF-8.
fn quote(out: &mut Vec<u8>, text: &[u8]) {
    quote_go(out, text, false)
}

/// Raw bytes as ISO-8859-1 characters, quoted (the binary columns' rule).
fn quote_latin1(out: &mut Vec<u8>, raw: &[u8]) {
    if raw.is_ascii() {
        return quote(out, raw);
    }
    let mut text = Vec::with_capacity(raw.len() * 2);
    for &b in raw {
        if b < 0x80 {
            text.push(b);
        } else {
            text.push(0xc0 | (b >> 6));
            text.push(0x80 | (b & 0x3f));
        }
    }
    quote(out, &text);
}

/// Whether `int(raw) > limit` in Python, for a value of ASCII digits with an optional `-`;
/// None when Python's `int()` might read it otherwise (signs, spaces, underscores, ...).
fn above(raw: &[u8], limit: &[u8]) -> Option<bool> {
    let (negative, digits) = match raw.first() {
        Some(b'-') => (true, &raw[1..]),
        _ => (false, raw),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if negative {
        return Some(false);
    }
    let start = digits.iter().position(|&d| d != b'0').unwrap_or(digits.len());
    let digits = &digits[start..];
    Some(digits.len() > limit.len() || (digits.len() == limit.len() && digits > limit))
}

impl CanalJsonEncoder {
    fn rule(&mut self, py: Python<'_>, type_text: Option<&[u8]>, flags: i32) -> PyResult<Option<usize>> {
        let known = match type_text {
            Some(raw) => self.by_type.get(&flags).and_then(|m| m.get(raw)),
            None => self.untyped.get(&flags),
        };
        if let Some(&i) = known {
            return Ok(Some(i));
        }
        let Some(type_text) = type_text.map(std::str::from_utf8).transpose().ok() else { return Ok(None) };
        let out = self.rule_fn.bind(py).call1((type_text, flags))?;
        let (text, code, promotion, binary): (String, i64, Option<(u128, i64)>, bool) = out.extract()?;
        let mut type_json = Vec::new();
        quote(&mut type_json, text.as_bytes());
        let promotion = promotion.map(|(limit, code)| (limit.to_string().into_bytes(), code));
        self.rules.push(Rule { type_json, code, promotion, binary });
        let i = self.rules.len() - 1;
        match type_text {
            Some(text) => self.by_type.entry(flags).or_default().insert(text.as_bytes().to_vec(), i),
            None => self.untyped.insert(flags, i),
        };
        Ok(Some(i))
    }

    /// The index in `shapes` of the shape of `cols`, built on its first use (one kept shape,
    /// the least recently used, makes room).
    fn shape(&mut self, py: Python<'_>, cols: &[Col<'_>]) -> PyResult<usize> {
        if let Some(k) = self.recent.iter().position(|&i| self.shapes[i].matches(cols)) {
            let i = self.recent.remove(k);
            self.recent.insert(0, i);
            return Ok(i);
        }
        let shape = self.build(py, cols)?;
        let i = if self.shapes.len() < SHAPES {
            self.shapes.push(shape);
            self.shapes.len() - 1
        } else {
            let i = self.recent.pop().expect("SHAPES > 0");
            self.shapes[i] = shape;
            i
        };
        self.recent.insert(0, i);
        Ok(i)
    }

    fn build(&mut self, py: Python<'_>, cols: &[Col<'_>]) -> PyResult<Shape> {
        let mut s = Shape {
            names: Vec::new(), types: Vec::new(), cols: Vec::with_capacity(cols.len()), keys: Vec::new(),
            sql_type: vec![b'{'], mysql_type: vec![b'{'], declined: false,
        };
        for c in cols {
            s.names.extend_from_slice(c.name);
            let type_end = c.mysql_type.map(|t| {
                s.types.extend_from_slice(t);
                s.types.len()
            });
            s.cols.push(ShapeCol { name_end: s.names.len(), type_end, flags: c.flags, rule: 0, key_end: 0 });
        }
        for (j, c) in cols.iter().enumerate() {
            if std::str::from_utf8(c.name).is_err() {
                s.declined = true;
                break;
            }
            let Some(r) = self.rule(py, c.mysql_type, c.flags)? else {
                s.declined = true;
                break;
            };
            let key_start = s.keys.len();
            quote(&mut s.keys, c.name);
            s.keys.push(b':');
            s.cols[j].rule = r;
            s.cols[j].key_end = s.keys.len();
            let rule = &self.rules[r];
            if j > 0 {
                s.sql_type.push(b',');
                s.mysql_type.push(b',');
            }
            s.sql_type.extend_from_slice(&s.keys[key_start..]);
            push_int(&mut s.sql_type, rule.code);
            s.mysql_type.extend_from_slice(&s.keys[key_start..]);
            s.mysql_type.extend_from_slice(&rule.type_json);
        }
        s.sql_type.push(b'}');
        s.mysql_type.push(b'}');
        Ok(s)
    }

    /// The values of `cols` (of shape `shape`) as JSON; None: the event goes to Python.
    fn values(&self, shape: &Shape, cols: &[Col<'_>]) -> Option<Values> {
        let mut v = Values { json: Vec::with_capacity(cols.len() * 24), spans: Vec::with_capacity(cols.len()), codes: None };
        for (j, (c, s)) in cols.iter().zip(&shape.cols).enumerate() {
            let rule = &self.rules[s.rule];
            let start = v.json.len();
            match c.value {
                None => v.json.extend_from_slice(b"null"),
                Some(raw) => {
                    if let Some((limit, wider)) = &rule.promotion {
                        if above(raw, limit)? {
                            v.codes.get_or_insert_with(|| shape.cols.iter().map(|s| self.rules[s.rule].code).collect())[j] =
                                *wider;
                        }
                    }
                    if rule.binary {
                        quote_latin1(&mut v.json, raw);
                    } else if std::str::from_utf8(raw).is_ok() {
                        quote(&mut v.json, raw);
                    } else {
                        return None; // Python's "replace" decoding: left to the reference
                    }
                }
            }
            v.spans.push((start, v.json.len()));
        }
        Some(v)
    }
}

fn rows_json(out: &mut Vec<u8>, shape: &Shape, values: &Values, keep: impl Fn(usize) -> bool) {
    out.extend_from_slice(b"[{");
    let mut first = true;
    for (j, &(start, end)) in values.spans.iter().enumerate() {
        if !keep(j) {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(shape.key(j));
        out.extend_from_slice(&values.json[start..end]);
    }
    out.extend_from_slice(b"}]");
}

#[pymethods]
impl CanalJsonEncoder {
    /// `rule(type_text, flags) -> (mysqlType text, sqlType code, (limit, wider code) or None,
    /// binary)` (codecs/canal_json.py `_encode_rule` with the codec's content-compatible);
    /// `tidb_extension`: enable-tidb-extension; `only_updated`: content-compatible or
    /// only-output-updated-columns.
    #[new]
    fn new(rule: Py<PyAny>, tidb_extension: bool, only_updated: bool) -> Self {
        CanalJsonEncoder {
            rule_fn: rule, tidb_extension, only_updated, rules: Vec::new(), by_type: HashMap::new(), untyped: HashMap::new(),
            shapes: Vec::new(), recent: Vec::new(),
        }
    }

    /// Encode `n` events given as Arrow buffers (spark_apps/native_encode.py `_arrays`): a list
    /// of one message value (bytes) per event, None for each event the Python codec must encode.
    fn encode<'py>(&mut self, py: Python<'py>, n: usize, cols: Bound<'py, PyDict>) -> PyResult<Bound<'py, PyList>> {
        let events = Events::new(&cols)?;
        let out = PyList::empty(py);
        for e in 0..n {
            match self.event(py, &events, e)? {
                Some(value) => out.append(PyBytes::new(py, &value))?,
                None => out.append(py.None())?,
            }
        }
        Ok(out)
    }
}

impl CanalJsonEncoder {
    fn event(&mut self, py: Python<'_>, events: &Events, e: usize) -> PyResult<Option<Vec<u8>>> {
        let (kind, op, database, table) = (&events.kind, &events.op, &events.database, &events.table);
        match kind.get(e)? {
            Some(b"row") => {}
            Some(b"watermark") => return self.watermark(events, e),
            _ => return Ok(None), // DDL: the reference
        }
        let (name, delete, update): (&[u8], bool, bool) = match op.get(e)? {
            Some(b"insert") => (b"\"INSERT\"", false, false),
            Some(b"update") => (b"\"UPDATE\"", false, true),
            Some(b"delete") => (b"\"DELETE\"", true, false),
            _ => return Ok(None),
        };
        let before = events.columns(BEFORE, e)?;
        let after = events.columns(AFTER, e)?;
        let image = if delete { &before } else { &after };
        let Some(image) = image.as_ref().filter(|cols| !cols.is_empty()) else { return Ok(None) };
        let commit_ts = events.commit_ts(e)?;
        let es = events.execute_ts_ms(e)?.unwrap_or(commit_ts.unwrap_or(0) >> 18);
        let Some([id, ts]) = canal_extras(events, e)? else { return Ok(None) };
        let mut out = Vec::with_capacity(256 + image.len() * 48);
        let Some(()) = head(&mut out, id) else { return Ok(None) };
        for (key, field) in [(&b",\"database\":"[..], database), (b",\"table\":", table)] {
            out.extend_from_slice(key);
            let text = field.get(e)?.unwrap_or(b"");
            if std::str::from_utf8(text).is_err() {
                return Ok(None);
            }
            quote(&mut out, text);
        }
        out.extend_from_slice(b",\"pkNames\":");
        if let Some(keys) = events.keys(e)? {
            out.push(b'[');
            for (k, text) in keys.into_iter().enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                if std::str::from_utf8(text).is_err() {
                    return Ok(None);
                }
                quote(&mut out, text);
            }
            out.push(b']');
        } else {
            out.extend_from_slice(b"null");
        }
        out.extend_from_slice(b",\"isDdl\":false,\"type\":");
        out.extend_from_slice(name);
        times(&mut out, es, ts);
        out.extend_from_slice(b",\"sql\":\"\",\"sqlType\":");
        let at = self.shape(py, image)?;
        let old = if update {
            let Some(old) = before.as_ref().filter(|cols| !cols.is_empty()) else { return Ok(None) };
            Some((old, self.shape(py, old)?))
        } else {
            None
        };
        let shape = &self.shapes[at];
        if shape.declined || old.is_some_and(|(_, o)| self.shapes[o].declined) {
            return Ok(None);
        }
        let Some(values) = self.values(shape, image) else { return Ok(None) };
        match &values.codes {
            None => out.extend_from_slice(&shape.sql_type),
            Some(codes) => {
                out.push(b'{');
                for (j, code) in codes.iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(shape.key(j));
                    push_int(&mut out, *code);
                }
                out.push(b'}');
            }
        }
        out.extend_from_slice(b",\"mysqlType\":");
        out.extend_from_slice(&shape.mysql_type);
        if let Some((old, o)) = old {
            let old_shape = &self.shapes[o];
            let Some(old_values) = self.values(old_shape, old) else { return Ok(None) };
            out.extend_from_slice(b",\"old\":");
            if self.only_updated {
                let mut new_values: HashMap<&[u8], (Option<&[u8]>, Option<&[u8]>)> = HashMap::new();
                for c in image {
                    new_values.insert(c.name, (c.value, c.mysql_type));
                }
                rows_json(&mut out, old_shape, &old_values, |j| {
                    new_values.get(old[j].name) != Some(&(old[j].value, old[j].mysql_type))
                });
            } else {
                rows_json(&mut out, old_shape, &old_values, |_| true);
            }
            out.extend_from_slice(b",\"data\":");
        } else {
            out.extend_from_slice(b",\"old\":null,\"data\":");
        }
        rows_json(&mut out, shape, &values, |_| true);
        if self.tidb_extension {
            if let Some(ts) = commit_ts {
                out.extend_from_slice(b",\"_tidb\":{\"commitTs\":");
                push_int(&mut out, ts);
                out.push(b'}');
            }
        }
        out.push(b'}');
        Ok(Some(out))
    }

    /// A watermark's message (`_watermark_json`): TiCDC sends them only with the extension
    /// (without it the codec writes none: Python's empty entry); a null watermark_ts (which
    /// Python writes as `None`) goes to Python.
    fn watermark(&self, events: &Events, e: usize) -> PyResult<Option<Vec<u8>>> {
        if !self.tidb_extension {
            return Ok(None);
        }
        let Some(watermark_ts) = events.watermark_ts(e)? else { return Ok(None) };
        let es = events.execute_ts_ms(e)?.unwrap_or(watermark_ts >> 18);
        let Some([id, ts]) = canal_extras(events, e)? else { return Ok(None) };
        let mut out = Vec::with_capacity(256);
        let Some(()) = head(&mut out, id) else { return Ok(None) };
        out.extend_from_slice(b",\"database\":\"\",\"table\":\"\",\"pkNames\":null,\"isDdl\":false,\"type\":\"TIDB_WATERMARK\"");
        times(&mut out, es, ts);
        out.extend_from_slice(b",\"sql\":\"\",\"sqlType\":null,\"mysqlType\":null,\"data\":null,\"old\":null,\"_tidb\":{\"watermarkTs\":");
        push_int(&mut out, watermark_ts);
        out.extend_from_slice(b"}}");
        Ok(Some(out))
    }
}

/// The extras canal.id and canal.ts of event `e`; None (the event goes to Python) when either
/// is there with a null value, which Python's dict holds as None (`int(None)` raises, the ts
/// would be written `None`).
fn canal_extras<'a>(events: &'a Events, e: usize) -> PyResult<Option<[Option<&'a [u8]>; 2]>> {
    let [id, ts] = events.extras_found(e, [b"canal.id", b"canal.ts"])?;
    if id == Some(None) || ts == Some(None) {
        return Ok(None);
    }
    Ok(Some([id.flatten(), ts.flatten()]))
}

/// `{"id":` and canal.id (`int()` of it in Python: only plain decimal of at most 18 digits is
/// taken here); None: the event goes to Python.
fn head(out: &mut Vec<u8>, id: Option<&[u8]>) -> Option<()> {
    out.extend_from_slice(b"{\"id\":");
    match id {
        None => out.push(b'0'),
        Some(text) => push_int(out, plain_int(text, 18)? as i64),
    }
    Some(())
}

/// `,"es":…,"ts":…`: canal.ts as it is written, else `es`.
fn times(out: &mut Vec<u8>, es: i64, ts: Option<&[u8]>) {
    out.extend_from_slice(b",\"es\":");
    push_int(out, es);
    out.extend_from_slice(b",\"ts\":");
    match ts {
        Some(text) => out.extend_from_slice(text),
        None => push_int(out, es),
    }
}

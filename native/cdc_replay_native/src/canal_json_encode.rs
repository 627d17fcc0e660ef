//! The canal-json encoder (TiCDC flavour): row events of an Arrow batch in, one message value
//! per event out, byte for byte what codecs/canal_json.py `CanalJsonCodec.encode` writes for
//! the same event. The Python encoder stays the reference: every event this one is not sure
//! about (DDL, watermarks, an unknown op, a missing image, text that is not UTF-8, a value whose
//! unsigned promotion Python's `int()` would read differently, ...) comes back as None and the
//! caller encodes it with the Python codec (spark_apps/native_encode.py).

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
}

/// A column's rendering: (rule index, sqlType code, its value's JSON at `json[start..end]`).
type Rendered = Vec<(usize, i64, usize, usize)>;

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

    /// The columns' renderings, their JSON appended to `json`; None: the event goes to Python.
    fn render(&mut self, py: Python<'_>, cols: &[Col<'_>], json: &mut Vec<u8>) -> PyResult<Option<Rendered>> {
        let mut out = Vec::with_capacity(cols.len());
        for c in cols {
            if std::str::from_utf8(c.name).is_err() {
                return Ok(None);
            }
            let Some(r) = self.rule(py, c.mysql_type, c.flags)? else { return Ok(None) };
            let rule = &self.rules[r];
            let mut code = rule.code;
            let start = json.len();
            match c.value {
                None => json.extend_from_slice(b"null"),
                Some(raw) => {
                    if let Some((limit, wider)) = &rule.promotion {
                        match above(raw, limit) {
                            Some(true) => code = *wider,
                            Some(false) => {}
                            None => return Ok(None),
                        }
                    }
                    if rule.binary {
                        quote_latin1(json, raw);
                    } else if std::str::from_utf8(raw).is_ok() {
                        quote(json, raw);
                    } else {
                        return Ok(None); // Python's "replace" decoding: left to the reference
                    }
                }
            }
            out.push((r, code, start, json.len()));
        }
        Ok(Some(out))
    }
}

fn rows_json(out: &mut Vec<u8>, cols: &[Col<'_>], rendered: &[(usize, i64, usize, usize)], json: &[u8],
             keep: impl Fn(usize) -> bool) {
    out.extend_from_slice(b"[{");
    let mut first = true;
    for (i, (c, &(_, _, start, end))) in cols.iter().zip(rendered).enumerate() {
        if !keep(i) {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        quote(out, c.name);
        out.push(b':');
        out.extend_from_slice(&json[start..end]);
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
        if kind.get(e)? != Some(b"row") {
            return Ok(None); // DDL and watermarks: the reference
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
        let [id, ts] = events.extras(e, [b"canal.id", b"canal.ts"])?;
        let es = events.execute_ts_ms(e)?.unwrap_or(commit_ts.unwrap_or(0) >> 18);
        let mut out = Vec::with_capacity(256 + image.len() * 48);
        out.extend_from_slice(b"{\"id\":");
        match id {
            None => out.push(b'0'),
            Some(text) => {
                // int(text) in Python: only plain decimal of at most 18 digits is taken here
                let Some(v) = plain_int(text, 18) else { return Ok(None) };
                push_int(&mut out, v as i64);
            }
        }
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
        out.extend_from_slice(b",\"es\":");
        push_int(&mut out, es);
        out.extend_from_slice(b",\"ts\":");
        match ts {
            Some(text) => out.extend_from_slice(text),
            None => push_int(&mut out, es),
        }
        out.extend_from_slice(b",\"sql\":\"\",\"sqlType\":{");
        let mut json = Vec::with_capacity(image.len() * 24);
        let Some(rendered) = self.render(py, image, &mut json)? else { return Ok(None) };
        for (i, (c, (_, code, _, _))) in image.iter().zip(&rendered).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            quote(&mut out, c.name);
            out.push(b':');
            push_int(&mut out, *code);
        }
        out.extend_from_slice(b"},\"mysqlType\":{");
        for (i, (c, (r, _, _, _))) in image.iter().zip(&rendered).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            quote(&mut out, c.name);
            out.push(b':');
            out.extend_from_slice(&self.rules[*r].type_json);
        }
        out.push(b'}');
        if update {
            let Some(old) = before.as_ref().filter(|cols| !cols.is_empty()) else { return Ok(None) };
            let mut old_json = Vec::with_capacity(old.len() * 24);
            let Some(old_rendered) = self.render(py, old, &mut old_json)? else { return Ok(None) };
            out.extend_from_slice(b",\"old\":");
            if self.only_updated {
                let mut new_values: HashMap<&[u8], (Option<&[u8]>, Option<&[u8]>)> = HashMap::new();
                for c in image {
                    new_values.insert(c.name, (c.value, c.mysql_type));
                }
                rows_json(&mut out, old, &old_rendered, &old_json, |i| {
                    new_values.get(old[i].name) != Some(&(old[i].value, old[i].mysql_type))
                });
            } else {
                rows_json(&mut out, old, &old_rendered, &old_json, |_| true);
            }
            out.extend_from_slice(b",\"data\":");
        } else {
            out.extend_from_slice(b",\"old\":null,\"data\":");
        }
        rows_json(&mut out, image, &rendered, &json, |_| true);
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
}

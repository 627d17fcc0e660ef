//! The canal-json encoder (TiCDC flavour): row events of an Arrow batch in, one message value
//! per event out, byte for byte what codecs/canal_json.py `CanalJsonCodec.encode` writes for
//! the same event. The Python encoder stays the reference: every event this one is not sure
//! about (DDL, watermarks, an unknown op, a missing image, text that is not UTF-8, a value whose
//! unsigned promotion Python's `int()` would read differently, ...) comes back as None and the
//! caller encodes it with the Python codec (spark_apps/native_encode.py).

use std::collections::HashMap;

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::{buffer_bytes, push_int, BinaryArg, BinaryArray};

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
    by_type: HashMap<(Option<String>, i32), usize>,
}

/// Go's JSON escaping as TiCDC writes it (codecs/gojson.py): `text` is valid UTF-8.
fn quote(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'"');
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'<' => out.extend_from_slice(b"\\u003c"),
            b'>' => out.extend_from_slice(b"\\u003e"),
            b'&' => out.extend_from_slice(b"\\u0026"),
            0..=0x1f => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 15) as usize]);
            }
            0xe2 if i + 2 < text.len() && text[i + 1] == 0x80 && (text[i + 2] == 0xa8 || text[i + 2] == 0xa9) => {
                out.extend_from_slice(if text[i + 2] == 0xa8 { b"\\u2028" } else { b"\\u2029" });
                i += 3;
                continue;
            }
            _ => out.push(b),
        }
        i += 1;
    }
    out.push(b'"');
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

fn fixed<'a>(d: &'a Bound<'_, PyDict>, name: &str, keep: &'a mut Vec<PyBuffer<u8>>) -> PyResult<usize> {
    let item = d.get_item(name)?.ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(name.to_owned()))?;
    keep.push(PyBuffer::<u8>::get(&item)?);
    Ok(keep.len() - 1)
}

fn binary(d: &Bound<'_, PyDict>, name: &str) -> PyResult<BinaryArray> {
    let item = d.get_item(name)?.ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(name.to_owned()))?;
    BinaryArray::new(item.extract::<BinaryArg>()?)
}

fn i64_at(b: &[u8], i: usize) -> PyResult<i64> {
    b.get(i * 8..i * 8 + 8)
        .map(|s| i64::from_ne_bytes(s.try_into().unwrap()))
        .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("int64 buffer too short"))
}

fn i32_at(b: &[u8], i: usize) -> PyResult<i32> {
    b.get(i * 4..i * 4 + 4)
        .map(|s| i32::from_ne_bytes(s.try_into().unwrap()))
        .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("int32 buffer too short"))
}

fn valid_at(b: &[u8], i: usize) -> PyResult<bool> {
    b.get(i).map(|&v| v != 0).ok_or_else(|| pyo3::exceptions::PyValueError::new_err("validity buffer too short"))
}

/// A list<struct<name, mysql_type, flags, value>> column (an image) as its parts.
struct Image {
    valid: usize,
    offsets: usize,
    name: BinaryArray,
    mysql_type: BinaryArray,
    flags: usize,
    value: BinaryArray,
}

/// One column of an image, read from the buffers.
struct Col<'a> {
    name: &'a [u8],
    mysql_type: Option<&'a [u8]>,
    flags: i32,
    value: Option<&'a [u8]>,
}

struct Batch<'a> {
    bufs: &'a [PyBuffer<u8>],
}

impl Batch<'_> {
    fn b(&self, i: usize) -> &[u8] {
        buffer_bytes(&self.bufs[i])
    }

    /// The columns of image `img` of event `e`, or None when the image is null.
    fn columns<'s>(&'s self, img: &'s Image, e: usize) -> PyResult<Option<Vec<Col<'s>>>> {
        if !valid_at(self.b(img.valid), e)? {
            return Ok(None);
        }
        let offsets = self.b(img.offsets);
        let (start, end) = (i32_at(offsets, e)? as usize, i32_at(offsets, e + 1)? as usize);
        let flags = self.b(img.flags);
        let mut cols = Vec::with_capacity(end.saturating_sub(start));
        for j in start..end {
            cols.push(Col {
                name: img.name.get(j)?.unwrap_or(b""),
                mysql_type: img.mysql_type.get(j)?,
                flags: i32_at(flags, j)?,
                value: img.value.get(j)?,
            });
        }
        Ok(Some(cols))
    }
}

impl CanalJsonEncoder {
    fn rule(&mut self, py: Python<'_>, type_text: Option<&[u8]>, flags: i32) -> PyResult<Option<usize>> {
        let Some(type_text) = type_text.map(std::str::from_utf8).transpose().ok() else { return Ok(None) };
        let key = (type_text.map(str::to_owned), flags);
        if let Some(&i) = self.by_type.get(&key) {
            return Ok(Some(i));
        }
        let out = self.rule_fn.bind(py).call1((type_text, flags))?;
        let (text, code, promotion, binary): (String, i64, Option<(u128, i64)>, bool) = out.extract()?;
        let mut type_json = Vec::new();
        quote(&mut type_json, text.as_bytes());
        let promotion = promotion.map(|(limit, code)| (limit.to_string().into_bytes(), code));
        self.rules.push(Rule { type_json, code, promotion, binary });
        self.by_type.insert(key, self.rules.len() - 1);
        Ok(Some(self.rules.len() - 1))
    }

    /// The columns' (rule index, rendered value); None: the event goes to Python.
    fn render(&mut self, py: Python<'_>, cols: &[Col<'_>]) -> PyResult<Option<Vec<(usize, i64, Vec<u8>)>>> {
        let mut out = Vec::with_capacity(cols.len());
        for c in cols {
            if std::str::from_utf8(c.name).is_err() {
                return Ok(None);
            }
            let Some(r) = self.rule(py, c.mysql_type, c.flags)? else { return Ok(None) };
            let rule = &self.rules[r];
            let mut code = rule.code;
            let mut json = Vec::new();
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
                        quote_latin1(&mut json, raw);
                    } else if std::str::from_utf8(raw).is_ok() {
                        quote(&mut json, raw);
                    } else {
                        return Ok(None); // Python's "replace" decoding: left to the reference
                    }
                }
            }
            out.push((r, code, json));
        }
        Ok(Some(out))
    }
}

fn rows_json(out: &mut Vec<u8>, cols: &[Col<'_>], rendered: &[(usize, i64, Vec<u8>)], keep: impl Fn(usize) -> bool) {
    out.extend_from_slice(b"[{");
    let mut first = true;
    for (i, (c, (_, _, json))) in cols.iter().zip(rendered).enumerate() {
        if !keep(i) {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        quote(out, c.name);
        out.push(b':');
        out.extend_from_slice(json);
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
        CanalJsonEncoder { rule_fn: rule, tidb_extension, only_updated, rules: Vec::new(), by_type: HashMap::new() }
    }

    /// Encode `n` events given as Arrow buffers (spark_apps/native_encode.py `_arrays`): a list
    /// of one message value (bytes) per event, None for each event the Python codec must encode.
    fn encode<'py>(&mut self, py: Python<'py>, n: usize, cols: Bound<'py, PyDict>) -> PyResult<Bound<'py, PyList>> {
        let kind = binary(&cols, "kind")?;
        let op = binary(&cols, "op")?;
        let database = binary(&cols, "database")?;
        let table = binary(&cols, "table")?;
        let key_names = binary(&cols, "key_names")?;
        let extras_keys = binary(&cols, "extras_keys")?;
        let extras_values = binary(&cols, "extras_values")?;
        let mut keep = Vec::new();
        let commit_valid = fixed(&cols, "commit_ts_valid", &mut keep)?;
        let commit = fixed(&cols, "commit_ts", &mut keep)?;
        let es_valid = fixed(&cols, "execute_ts_ms_valid", &mut keep)?;
        let es_values = fixed(&cols, "execute_ts_ms", &mut keep)?;
        let keys_valid = fixed(&cols, "key_valid", &mut keep)?;
        let keys_offsets = fixed(&cols, "key_offsets", &mut keep)?;
        let extras_valid = fixed(&cols, "extras_valid", &mut keep)?;
        let extras_offsets = fixed(&cols, "extras_offsets", &mut keep)?;
        let mut images = Vec::new();
        for side in ["before", "after"] {
            images.push(Image {
                valid: fixed(&cols, &format!("{side}_valid"), &mut keep)?,
                offsets: fixed(&cols, &format!("{side}_offsets"), &mut keep)?,
                name: binary(&cols, &format!("{side}_name"))?,
                mysql_type: binary(&cols, &format!("{side}_type"))?,
                flags: fixed(&cols, &format!("{side}_flags"), &mut keep)?,
                value: binary(&cols, &format!("{side}_value"))?,
            });
        }
        let batch = Batch { bufs: &keep };
        let out = PyList::empty(py);
        for e in 0..n {
            match self.event(py, &batch, e, &kind, &op, &database, &table, &key_names, &extras_keys, &extras_values,
                             (commit_valid, commit, es_valid, es_values, keys_valid, keys_offsets, extras_valid, extras_offsets),
                             &images)? {
                Some(value) => out.append(PyBytes::new(py, &value))?,
                None => out.append(py.None())?,
            }
        }
        Ok(out)
    }
}

impl CanalJsonEncoder {
    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self, py: Python<'_>, batch: &Batch<'_>, e: usize, kind: &BinaryArray, op: &BinaryArray,
        database: &BinaryArray, table: &BinaryArray, key_names: &BinaryArray, extras_keys: &BinaryArray,
        extras_values: &BinaryArray, fx: (usize, usize, usize, usize, usize, usize, usize, usize), images: &[Image],
    ) -> PyResult<Option<Vec<u8>>> {
        let (commit_valid, commit, es_valid, es_values, keys_valid, keys_offsets, extras_valid, extras_offsets) = fx;
        if kind.get(e)? != Some(b"row") {
            return Ok(None); // DDL and watermarks: the reference
        }
        let (name, delete, update): (&[u8], bool, bool) = match op.get(e)? {
            Some(b"insert") => (b"\"INSERT\"", false, false),
            Some(b"update") => (b"\"UPDATE\"", false, true),
            Some(b"delete") => (b"\"DELETE\"", true, false),
            _ => return Ok(None),
        };
        let before = batch.columns(&images[0], e)?;
        let after = batch.columns(&images[1], e)?;
        let image = if delete { &before } else { &after };
        let Some(image) = image.as_ref().filter(|cols| !cols.is_empty()) else { return Ok(None) };
        let commit_ts = if valid_at(batch.b(commit_valid), e)? { Some(i64_at(batch.b(commit), e)?) } else { None };
        // extras: a map, the last of equal keys wins (dict(pairs))
        let (mut id, mut ts): (Option<&[u8]>, Option<&[u8]>) = (None, None);
        if valid_at(batch.b(extras_valid), e)? {
            let o = batch.b(extras_offsets);
            for j in i32_at(o, e)? as usize..i32_at(o, e + 1)? as usize {
                match extras_keys.get(j)? {
                    Some(b"canal.id") => id = extras_values.get(j)?,
                    Some(b"canal.ts") => ts = extras_values.get(j)?,
                    _ => {}
                }
            }
        }
        let es = if valid_at(batch.b(es_valid), e)? {
            i64_at(batch.b(es_values), e)?
        } else {
            commit_ts.unwrap_or(0) >> 18
        };
        let mut out = Vec::with_capacity(256 + image.len() * 48);
        out.extend_from_slice(b"{\"id\":");
        match id {
            None => out.push(b'0'),
            Some(text) => {
                // int(text) in Python: only plain decimal of at most 18 digits is taken here
                let digits = text.strip_prefix(b"-").unwrap_or(text);
                if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
                    return Ok(None);
                }
                let v: i64 = std::str::from_utf8(text).unwrap().parse().unwrap();
                push_int(&mut out, v);
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
        if valid_at(batch.b(keys_valid), e)? {
            let o = batch.b(keys_offsets);
            out.push(b'[');
            for (k, j) in (i32_at(o, e)? as usize..i32_at(o, e + 1)? as usize).enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                let text = key_names.get(j)?.unwrap_or(b"");
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
        let Some(rendered) = self.render(py, image)? else { return Ok(None) };
        for (i, (c, (_, code, _))) in image.iter().zip(&rendered).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            quote(&mut out, c.name);
            out.push(b':');
            push_int(&mut out, *code);
        }
        out.extend_from_slice(b"},\"mysqlType\":{");
        for (i, (c, (r, _, _))) in image.iter().zip(&rendered).enumerate() {
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
            let Some(old_rendered) = self.render(py, old)? else { return Ok(None) };
            out.extend_from_slice(b",\"old\":");
            if self.only_updated {
                let mut new_values: HashMap<&[u8], (Option<&[u8]>, Option<&[u8]>)> = HashMap::new();
                for c in image {
                    new_values.insert(c.name, (c.value, c.mysql_type));
                }
                rows_json(&mut out, old, &old_rendered, |i| {
                    new_values.get(old[i].name) != Some(&(old[i].value, old[i].mysql_type))
                });
            } else {
                rows_json(&mut out, old, &old_rendered, |_| true);
            }
            out.extend_from_slice(b",\"data\":");
        } else {
            out.extend_from_slice(b",\"old\":null,\"data\":");
        }
        rows_json(&mut out, image, &rendered, |_| true);
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

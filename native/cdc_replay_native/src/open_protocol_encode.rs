//! The open-protocol encoder: row events of an Arrow batch in, each event's key JSON and value
//! JSON out (uncompressed), byte for byte what codecs/open_protocol.py `_row_entry` writes for
//! the same event. The batching into Kafka messages (length-prefixed frames, max-batch-size,
//! max-message-bytes) and the value compression stay in Python (`OpenProtocolCodec.frame`).
//! The Python encoder is the reference: every event this one is not sure about (DDL,
//! watermarks, a missing image or commit ts, text that is not UTF-8, an integer out of range,
//! a float Python's `float()` might read otherwise or whose shortest text is a tie, ...) comes back as None and the Python codec encodes it.

use std::collections::{HashMap, HashSet};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::encode_common::{hex_byte, plain_float, plain_int, quote_go, Col, Events, AFTER, BEFORE};
use crate::push_int;

// value rules (codecs/open_protocol.py `_K_*`): the float rules are their bit width
const K_INT: u8 = 0;
const K_TEXT: u8 = 1;
const K_QUOTED: u8 = 2;
const K_BASE64: u8 = 3;
const K_FLOAT32: u8 = 32;
const K_FLOAT64: u8 = 64;

/// What a column's (mysql_type, flags) imply, from the Python rule once per pair.
#[derive(Clone, Copy)]
struct Rule {
    code: i64,
    flags: i64, // before the handle-key bit of the event's key columns
    kind: u8,
    low: i128, // an integer's range
    high: i128,
}

#[pyclass]
pub(crate) struct OpenProtocolEncoder {
    rule_fn: Py<PyAny>,
    handle_key: i64,
    only_updated: bool,
    delete_handle_only: bool,
    by_type: HashMap<(Option<Vec<u8>>, i32), Option<Rule>>,
    printable_fn: Py<PyAny>,
    printable: HashMap<char, bool>,
}

fn quote(out: &mut Vec<u8>, text: &[u8]) {
    quote_go(out, text, true)
}

/// Go's `strconv.Quote` of raw bytes (codecs/open_protocol.py `go_quote`), without the quotes;
/// whether a character above U+007F is printable is Python's `str.isprintable` (`printable`).
fn go_quote(out: &mut Vec<u8>, raw: &[u8], printable: &mut dyn FnMut(char) -> PyResult<bool>) -> PyResult<()> {
    let mut rest = raw;
    loop {
        let (valid, bad) = match std::str::from_utf8(rest) {
            Ok(text) => (text, 0),
            Err(err) => {
                let upto = err.valid_up_to();
                (std::str::from_utf8(&rest[..upto]).unwrap(), err.error_len().unwrap_or(rest.len() - upto))
            }
        };
        for ch in valid.chars() {
            let code = ch as u32;
            match ch {
                '\x07' => out.extend_from_slice(b"\\a"),
                '\x08' => out.extend_from_slice(b"\\b"),
                '\x0c' => out.extend_from_slice(b"\\f"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\r' => out.extend_from_slice(b"\\r"),
                '\t' => out.extend_from_slice(b"\\t"),
                '\x0b' => out.extend_from_slice(b"\\v"),
                '"' => out.extend_from_slice(b"\\\""),
                '\\' => out.extend_from_slice(b"\\\\"),
                ' '..='~' => out.push(code as u8),
                '\0'..='\x1f' | '\x7f' => {
                    out.extend_from_slice(b"\\x");
                    hex_byte(out, code as u8);
                }
                _ if printable(ch)? => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                _ => {
                    let (escape, width): (&[u8], u32) = if code < 0x10000 { (b"\\u", 2) } else { (b"\\U", 4) };
                    out.extend_from_slice(escape);
                    for shift in (0..width).rev() {
                        hex_byte(out, (code >> (8 * shift)) as u8);
                    }
                }
            }
        }
        let start = valid.len();
        for &b in &rest[start..start + bad] {
            out.extend_from_slice(b"\\x"); // a byte that is not UTF-8
            hex_byte(out, b);
        }
        rest = &rest[start + bad..];
        if rest.is_empty() {
            return Ok(());
        }
    }
}

/// Whether `value` (exact, as an f64) lies exactly halfway between the shortest text `text`
/// and its neighbour one unit in its last digit away: there Rust rounds up, numpy to even.
pub(crate) fn tie(value: f64, text: &str) -> bool {
    if value == 0.0 {
        return false;
    }
    // value = m * 2^e, m odd
    let bits = value.abs().to_bits();
    let (raw_exp, frac) = ((bits >> 52) as i64, bits & ((1 << 52) - 1));
    let (mut m, mut e) = if raw_exp == 0 { (frac, -1074) } else { (frac | 1 << 52, raw_exp - 1075) };
    let zeros = m.trailing_zeros();
    m >>= zeros;
    e += zeros as i64;
    // text = d * 10^j
    let text = text.trim_start_matches('-');
    let (mantissa, mut j) = match text.split_once('e') {
        Some((mantissa, exp)) => (mantissa, exp.parse::<i64>().unwrap_or(0)),
        None => (text, 0),
    };
    let mut digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    j -= mantissa.split_once('.').map_or(0, |(_, f)| f.len() as i64);
    while digits.len() > 1 && digits.ends_with('0') {
        digits.pop();
        j += 1;
    }
    let Ok(d) = digits.parse::<u128>() else { return true };
    // a midpoint (10d ± 5) * 10^(j-1) = c * 5^k * 2^k with c odd equals m * 2^e iff k == e and
    // the odd parts agree: c * 5^k == m (k >= 0) or c == m * 5^-k (k < 0)
    let k = j - 1;
    if k != e {
        return false;
    }
    let five = |n: i64| 5u128.checked_pow(n as u32);
    [10 * d + 5, 10 * d - 5].iter().any(|&c| {
        if k >= 0 {
            five(k).and_then(|p| c.checked_mul(p)) == Some(m as u128)
        } else {
            five(-k).and_then(|p| p.checked_mul(m as u128)) == Some(c)
        }
    })
}

/// A FLOAT / DOUBLE value as Go's encoding/json writes it (`go_float`); None: Python decides.
fn go_float(out: &mut Vec<u8>, raw: &[u8], bits: u8) -> bool {
    let Some(value) = plain_float(raw) else { return false };
    if !value.is_finite() {
        return false;
    }
    let (exact, text) = if bits == 32 {
        if value.abs() >= 3.4028235677973366e38 {
            return false;
        }
        let number = value as f32;
        let magnitude = number.abs();
        let exponent = magnitude != 0.0 && (magnitude < 1e-6f64 as f32 || magnitude >= 1e21f64 as f32);
        (number as f64, if exponent { format!("{number:e}") } else { format!("{number}") })
    } else {
        let magnitude = value.abs();
        let exponent = magnitude != 0.0 && !(1e-6..1e21).contains(&magnitude);
        (value, if exponent { format!("{value:e}") } else { format!("{value}") })
    };
    if tie(exact, &text) {
        return false; // halfway between two shortest texts: Python's rounding (half to even) decides
    }
    match text.find('e') {
        Some(at) if text.as_bytes()[at + 1] != b'-' => {
            out.extend_from_slice(&text.as_bytes()[..=at]);
            out.push(b'+');
            out.extend_from_slice(&text.as_bytes()[at + 1..]);
        }
        _ => out.extend_from_slice(text.as_bytes()),
    }
    true
}

impl OpenProtocolEncoder {
    fn rule(&mut self, py: Python<'_>, type_text: Option<&[u8]>, flags: i32) -> PyResult<Option<Rule>> {
        let key = (type_text.map(<[u8]>::to_vec), flags);
        if let Some(rule) = self.by_type.get(&key) {
            return Ok(*rule);
        }
        let rule = match type_text.map(std::str::from_utf8).transpose() {
            Err(_) => None,
            Ok(text) => {
                let out: Option<(i64, i64, u8, i128, i128)> = self.rule_fn.bind(py).call1((text, flags))?.extract()?;
                out.map(|(code, flags, kind, low, high)| Rule { code, flags, kind, low, high })
            }
        };
        self.by_type.insert(key, rule);
        Ok(rule)
    }

    /// One u / p / d object (`_columns_json`): names sorted byte-wise; false: Python decides.
    fn columns(&mut self, py: Python<'_>, out: &mut Vec<u8>, cols: &[&Col<'_>], keys: &HashSet<&[u8]>) -> PyResult<bool> {
        let mut sorted: Vec<&Col<'_>> = cols.to_vec();
        sorted.sort_by(|a, b| a.name.cmp(b.name));
        if sorted.windows(2).any(|w| w[0].name == w[1].name) || sorted.iter().any(|c| std::str::from_utf8(c.name).is_err()) {
            return Ok(false);
        }
        out.push(b'{');
        for (i, c) in sorted.iter().enumerate() {
            let Some(rule) = self.rule(py, c.mysql_type, c.flags)? else { return Ok(false) };
            let mut flags = rule.flags;
            if keys.contains(c.name) {
                flags |= self.handle_key;
            }
            if i > 0 {
                out.push(b',');
            }
            quote(out, c.name);
            out.extend_from_slice(b":{\"t\":");
            push_int(out, rule.code);
            if flags & self.handle_key != 0 {
                out.extend_from_slice(b",\"h\":true");
            }
            out.extend_from_slice(b",\"f\":");
            push_int(out, flags);
            out.extend_from_slice(b",\"v\":");
            let Some(raw) = c.value.filter(|_| rule.code != 6) else {
                out.extend_from_slice(b"null}");
                continue;
            };
            let ok = match rule.kind {
                K_INT => match plain_int(raw, 38) {
                    Some(n) if rule.low <= n && n <= rule.high => {
                        out.extend_from_slice(n.to_string().as_bytes());
                        true
                    }
                    _ => false,
                },
                K_TEXT => std::str::from_utf8(raw).is_ok() && {
                    quote(out, raw);
                    true
                },
                K_QUOTED => {
                    let mut text = Vec::with_capacity(raw.len() + 8);
                    let (cache, printable_fn) = (&mut self.printable, &self.printable_fn);
                    go_quote(&mut text, raw, &mut |ch| match cache.get(&ch) {
                        Some(&known) => Ok(known),
                        None => {
                            let known: bool = printable_fn.bind(py).call1((ch as u32,))?.extract()?;
                            cache.insert(ch, known);
                            Ok(known)
                        }
                    })?;
                    quote(out, &text);
                    true
                }
                K_BASE64 => {
                    out.push(b'"');
                    out.extend_from_slice(STANDARD.encode(raw).as_bytes());
                    out.push(b'"');
                    true
                }
                K_FLOAT32 | K_FLOAT64 => go_float(out, raw, rule.kind),
                _ => false,
            };
            if !ok {
                return Ok(false);
            }
            out.push(b'}');
        }
        out.push(b'}');
        Ok(true)
    }

    /// (key JSON, value JSON) of row event `e`; None: Python encodes it.
    fn event(&mut self, py: Python<'_>, events: &Events, e: usize) -> PyResult<Option<(Vec<u8>, Vec<u8>)>> {
        if events.kind.get(e)? != Some(b"row") {
            return Ok(None); // DDL and watermarks: the reference
        }
        let Some(ts) = events.commit_ts(e)? else { return Ok(None) };
        let mut key = Vec::with_capacity(96);
        key.extend_from_slice(b"{\"ts\":");
        push_int(&mut key, ts);
        for (field, array) in [(&b",\"scm\":"[..], &events.database), (b",\"tbl\":", &events.table)] {
            if let Some(text) = array.get(e)?.filter(|t| !t.is_empty()) {
                if std::str::from_utf8(text).is_err() {
                    return Ok(None);
                }
                key.extend_from_slice(field);
                quote(&mut key, text);
            }
        }
        let [rid, ptn] = events.extras(e, [b"open.rid", b"open.ptn"])?;
        for (field, text, always) in [(&b",\"rid\":"[..], rid, false), (b",\"ptn\":", ptn, true)] {
            if let Some(text) = text {
                let Some(n) = plain_int(text, 18) else { return Ok(None) };
                if n != 0 || always {
                    key.extend_from_slice(field);
                    push_int(&mut key, n as i64);
                }
            }
        }
        key.extend_from_slice(b",\"t\":1}");

        let keys: HashSet<&[u8]> = events.keys(e)?.unwrap_or_default().into_iter().collect();
        let before = events.columns(BEFORE, e)?.filter(|c| !c.is_empty());
        let after = events.columns(AFTER, e)?.filter(|c| !c.is_empty());
        let mut value = Vec::with_capacity(256);
        match events.op.get(e)? {
            Some(b"insert") | Some(b"update") => {
                let Some(after) = after else { return Ok(None) };
                value.extend_from_slice(b"{\"u\":");
                if !self.columns(py, &mut value, &after.iter().collect::<Vec<_>>(), &keys)? {
                    return Ok(None);
                }
                if events.op.get(e)? == Some(b"update") {
                    if let Some(before) = before {
                        let mut old: Vec<&Col<'_>> = before.iter().collect();
                        if self.only_updated {
                            let mut new_values = HashMap::new();
                            for c in &after {
                                let Some(rule) = self.rule(py, c.mysql_type, c.flags)? else { return Ok(None) };
                                new_values.insert(c.name, (c.value, rule.code));
                            }
                            let mut codes = Vec::with_capacity(old.len());
                            for c in &old {
                                let Some(rule) = self.rule(py, c.mysql_type, c.flags)? else { return Ok(None) };
                                codes.push(rule.code);
                            }
                            old = old.into_iter().zip(codes)
                                .filter(|(c, code)| new_values.get(c.name) != Some(&(c.value, *code)))
                                .map(|(c, _)| c)
                                .collect();
                        }
                        if !old.is_empty() {
                            value.extend_from_slice(b",\"p\":");
                            if !self.columns(py, &mut value, &old, &keys)? {
                                return Ok(None);
                            }
                        }
                    }
                }
            }
            Some(b"delete") => {
                let Some(before) = before else { return Ok(None) };
                let mut image: Vec<&Col<'_>> = before.iter().collect();
                if self.delete_handle_only {
                    image.retain(|c| c.flags as i64 & self.handle_key != 0 || keys.contains(c.name));
                    if image.is_empty() {
                        return Ok(None);
                    }
                }
                value.extend_from_slice(b"{\"d\":");
                if !self.columns(py, &mut value, &image, &keys)? {
                    return Ok(None);
                }
            }
            _ => return Ok(None),
        }
        value.push(b'}');
        Ok(Some((key, value)))
    }
}

#[pymethods]
impl OpenProtocolEncoder {
    /// `rule(type_text, flags) -> (type code, flags, value rule, int low, int high) or None`
    /// (codecs/open_protocol.py `compiled_rule`); `handle_key`: the handle-key flag bit;
    /// `only_updated`: only-output-updated-columns; `delete_handle_only`:
    /// delete-only-output-handle-key-columns; `printable(code point) -> bool`: Python's
    /// `str.isprintable` of the character, asked once per character.
    #[new]
    fn new(rule: Py<PyAny>, handle_key: i64, only_updated: bool, delete_handle_only: bool, printable: Py<PyAny>) -> Self {
        OpenProtocolEncoder {
            rule_fn: rule, handle_key, only_updated, delete_handle_only, by_type: HashMap::new(),
            printable_fn: printable, printable: HashMap::new(),
        }
    }

    /// Encode `n` events given as Arrow buffers (spark_apps/native_encode.py `_arrays`): per
    /// event a (key JSON, value JSON) pair of bytes, or None for an event Python must encode.
    fn encode<'py>(&mut self, py: Python<'py>, n: usize, cols: Bound<'py, PyDict>) -> PyResult<Bound<'py, PyList>> {
        let events = Events::new(&cols)?;
        let out = PyList::empty(py);
        for e in 0..n {
            match self.event(py, &events, e)? {
                Some((key, value)) => {
                    out.append(PyTuple::new(py, [PyBytes::new(py, &key), PyBytes::new(py, &value)])?)?
                }
                None => out.append(py.None())?,
            }
        }
        Ok(out)
    }
}

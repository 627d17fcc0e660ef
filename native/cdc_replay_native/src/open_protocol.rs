//! TiCDC Open Protocol (codecs/open_protocol.py is the reference): batches of (key, value)
//! messages in, Arrow buffers of the canonical events out, with no Python object per value.
//!
//! A message is decoded here only when every check of the Python codec passes and every event
//! would pass `archive_io.event_problem`; anything else (DDL, claim-check and handle-key-only
//! events, a float column's `-0`, base64 that is not canonical, an
//! integer too large to convert to a float exactly, a malformed frame or value) goes back to the
//! Python codec, which writes the events or the quarantine row. What a (type code, flags) pair
//! means comes from the codec's own `_column_kind`, once per distinct pair.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::archive::Text;
use crate::canal_typed::{Checked, CheckedVisitor, Loose};
use crate::craft::{shortest_f32, shortest_f64};
use crate::{decode_batch, push_int, push_uint, BinaryArg, BinaryArray, Builders, Fallback, R};

/// Truthiness the way the Python codec tests `key.get(...)` for the fields it reads so (a
/// float goes to Python).
fn truthy(v: &Option<Loose>) -> R<bool> {
    match v {
        None | Some(Loose::Null) => Ok(false),
        Some(Loose::Bool(b)) => Ok(*b),
        Some(Loose::Str(s)) => Ok(!s.is_empty()),
        Some(Loose::UInt(n)) => Ok(*n != 0),
        Some(Loose::NegInt(_)) => Ok(true),
        Some(Loose::Float(_)) => Err(Fallback),
        Some(Loose::Array(any)) | Some(Loose::Object(any)) => Ok(*any),
    }
}

const ROW: u64 = 1;
const RESOLVED: u64 = 3;
const HANDLE_KEY: i64 = 1 << 1;
const EXACT_INT: u64 = 1 << 53; // integers a float64 holds exactly

/// The value rules of `open_protocol._column_kind`.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Int,
    Text,
    Quoted,
    Base64,
    Null,
    Float32,
    Float64,
}

struct TypeRule {
    mysql_type: String,
    kind: Kind,
}

#[derive(Clone, Copy)]
struct Col<'a> {
    name: &'a str,
    rule: usize,
    flags: i32,
    value: Option<(usize, usize)>, // the value's bytes in the decoder's `values`
}

#[pyclass]
pub(crate) struct OpenProtocolDecoder {
    rule_fn: Py<PyAny>,
    rules: Vec<TypeRule>,
    by_code: HashMap<(u8, i32), usize>,
    recent: Vec<(u8, i32, usize)>, // (code, flags, rule) of the last image's columns, by position
    values: Vec<u8>,               // the message's column values, one after the other
    names: Vec<String>,            // the column names of the last image, which has no name twice
}

// ------------------------------------------------------------------------------ the value JSON
//
// A row value is read into these types instead of `serde_json::Value`: strings borrowed from
// the message when they have no escapes, no map per column object. They keep what the
// reference's checks need: the JSON type of every field it reads (`canal_typed::Loose`; a field
// of another type sends the record to Python), and Python's dict rule that a repeated key's last
// value counts (a repeated column name goes to Python). Fields it does not read are checked
// (`canal_typed::Checked`), not skipped, so a value `orjson` refuses still reaches Python.

/// Skips a sequence, checking it as `orjson` would.
fn consume_seq<'de, A: SeqAccess<'de>>(seq: A) -> Result<(), A::Error> {
    CheckedVisitor.visit_seq(seq).map(|_| ())
}

/// A column object's fields (`t`, `f`, `h`, `v`; others are ignored, as the reference does),
/// or `None` when the column is not a JSON object. The type code and flags are kept as what the
/// decoder uses of them (Err: not an integer in range, the record goes to Python), `h` as
/// whether it is `true`: a column is small to move.
#[derive(Default)]
struct ColJ<'a> {
    t: Option<Result<u8, ()>>,
    f: Option<Result<i64, ()>>,
    h: bool,
    v: Option<Loose<'a>>,
}

/// A `u` / `p` / `d` field: null (or absent), its columns, or something else (`NotObject`).
enum Part<'a> {
    Null,
    Cols(Vec<(Cow<'a, str>, Option<ColJ<'a>>)>),
    NotObject,
}

type Cols<'a> = [(Cow<'a, str>, Option<ColJ<'a>>)];

impl<'a> Part<'a> {
    /// The columns when there are some (`{}` is falsy in Python), None when null or empty.
    fn columns(&self) -> R<Option<&Cols<'a>>> {
        match self {
            Part::Null => Ok(None),
            Part::Cols(c) => Ok((!c.is_empty()).then_some(c.as_slice())),
            Part::NotObject => Err(Fallback),
        }
    }
}

struct ColVisitor;

impl<'de> Visitor<'de> for ColVisitor {
    type Value = Option<ColJ<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a column object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut c = ColJ::default();
        while let Some(Text(k)) = map.next_key::<Text>()? {
            match k.as_ref() {
                "t" => {
                    let code = int_of_j(&map.next_value::<Loose>()?).filter(|c| (0..=255).contains(c));
                    c.t = Some(code.map(|c| c as u8).ok_or(()));
                }
                "f" => {
                    let flags = int_of_j(&map.next_value::<Loose>()?).filter(|f| (0..1 << 31).contains(f));
                    c.f = Some(flags.map(|f| f as i64).ok_or(()));
                }
                "h" => c.h = matches!(map.next_value::<Loose>()?, Loose::Bool(true)),
                "v" => c.v = Some(map.next_value::<Loose>()?),
                _ => {
                    map.next_value::<Checked>()?;
                }
            }
        }
        Ok(Some(c))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        consume_seq(seq)?;
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
}

struct Column<'a>(Option<ColJ<'a>>);

impl<'de> Deserialize<'de> for Column<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ColVisitor).map(Column)
    }
}

struct PartVisitor;

impl<'de> Visitor<'de> for PartVisitor {
    type Value = Part<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an image object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Part<'de>, A::Error> {
        let mut cols = Vec::with_capacity(16);
        while let Some(Text(k)) = map.next_key::<Text>()? {
            let Column(c) = map.next_value::<Column>()?;
            cols.push((k, c));
        }
        Ok(Part::Cols(cols))
    }
    fn visit_unit<E>(self) -> Result<Part<'de>, E> {
        Ok(Part::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Part<'de>, A::Error> {
        consume_seq(seq)?;
        Ok(Part::NotObject)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Part<'de>, E> {
        Ok(Part::NotObject)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Part<'de>, E> {
        Ok(Part::NotObject)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Part<'de>, E> {
        Ok(Part::NotObject)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Part<'de>, E> {
        Ok(Part::NotObject)
    }
    fn visit_str<E>(self, _: &str) -> Result<Part<'de>, E> {
        Ok(Part::NotObject)
    }
}

impl<'de> Deserialize<'de> for Part<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PartVisitor)
    }
}

/// A row value: its `u`, `p`, `d` (a repeated field's last value counts; others are ignored).
struct RowMsg<'a> {
    u: Part<'a>,
    p: Part<'a>,
    d: Part<'a>,
}

struct RowVisitor;

impl<'de> Visitor<'de> for RowVisitor {
    type Value = RowMsg<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a row value object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RowMsg<'de>, A::Error> {
        let mut m = RowMsg { u: Part::Null, p: Part::Null, d: Part::Null };
        while let Some(Text(k)) = map.next_key::<Text>()? {
            let slot = match k.as_ref() {
                "u" => &mut m.u,
                "p" => &mut m.p,
                "d" => &mut m.d,
                _ => {
                    map.next_value::<Checked>()?;
                    continue;
                }
            };
            *slot = map.next_value::<Part>()?;
        }
        Ok(m)
    }
}

impl<'de> Deserialize<'de> for RowMsg<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(RowVisitor) // anything but an object is an error: Python's too
    }
}

fn int_of_j(v: &Loose) -> Option<i128> {
    match v {
        Loose::NegInt(i) => Some(*i as i128),
        Loose::UInt(u) => Some(*u as i128),
        _ => None,
    }
}

/// An 8-byte big-endian length and the entry it frames: (start, end) of the entry.
fn frame(buf: &[u8], pos: usize) -> R<(usize, usize)> {
    if buf.len() < pos + 8 {
        return Err(Fallback);
    }
    let length = u64::from_be_bytes(buf[pos..pos + 8].try_into().unwrap());
    let start = pos + 8;
    if length > (buf.len() - start) as u64 {
        return Err(Fallback);
    }
    Ok((start, start + length as usize))
}

/// A database or table name: absent, empty (quarantined as a row without names) or not a
/// string goes to Python.
fn name_of<'k>(field: &'k Option<Loose<'_>>) -> R<&'k str> {
    match field {
        Some(Loose::Str(s)) if !s.is_empty() => Ok(s),
        _ => Err(Fallback),
    }
}

/// An event key's fields the decoder reads, typed (no map, strings borrowed from the key);
/// the others are checked as `orjson` would, not built. A repeated field's last value counts,
/// as in the reference's dict.
#[derive(Default)]
struct KeyMsg<'a> {
    ts: Option<Loose<'a>>,
    t: Option<Loose<'a>>,
    scm: Option<Loose<'a>>,
    tbl: Option<Loose<'a>>,
    rid: Option<Loose<'a>>,
    ptn: Option<Loose<'a>>,
    ohk: Option<Loose<'a>>,
    ccl: Option<Loose<'a>>,
}

impl<'de> Deserialize<'de> for KeyMsg<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyMsg<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an event key object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyMsg<'de>, A::Error> {
                let mut m = KeyMsg::default();
                while let Some(Text(k)) = map.next_key::<Text>()? {
                    let slot = match k.as_ref() {
                        "ts" => &mut m.ts,
                        "t" => &mut m.t,
                        "scm" => &mut m.scm,
                        "tbl" => &mut m.tbl,
                        "rid" => &mut m.rid,
                        "ptn" => &mut m.ptn,
                        "ohk" => &mut m.ohk,
                        "ccl" => &mut m.ccl,
                        _ => {
                            map.next_value::<Checked>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value::<Loose>()?);
                }
                Ok(m)
            }
        }
        d.deserialize_map(V) // anything but an object is an error: Python's too
    }
}

fn hex(c: u8) -> R<u8> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(Fallback),
    }
}

/// `go_unquote`: the bytes of Go's strconv.Unquote; anything the reference rejects goes to Python.
fn go_unquote(text: &str, out: &mut Vec<u8>) -> R<()> {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'"' | b'\n' => return Err(Fallback),
            b'\\' => {
                let e = *b.get(i + 1).ok_or(Fallback)?;
                i += 2;
                match e {
                    b'x' => {
                        if i + 2 > b.len() {
                            return Err(Fallback);
                        }
                        out.push(hex(b[i])? << 4 | hex(b[i + 1])?);
                        i += 2;
                    }
                    b'0'..=b'7' => {
                        if i + 2 > b.len() || !(b'0'..=b'7').contains(&b[i]) || !(b'0'..=b'7').contains(&b[i + 1]) {
                            return Err(Fallback);
                        }
                        let v = (e - b'0') as u32 * 64 + (b[i] - b'0') as u32 * 8 + (b[i + 1] - b'0') as u32;
                        if v > 255 {
                            return Err(Fallback);
                        }
                        out.push(v as u8);
                        i += 2;
                    }
                    b'u' | b'U' => {
                        let n = if e == b'u' { 4 } else { 8 };
                        if i + n > b.len() {
                            return Err(Fallback);
                        }
                        let mut rune: u32 = 0;
                        for &h in &b[i..i + n] {
                            rune = rune << 4 | hex(h)? as u32;
                        }
                        let ch = char::from_u32(rune).ok_or(Fallback)?; // None: above U+10FFFF or a surrogate
                        out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                        i += n;
                    }
                    b'a' => out.push(0x07),
                    b'b' => out.push(0x08),
                    b'f' => out.push(0x0C),
                    b'n' => out.push(b'\n'),
                    b'r' => out.push(b'\r'),
                    b't' => out.push(b'\t'),
                    b'v' => out.push(0x0B),
                    b'\\' => out.push(b'\\'),
                    b'"' => out.push(b'"'),
                    _ => return Err(Fallback),
                }
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(())
}

fn b64(c: u8) -> R<u32> {
    Ok(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return Err(Fallback),
    } as u32)
}

/// Canonical padded base64 (what Go's encoding/json writes for []byte); anything else goes to
/// Python's `binascii.a2b_base64(strict_mode=True)`.
fn base64(text: &str, out: &mut Vec<u8>) -> R<()> {
    let b = text.as_bytes();
    if !b.len().is_multiple_of(4) {
        return Err(Fallback);
    }
    for (q, chunk) in b.chunks(4).enumerate() {
        let last = q + 1 == b.len() / 4;
        let pad = if last { chunk.iter().rev().take_while(|&&c| c == b'=').count() } else { 0 };
        if pad > 2 {
            return Err(Fallback);
        }
        let mut n: u32 = 0;
        for &c in &chunk[..4 - pad] {
            n = n << 6 | b64(c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        if pad > 0 && bytes[3 - pad] != 0 {
            return Err(Fallback); // bits after the data: not what Go writes
        }
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Ok(())
}

/// A float column's value as the float64 Python's reference converts it to.
fn float_value(v: &Loose) -> R<f64> {
    match *v {
        Loose::NegInt(i) if i.unsigned_abs() <= EXACT_INT => Ok(i as f64),
        Loose::UInt(u) if u <= EXACT_INT => Ok(u as f64),
        Loose::Float(f) => Ok(f),
        _ => Err(Fallback),
    }
}

impl OpenProtocolDecoder {
    /// The rule of the `n`th column's (type code, flags): the same pair as the last image's
    /// `n`th column needs no hash lookup (images of one table repeat).
    fn rule(&mut self, py: Python<'_>, n: usize, code: u8, flags: i64) -> R<usize> {
        if !(0..1 << 31).contains(&flags) {
            return Err(Fallback);
        }
        let flags = flags as i32;
        if let Some(&(c, f, i)) = self.recent.get(n) {
            if (c, f) == (code, flags) {
                return Ok(i);
            }
        }
        let i = self.rule_of(py, code, flags)?;
        if n < self.recent.len() {
            self.recent[n] = (code, flags, i);
        } else if n == self.recent.len() {
            self.recent.push((code, flags, i));
        }
        Ok(i)
    }

    fn rule_of(&mut self, py: Python<'_>, code: u8, flags: i32) -> R<usize> {
        if let Some(&i) = self.by_code.get(&(code, flags)) {
            return Ok(i);
        }
        let out = self.rule_fn.bind(py).call1((code, flags)).map_err(|_| Fallback)?;
        let (mysql_type, kind): (String, u8) = out.extract().map_err(|_| Fallback)?;
        let kind = match kind {
            0 => Kind::Int,
            1 => Kind::Text,
            2 => Kind::Quoted,
            3 => Kind::Base64,
            4 => Kind::Null,
            32 => Kind::Float32,
            64 => Kind::Float64,
            _ => return Err(Fallback),
        };
        self.rules.push(TypeRule { mysql_type, kind });
        self.by_code.insert((code, flags), self.rules.len() - 1);
        Ok(self.rules.len() - 1)
    }

    /// The columns of one u / p / d object and its handle-key names.
    fn image<'a>(&mut self, py: Python<'_>, columns: &'a Cols<'a>) -> R<(Vec<Col<'a>>, Vec<&'a str>)> {
        let mut image = Vec::with_capacity(columns.len());
        let mut keys = Vec::new();
        // a repeated column name goes to Python (its dict keeps the last value); the names of
        // the last image checked, in the same order, need no check
        let checked = columns.len() == self.names.len() && columns.iter().zip(&self.names).all(|((n, _), m)| n == m);
        if !checked {
            if (1..columns.len()).any(|i| columns[..i].iter().any(|(other, _)| *other == columns[i].0)) {
                return Err(Fallback);
            }
            self.names = columns.iter().map(|(n, _)| n.to_string()).collect();
        }
        for (i, (name, col)) in columns.iter().enumerate() {
            let Some(col) = col else { return Err(Fallback) };
            let (Some(Ok(code)), Some(value)) = (col.t, &col.v) else { return Err(Fallback) };
            let mut flags = match col.f {
                None => 0,
                Some(Ok(f)) => f,
                Some(Err(())) => return Err(Fallback),
            };
            if col.h {
                flags |= HANDLE_KEY;
            }
            let rule = self.rule(py, i, code, flags)?;
            let kind = self.rules[rule].kind;
            let out = &mut self.values;
            let start = out.len();
            match value {
                Loose::Null => {}
                Loose::NegInt(n) if kind == Kind::Int => push_int(out, *n),
                Loose::UInt(n) if kind == Kind::Int => push_uint(out, *n),
                Loose::Str(s) if kind == Kind::Text => out.extend_from_slice(s.as_bytes()),
                Loose::Str(s) if kind == Kind::Quoted => go_unquote(s, out)?,
                Loose::Str(s) if kind == Kind::Base64 => base64(s, out)?,
                v if kind == Kind::Float64 => shortest_f64(float_value(v)?, out)?,
                v if kind == Kind::Float32 => shortest_f32(float_value(v)?, out)?,
                _ => return Err(Fallback),
            }
            let data = (!matches!(value, Loose::Null)).then_some((start, out.len()));
            if flags & HANDLE_KEY != 0 {
                keys.push(name.as_ref());
            }
            image.push(Col { name, rule, flags: flags as i32, value: data });
        }
        Ok((image, keys))
    }

    fn push_image(&self, cols: Option<&[Col]>, after: bool, b: &mut Builders) {
        let (list, pool) = if after { (&mut b.after, &mut b.after_cols) } else { (&mut b.before, &mut b.before_cols) };
        for c in cols.unwrap_or(&[]) {
            pool.name.push_str(Some(c.name));
            pool.mysql_type.push_str(Some(&self.rules[c.rule].mysql_type));
            pool.flags.push(c.flags);
            pool.value.push(c.value.map(|(start, end)| &self.values[start..end]));
            pool.label.push(None);
        }
        list.push(cols.is_some(), pool.len());
    }

    fn row(&mut self, py: Python<'_>, key: &KeyMsg, raw: &[u8], b: &mut Builders) -> R<()> {
        if truthy(&key.ohk)? || truthy(&key.ccl)? {
            return Err(Fallback); // handle-key-only / claim-check: the Python codec
        }
        let (database, table) = (name_of(&key.scm)?, name_of(&key.tbl)?);
        let mut extras: Vec<(&str, String)> = Vec::new();
        for (field, extra) in [(&key.rid, "open.rid"), (&key.ptn, "open.ptn")] {
            match field {
                None | Some(Loose::Null) => {}
                Some(Loose::UInt(n)) if i64::try_from(*n).is_ok() => extras.push((extra, n.to_string())),
                Some(Loose::NegInt(n)) => extras.push((extra, n.to_string())),
                Some(_) => return Err(Fallback),
            }
        }
        // the reference rewrites a float column's Go `-0` (`"v":-0` before `,` or `}`) to -0.0
        static GO_ZERO: std::sync::OnceLock<memchr::memmem::Finder<'static>> = std::sync::OnceLock::new();
        let finder = GO_ZERO.get_or_init(|| memchr::memmem::Finder::new(b"\"v\":-0"));
        if finder.find_iter(raw).any(|at| matches!(raw.get(at + 6), Some(b',') | Some(b'}'))) {
            return Err(Fallback);
        }
        // UTF-8 checked once for the whole value, not string by string (the same values fail)
        let text = std::str::from_utf8(raw).map_err(|_| Fallback)?;
        let msg: RowMsg = serde_json::from_str(text).map_err(|_| Fallback)?;
        let (new, old, deleted) = (msg.u.columns()?, msg.p.columns()?, msg.d.columns()?);
        let (op, before, after, keys) = if let Some(deleted) = deleted {
            if new.is_some() || old.is_some() {
                return Err(Fallback);
            }
            let (image, keys) = self.image(py, deleted)?;
            ("delete", Some(image), None, keys)
        } else if let Some(new) = new {
            let (after, keys) = self.image(py, new)?;
            match old {
                Some(old) => {
                    let (mut before, _) = self.image(py, old)?;
                    if before.len() != after.len() || before.iter().zip(&after).any(|(b, a)| b.name != a.name) {
                        before = fill_old(before, &after);
                    }
                    ("update", Some(before), Some(after), keys)
                }
                None => ("insert", None, Some(after), keys),
            }
        } else {
            return Err(Fallback);
        };
        b.kind.push_str(Some("row"));
        b.op.push_str(Some(op));
        b.database.push_str(Some(database));
        b.table.push_str(Some(table));
        for k in &keys {
            b.keys.push_str(Some(k));
        }
        b.key_columns.push(true, b.keys.len());
        self.push_image(before.as_deref(), false, b);
        self.push_image(after.as_deref(), true, b);
        b.watermark_ts.push(None);
        b.push_extras(&extras);
        Ok(())
    }

    /// One message (key, value) into the builders (`rec`: its record index).
    pub(crate) fn message(&mut self, py: Python<'_>, key: &[u8], value: &[u8], rec: i32, b: &mut Builders) -> R<()> {
        if key.len() < 8 || u64::from_be_bytes(key[..8].try_into().unwrap()) != 1 {
            return Err(Fallback);
        }
        self.values.clear();
        let (mut key_pos, mut value_pos) = (8, 0);
        let mut index = 0;
        while key_pos < key.len() {
            let (start, end) = frame(key, key_pos)?;
            key_pos = end;
            let text = std::str::from_utf8(&key[start..end]).map_err(|_| Fallback)?;
            let msg_key: KeyMsg = serde_json::from_str(text).map_err(|_| Fallback)?;
            let ts = match msg_key.ts {
                Some(Loose::UInt(ts)) if ts < 1 << 63 => ts as i64,
                _ => return Err(Fallback),
            };
            if value_pos >= value.len() {
                return Err(Fallback);
            }
            let (vstart, vend) = frame(value, value_pos)?;
            value_pos = vend;
            let kind = match msg_key.t {
                Some(Loose::UInt(t)) => t,
                _ => return Err(Fallback),
            };
            b.rec_idx.push(rec);
            b.event_index.push(index);
            b.execute_ts.push(Some(ts >> 18));
            b.tx_id.push(None);
            match kind {
                ROW => {
                    self.row(py, &msg_key, &value[vstart..vend], b)?;
                    b.commit_ts.push(Some(ts));
                }
                RESOLVED => {
                    if vend != vstart {
                        return Err(Fallback);
                    }
                    b.push_watermark(ts);
                    b.push_extras(&[]);
                }
                _ => return Err(Fallback), // DDL (classified by the reference) or unknown
            }
            index += 1;
        }
        if index == 0 || value_pos != value.len() {
            return Err(Fallback);
        }
        Ok(())
    }
}

/// `_fill_old`: the full old row when `p` holds only some columns: a missing column was
/// unchanged and takes its value from `u`; columns only in `p` follow.
fn fill_old<'a>(old: Vec<Col<'a>>, new: &[Col<'a>]) -> Vec<Col<'a>> {
    let mut image: Vec<Col> = Vec::with_capacity(new.len().max(old.len()));
    for c in new {
        image.push(*old.iter().find(|o| o.name == c.name).unwrap_or(c));
    }
    for o in old {
        if !new.iter().any(|c| c.name == o.name) {
            image.push(o);
        }
    }
    image
}

#[pymethods]
impl OpenProtocolDecoder {
    /// `rule(type_code, flags) -> (mysql_type, value kind)` or None: open_protocol._column_kind.
    #[new]
    fn new(rule: Py<PyAny>) -> Self {
        OpenProtocolDecoder { rule_fn: rule, rules: Vec::new(), by_code: HashMap::new(), recent: Vec::new(), values: Vec::new(), names: Vec::new() }
    }

    /// As `CanalJsonDecoder.decode`, with the records' keys as a second Arrow binary array.
    fn decode<'py>(&mut self, py: Python<'py>, values: BinaryArg<'py>, keys: BinaryArg<'py>) -> PyResult<Bound<'py, PyDict>> {
        let values = BinaryArray::new(values)?;
        let keys = values.keys(keys)?;
        decode_batch(py, &values, |py, raw, rec, b| match keys.get(rec as usize)? {
            Some(key) => Ok(self.message(py, key, raw, rec, b)),
            None => Ok(Err(Fallback)), // no key: the Python codec names it
        })
    }
}

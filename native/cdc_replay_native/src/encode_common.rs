//! What the compiled encoders share (canal_json_encode.rs, open_protocol_encode.rs): the event
//! batch as spark_apps/native_encode.py `_arrays` passes it (Arrow buffers of EVENT_SCHEMA's
//! fields), Go's JSON string escaping, and Python's `int()` of plain decimal text.

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{buffer_bytes, BinaryArg, BinaryArray};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The bytes `quote_go` may write otherwise than as they are: controls, `"`, `\\`, `<`, `>`,
/// `&`, and 0xe2 (the first byte of U+2028 / U+2029).
const ESCAPED: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = true;
        b += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t[b'<' as usize] = true;
    t[b'>' as usize] = true;
    t[b'&' as usize] = true;
    t[0xe2] = true;
    t
};

/// Go's JSON escaping as TiCDC writes it: `text` is valid UTF-8. `short_bf`: `\b` and `\f` as
/// such (Go 1.22+ encoding/json, codecs/open_protocol.py) rather than `\u0008` / `\u000c`
/// (easyjson, codecs/gojson.py).
pub(crate) fn quote_go(out: &mut Vec<u8>, text: &[u8], short_bf: bool) {
    out.push(b'"');
    let mut i = 0;
    while i < text.len() {
        // the bytes written as they are, copied as one run (the usual text has no other)
        let run = text[i..].iter().position(|&b| ESCAPED[b as usize]).unwrap_or(text.len() - i);
        out.extend_from_slice(&text[i..i + run]);
        i += run;
        if i == text.len() {
            break;
        }
        let b = text[i];
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 if short_bf => out.extend_from_slice(b"\\b"),
            0x0c if short_bf => out.extend_from_slice(b"\\f"),
            b'<' => out.extend_from_slice(b"\\u003c"),
            b'>' => out.extend_from_slice(b"\\u003e"),
            b'&' => out.extend_from_slice(b"\\u0026"),
            0..=0x1f => {
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

pub(crate) fn hex_byte(out: &mut Vec<u8>, b: u8) {
    out.push(HEX[(b >> 4) as usize]);
    out.push(HEX[(b & 15) as usize]);
}

/// `int(text)` in Python for plain decimal text (`-`, then 1 to `max_digits` ASCII digits);
/// None for anything Python might read otherwise (`+`, spaces, `_`, other digits, ...).
pub(crate) fn plain_int(text: &[u8], max_digits: usize) -> Option<i128> {
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    if digits.is_empty() || digits.len() > max_digits.min(38) || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Text Python's `float()` and Rust's parser read alike: `-`, digits, `.digits`, exponent.
pub(crate) fn plain_float(raw: &[u8]) -> Option<f64> {
    let body = raw.strip_prefix(b"-").unwrap_or(raw);
    let mantissa_end = body.iter().position(|&b| b == b'e' || b == b'E').unwrap_or(body.len());
    let (mantissa, exponent) = body.split_at(mantissa_end);
    let mut parts = mantissa.splitn(2, |&b| b == b'.');
    let whole = parts.next().unwrap_or(b"");
    let fraction = parts.next();
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    if !digits(whole) || fraction.is_some_and(|f| !digits(f)) {
        return None;
    }
    if !exponent.is_empty() {
        let e = &exponent[1..];
        if !digits(e.strip_prefix(b"-").or_else(|| e.strip_prefix(b"+")).unwrap_or(e)) {
            return None;
        }
    }
    std::str::from_utf8(raw).ok()?.parse().ok()
}

fn fixed(d: &Bound<'_, PyDict>, name: &str, keep: &mut Vec<PyBuffer<u8>>) -> PyResult<usize> {
    let item = d.get_item(name)?.ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(name.to_owned()))?;
    keep.push(PyBuffer::<u8>::get(&item)?);
    Ok(keep.len() - 1)
}

fn binary(d: &Bound<'_, PyDict>, name: &str) -> PyResult<BinaryArray> {
    let item = d.get_item(name)?.ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(name.to_owned()))?;
    BinaryArray::new(item.extract::<BinaryArg>()?)
}

pub(crate) fn i64_at(b: &[u8], i: usize) -> PyResult<i64> {
    b.get(i * 8..i * 8 + 8)
        .map(|s| i64::from_ne_bytes(s.try_into().unwrap()))
        .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("int64 buffer too short"))
}

pub(crate) fn i32_at(b: &[u8], i: usize) -> PyResult<i32> {
    b.get(i * 4..i * 4 + 4)
        .map(|s| i32::from_ne_bytes(s.try_into().unwrap()))
        .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("int32 buffer too short"))
}

pub(crate) fn valid_at(b: &[u8], i: usize) -> PyResult<bool> {
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
    label: BinaryArray,
}

/// One column of an image, read from the buffers.
pub(crate) struct Col<'a> {
    pub(crate) name: &'a [u8],
    pub(crate) mysql_type: Option<&'a [u8]>,
    pub(crate) flags: i32,
    pub(crate) value: Option<&'a [u8]>,
    pub(crate) label: Option<&'a [u8]>,
}

/// The events of one `encode` call, read in place.
pub(crate) struct Events {
    pub(crate) kind: BinaryArray,
    pub(crate) op: BinaryArray,
    pub(crate) database: BinaryArray,
    pub(crate) table: BinaryArray,
    pub(crate) tx_id: BinaryArray,
    position_valid: usize,
    position_offsets: usize,
    position_values: usize,
    key_names: BinaryArray,
    extras_keys: BinaryArray,
    extras_values: BinaryArray,
    commit_valid: usize,
    commit: usize,
    es_valid: usize,
    es_values: usize,
    watermark_valid: usize,
    watermark_values: usize,
    keys_valid: usize,
    keys_offsets: usize,
    extras_valid: usize,
    extras_offsets: usize,
    images: [Image; 2],
    bufs: Vec<PyBuffer<u8>>,
}

/// `Events::columns`' sides.
pub(crate) const BEFORE: usize = 0;
pub(crate) const AFTER: usize = 1;

impl Events {
    pub(crate) fn new(cols: &Bound<'_, PyDict>) -> PyResult<Self> {
        let mut bufs = Vec::new();
        let image = |side: &str, bufs: &mut Vec<PyBuffer<u8>>| -> PyResult<Image> {
            Ok(Image {
                valid: fixed(cols, &format!("{side}_valid"), bufs)?,
                offsets: fixed(cols, &format!("{side}_offsets"), bufs)?,
                name: binary(cols, &format!("{side}_name"))?,
                mysql_type: binary(cols, &format!("{side}_type"))?,
                flags: fixed(cols, &format!("{side}_flags"), bufs)?,
                value: binary(cols, &format!("{side}_value"))?,
                label: binary(cols, &format!("{side}_label"))?,
            })
        };
        let images = [image("before", &mut bufs)?, image("after", &mut bufs)?];
        Ok(Events {
            kind: binary(cols, "kind")?,
            op: binary(cols, "op")?,
            database: binary(cols, "database")?,
            table: binary(cols, "table")?,
            tx_id: binary(cols, "tx_id")?,
            position_valid: fixed(cols, "position_valid", &mut bufs)?,
            position_offsets: fixed(cols, "position_offsets", &mut bufs)?,
            position_values: fixed(cols, "position_values", &mut bufs)?,
            key_names: binary(cols, "key_names")?,
            extras_keys: binary(cols, "extras_keys")?,
            extras_values: binary(cols, "extras_values")?,
            commit_valid: fixed(cols, "commit_ts_valid", &mut bufs)?,
            commit: fixed(cols, "commit_ts", &mut bufs)?,
            es_valid: fixed(cols, "execute_ts_ms_valid", &mut bufs)?,
            es_values: fixed(cols, "execute_ts_ms", &mut bufs)?,
            watermark_valid: fixed(cols, "watermark_ts_valid", &mut bufs)?,
            watermark_values: fixed(cols, "watermark_ts", &mut bufs)?,
            keys_valid: fixed(cols, "key_valid", &mut bufs)?,
            keys_offsets: fixed(cols, "key_offsets", &mut bufs)?,
            extras_valid: fixed(cols, "extras_valid", &mut bufs)?,
            extras_offsets: fixed(cols, "extras_offsets", &mut bufs)?,
            images,
            bufs,
        })
    }

    fn b(&self, i: usize) -> &[u8] {
        buffer_bytes(&self.bufs[i])
    }

    /// The columns of image `side` (BEFORE / AFTER) of event `e`, or None when the image is null.
    pub(crate) fn columns(&self, side: usize, e: usize) -> PyResult<Option<Vec<Col<'_>>>> {
        let img = &self.images[side];
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
                label: img.label.get(j)?,
            });
        }
        Ok(Some(cols))
    }

    pub(crate) fn commit_ts(&self, e: usize) -> PyResult<Option<i64>> {
        Ok(if valid_at(self.b(self.commit_valid), e)? { Some(i64_at(self.b(self.commit), e)?) } else { None })
    }

    pub(crate) fn execute_ts_ms(&self, e: usize) -> PyResult<Option<i64>> {
        Ok(if valid_at(self.b(self.es_valid), e)? { Some(i64_at(self.b(self.es_values), e)?) } else { None })
    }

    pub(crate) fn watermark_ts(&self, e: usize) -> PyResult<Option<i64>> {
        Ok(if valid_at(self.b(self.watermark_valid), e)? { Some(i64_at(self.b(self.watermark_values), e)?) } else { None })
    }

    /// The key column names of event `e`, or None when the list is null.
    pub(crate) fn keys(&self, e: usize) -> PyResult<Option<Vec<&[u8]>>> {
        if !valid_at(self.b(self.keys_valid), e)? {
            return Ok(None);
        }
        let o = self.b(self.keys_offsets);
        (i32_at(o, e)? as usize..i32_at(o, e + 1)? as usize)
            .map(|j| Ok(self.key_names.get(j)?.unwrap_or(b"")))
            .collect::<PyResult<Vec<_>>>()
            .map(Some)
    }

    /// The position of event `e` (its values), or None when the list is null.
    pub(crate) fn position(&self, e: usize) -> PyResult<Option<Vec<i64>>> {
        if !valid_at(self.b(self.position_valid), e)? {
            return Ok(None);
        }
        let (o, v) = (self.b(self.position_offsets), self.b(self.position_values));
        (i32_at(o, e)? as usize..i32_at(o, e + 1)? as usize).map(|j| i64_at(v, j)).collect::<PyResult<Vec<_>>>().map(Some)
    }

    /// Every extras pair of event `e` in order (None: no extras).
    pub(crate) fn extras_pairs(&self, e: usize) -> PyResult<Option<Vec<(&[u8], Option<&[u8]>)>>> {
        if !valid_at(self.b(self.extras_valid), e)? {
            return Ok(None);
        }
        let o = self.b(self.extras_offsets);
        (i32_at(o, e)? as usize..i32_at(o, e + 1)? as usize)
            .map(|j| Ok((self.extras_keys.get(j)?.unwrap_or(b""), self.extras_values.get(j)?)))
            .collect::<PyResult<Vec<_>>>()
            .map(Some)
    }

    /// The values of the extras `names` of event `e` (a map: the last of equal keys wins, as
    /// `dict(pairs)`); None for a missing key or a null value.
    pub(crate) fn extras<const N: usize>(&self, e: usize, names: [&[u8]; N]) -> PyResult<[Option<&[u8]>; N]> {
        Ok(self.extras_found(e, names)?.map(Option::flatten))
    }

    /// The extras `names` of event `e`: None for a missing key, Some(None) for a null value.
    pub(crate) fn extras_found<const N: usize>(&self, e: usize, names: [&[u8]; N]) -> PyResult<[Option<Option<&[u8]>>; N]> {
        let mut found = [None; N];
        if valid_at(self.b(self.extras_valid), e)? {
            let o = self.b(self.extras_offsets);
            for j in i32_at(o, e)? as usize..i32_at(o, e + 1)? as usize {
                if let Some(key) = self.extras_keys.get(j)? {
                    if let Some(k) = names.iter().position(|n| *n == key) {
                        found[k] = Some(self.extras_values.get(j)?);
                    }
                }
            }
        }
        Ok(found)
    }
}

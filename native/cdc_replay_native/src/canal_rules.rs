//! What a MySQL type text implies for Canal's text values (canal-json and canal-protobuf
//! share it): the rule Python computes once per type, ENUM/SET labels, Java float text.

use crate::{craft, Fallback, R};

/// What a column's type text implies, from the Python reference (`canal_json._column_rule`).
pub(crate) struct Rule {
    pub(crate) type_lower: Option<String>,
    pub(crate) flags: i32, // without the key flags
    pub(crate) binary: bool,
    pub(crate) java_float: u8, // 0: not FLOAT/DOUBLE, 1: DOUBLE, 2: FLOAT
    pub(crate) labels: Option<Vec<String>>,
    pub(crate) is_enum: bool,
}

/// A plain decimal integer (what Python's int() reads without doubt), for ENUM/SET labels.
pub(crate) fn plain_int(b: &[u8]) -> R<i128> {
    let digits = match b.first() {
        Some(b'-') | Some(b'+') => &b[1..],
        _ => b,
    };
    if digits.is_empty() || digits.len() > 30 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(Fallback);
    }
    let mut n: i128 = 0;
    for &d in digits {
        n = n * 10 + (d - b'0') as i128;
    }
    Ok(if b[0] == b'-' { -n } else { n })
}

/// `canal_common.canonical_float` of a float text in the plain grammar both Python's float() and
/// Rust's parser read the same way (sign, digits, point, exponent); anything else goes to Python.
pub(crate) fn java_float_text(s: &str, single: bool) -> R<Vec<u8>> {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'-') | Some(b'+')));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    let mut mantissa = digits(&mut i);
    if i < b.len() && b[i] == b'.' {
        i += 1;
        mantissa += digits(&mut i);
    }
    if mantissa == 0 {
        return Err(Fallback);
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return Err(Fallback);
        }
    }
    if i != b.len() {
        return Err(Fallback);
    }
    let v: f64 = s.parse().map_err(|_| Fallback)?;
    let mut out = Vec::new();
    if single {
        craft::shortest_f32(v, &mut out)?;
    } else {
        craft::shortest_f64(v, &mut out)?;
    }
    Ok(out)
}

pub(crate) fn label_of(rule: &Rule, value: &[u8]) -> R<Option<String>> {
    let labels = match &rule.labels {
        Some(l) => l,
        None => return Ok(None),
    };
    let n = plain_int(value)?;
    if rule.is_enum {
        return Ok(if n >= 1 && n <= labels.len() as i128 {
            Some(labels[(n - 1) as usize].clone())
        } else if n == 0 {
            Some(String::new())
        } else {
            None
        });
    }
    if n < 0 || (labels.len() < 127 && n >> labels.len() != 0) {
        return Ok(None);
    }
    let chosen: Vec<&str> =
        labels.iter().enumerate().filter(|(bit, _)| *bit < 127 && (n >> bit) & 1 == 1).map(|(_, l)| l.as_str()).collect();
    Ok(Some(chosen.join(",")))
}

//! A typed serde front end for the canal-json message, in place of `serde_json::Value`.
//!
//! The message is read straight into the few fields the decoder uses: strings borrowed from
//! the record where they have no escapes, `data`/`old` rows as ordered (name, value) pairs,
//! everything else (`sql`, `sqlType`, unknown fields) checked as JSON without being built —
//! checked, not skipped, so a value `orjson` refuses (a lone surrogate, 1e400) still goes to
//! Python as before. The rules are those of the `serde_json::Value` reader it replaced (git
//! history), one for one, and of the Python codec; where this reader is stricter (a duplicate field, a duplicate column, an odd `old` or `mysqlType` in a
//! message that does not use them) the record goes to the Python codec, which is always safe.
//! Type rules are resolved once per distinct `mysqlType` of a table (a small cache compared
//! pair by pair), so a column costs no hash lookup.

use std::borrow::Cow;
use std::fmt;

use pyo3::prelude::*;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::archive::Text;
use crate::canal_json::CanalJsonDecoder;
use crate::canal_rules::{java_float_text, label_of, Rule};
use crate::{Builders, Columns, Fallback, KEY_FLAGS, MAX_TS, R};

// ------------------------------------------------------------------------------ reading

/// Any JSON value, validated in full, built as nothing (not serde's `IgnoredAny`, which lets
/// a lone surrogate or `1e400` through where `orjson` refuses them; open_protocol.rs uses it too).
pub(crate) struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CheckedVisitor)
    }
}

pub(crate) struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_entry::<Checked, Checked>()?.is_some() {}
        Ok(Checked)
    }
}

/// A field a decoder reads loosely (its JSON type as Python's `type()` tells it, truthiness, an
/// integer or its text): what it is, and for arrays and objects only whether they are empty.
/// Shared with open_protocol.rs.
pub(crate) enum Loose<'a> {
    Null,
    Bool(bool),
    UInt(u64),
    NegInt(i64),
    Float(f64),
    Str(Cow<'a, str>),
    Array(bool),
    Object(bool),
}

impl<'de> Deserialize<'de> for Loose<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Loose<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("JSON")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Loose<'de>, E> {
                Ok(Loose::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Loose<'de>, E> {
                Ok(if v >= 0 { Loose::UInt(v as u64) } else { Loose::NegInt(v) })
            }
            fn visit_u64<E>(self, v: u64) -> Result<Loose<'de>, E> {
                Ok(Loose::UInt(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Loose<'de>, E> {
                Ok(Loose::Float(v))
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Loose<'de>, E> {
                Ok(Loose::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Loose<'de>, E> {
                Ok(Loose::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_unit<E>(self) -> Result<Loose<'de>, E> {
                Ok(Loose::Null)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Loose<'de>, A::Error> {
                let mut any = false;
                while seq.next_element::<Checked>()?.is_some() {
                    any = true;
                }
                Ok(Loose::Array(any))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Loose<'de>, A::Error> {
                let mut any = false;
                while map.next_entry::<Checked, Checked>()?.is_some() {
                    any = true;
                }
                Ok(Loose::Object(any))
            }
        }
        d.deserialize_any(V)
    }
}

/// `data`/`old` rows and `mysqlType`: ordered (name, string or null) pairs; any other value
/// fails the record (to Python), as the Value reader did for the columns it used.
struct Row<'a>(Vec<(Cow<'a, str>, Option<Cow<'a, str>>)>);

impl<'de> Deserialize<'de> for Row<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Row<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Row<'de>, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(16));
                while let Some(k) = map.next_key::<Text>()? {
                    let v = map.next_value::<Option<Text>>()?;
                    pairs.push((k.0, v.map(|t| t.0)));
                }
                Ok(Row(pairs))
            }
        }
        d.deserialize_map(V)
    }
}

/// `_tidb`: the fields the decoder reads; the others checked.
#[derive(Default)]
struct Tidb<'a> {
    commit_ts: Option<Loose<'a>>,
    watermark_ts: Option<Loose<'a>>,
    only_handle_key: Option<Loose<'a>>,
    claim_check: Option<Loose<'a>>,
}

impl<'de> Deserialize<'de> for Tidb<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Tidb<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("_tidb")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tidb<'de>, A::Error> {
                let mut t = Tidb::default();
                let mut seen = [false; 4];
                while let Some(k) = map.next_key::<Text>()? {
                    let (slot, i) = match k.0.as_ref() {
                        "commitTs" => (&mut t.commit_ts, 0),
                        "watermarkTs" => (&mut t.watermark_ts, 1),
                        "onlyHandleKey" => (&mut t.only_handle_key, 2),
                        "claimCheckLocation" => (&mut t.claim_check, 3),
                        _ => {
                            map.next_value::<Checked>()?;
                            continue;
                        }
                    };
                    if std::mem::replace(&mut seen[i], true) {
                        return Err(de::Error::custom("duplicate field: left to Python"));
                    }
                    *slot = map.next_value::<Option<Loose>>()?;
                }
                Ok(t)
            }
        }
        d.deserialize_map(V)
    }
}

/// The fields of a canal-json message the decoder reads (None: missing or null).
#[derive(Default)]
struct Msg<'a> {
    id: Option<Loose<'a>>,
    ts: Option<Loose<'a>>,
    es: Option<Loose<'a>>,
    is_ddl: Option<Loose<'a>>,
    kind: Option<Loose<'a>>,
    database: Option<Loose<'a>>,
    table: Option<Loose<'a>>,
    gtid: Option<Loose<'a>>,
    pk_names: Option<Vec<Text<'a>>>,
    mysql_type: Option<Row<'a>>,
    data: Option<Vec<Row<'a>>>,
    old: Option<Vec<Row<'a>>>,
    tidb: Option<Tidb<'a>>,
}

impl<'de> Deserialize<'de> for Msg<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Msg<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a canal-json message")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Msg<'de>, A::Error> {
                let mut m = Msg::default();
                let mut seen = 0u16;
                while let Some(k) = map.next_key::<Text>()? {
                    let bit = match k.0.as_ref() {
                        "id" => 0,
                        "ts" => 1,
                        "es" => 2,
                        "isDdl" => 3,
                        "type" => 4,
                        "database" => 5,
                        "table" => 6,
                        "gtid" => 7,
                        "pkNames" => 8,
                        "mysqlType" => 9,
                        "data" => 10,
                        "old" => 11,
                        "_tidb" => 12,
                        _ => {
                            map.next_value::<Checked>()?; // sql, sqlType, ...: checked, not built
                            continue;
                        }
                    };
                    if seen & (1 << bit) != 0 {
                        return Err(de::Error::custom("duplicate field: left to Python"));
                    }
                    seen |= 1 << bit;
                    match bit {
                        0 => m.id = map.next_value()?,
                        1 => m.ts = map.next_value()?,
                        2 => m.es = map.next_value()?,
                        3 => m.is_ddl = map.next_value()?,
                        4 => m.kind = map.next_value()?,
                        5 => m.database = map.next_value()?,
                        6 => m.table = map.next_value()?,
                        7 => m.gtid = map.next_value()?,
                        8 => m.pk_names = map.next_value()?,
                        9 => m.mysql_type = map.next_value()?,
                        10 => m.data = map.next_value()?,
                        11 => m.old = map.next_value()?,
                        _ => m.tidb = map.next_value()?,
                    }
                }
                Ok(m)
            }
        }
        d.deserialize_map(V)
    }
}

// ------------------------------------------------------------------------------ rules

/// `_int_or_none`: JSON integers and strings of ASCII digits in 0..2^63; anything else fails.
fn int_or_none(v: &Option<Loose>) -> R<Option<i64>> {
    match v {
        None | Some(Loose::Null) => Ok(None),
        Some(Loose::UInt(x)) if *x < MAX_TS => Ok(Some(*x as i64)),
        Some(Loose::Str(s)) if !s.is_empty() && s.len() <= 19 && s.bytes().all(|b| b.is_ascii_digit()) => {
            match s.parse::<u64>() {
                Ok(x) if x < MAX_TS => Ok(Some(x as i64)),
                _ => Err(Fallback),
            }
        }
        _ => Err(Fallback),
    }
}

/// `str(value)` of an integer or a string.
fn text_of(v: &Loose) -> R<String> {
    match v {
        Loose::Str(s) => Ok(s.to_string()),
        Loose::UInt(x) => Ok(x.to_string()),
        Loose::NegInt(x) => Ok(x.to_string()),
        _ => Err(Fallback),
    }
}

fn truthy(v: &Option<Loose>) -> R<bool> {
    Ok(match v {
        None | Some(Loose::Null) => false,
        Some(Loose::Bool(b)) => *b,
        Some(Loose::Str(s)) => !s.is_empty(),
        Some(Loose::UInt(x)) => *x != 0,
        Some(Loose::NegInt(_)) => true,
        Some(Loose::Float(_)) => return Err(Fallback),
        Some(Loose::Array(any)) | Some(Loose::Object(any)) => *any,
    })
}

/// A non-empty string field (database, table).
fn name_of<'m>(v: &'m Option<Loose>) -> Option<&'m str> {
    match v {
        Some(Loose::Str(s)) if !s.is_empty() => Some(s),
        _ => None,
    }
}

/// True when two names repeat in a row (the Value reader kept the last value at the first
/// place; such rows go to Python instead).
fn has_duplicates(row: &Row) -> bool {
    let p = &row.0;
    (1..p.len()).any(|i| p[..i].iter().any(|(n, _)| *n == p[i].0))
}

/// A table's `mysqlType` and the rule of each of its columns, resolved once.
pub(crate) struct Types {
    pairs: Vec<(String, Option<String>)>,
    rules: Vec<Option<usize>>, // None: not a string, or the reference fails on it: to Python if used
    unique: bool,
}

impl Types {
    fn same(&self, t: &Row) -> bool {
        self.pairs.len() == t.0.len()
            && self.pairs.iter().zip(&t.0).all(|((n, v), (n2, v2))| n == n2 && v.as_deref() == v2.as_deref())
    }
}

/// A column ready to append.
struct TCol<'a> {
    name: &'a str,
    rule: usize,
    flags: i32,
    value: Option<Cow<'a, [u8]>>,
    label: Option<String>,
}

impl CanalJsonDecoder {
    /// The resolved types of a message's `mysqlType` (Err: a type the reference fails on that
    /// cannot be told apart here; never for ordinary messages).
    fn types_of(&mut self, py: Python<'_>, t: &Row) -> PyResult<usize> {
        if let Some(i) = self.types.iter().position(|c| c.same(t)) {
            return Ok(i);
        }
        let mut rules = Vec::with_capacity(t.0.len());
        for (_, v) in &t.0 {
            rules.push(match v {
                None => self.rule(py, None).ok(),
                Some(s) => self.rule(py, Some(s)).ok(),
            });
        }
        let unique = !has_duplicates(t);
        let pairs = t.0.iter().map(|(n, v)| (n.to_string(), v.as_ref().map(|s| s.to_string()))).collect();
        if self.types.len() >= 64 {
            self.types.remove(0);
        }
        self.types.push(Types { pairs, rules, unique });
        Ok(self.types.len() - 1)
    }

    /// The rule of column `j` named `name` (`types`: the message's resolved mysqlType).
    fn rule_at(&mut self, py: Python<'_>, types: Option<usize>, j: usize, name: &str) -> PyResult<R<usize>> {
        let untyped = |d: &mut Self| d.rule(py, None).map_err(|_| Fallback);
        let Some(ti) = types else { return Ok(untyped(self)) };
        let t = &self.types[ti];
        let found = match t.pairs.get(j) {
            Some((n, _)) if n == name => Some(j),
            _ => t.pairs.iter().rposition(|(n, _)| n == name),
        };
        Ok(match found {
            Some(k) => t.rules[k].ok_or(Fallback),
            None => untyped(self),
        })
    }

    fn tcol<'a>(
        &mut self,
        py: Python<'_>,
        types: Option<usize>,
        j: usize,
        name: &'a str,
        value: &'a Option<Cow<'a, str>>,
        pk: &[&str],
    ) -> PyResult<R<TCol<'a>>> {
        let ri = match self.rule_at(py, types, j, name)? {
            Ok(i) => i,
            Err(f) => return Ok(Err(f)),
        };
        let rule: &Rule = &self.rules[ri];
        let mut flags = rule.flags;
        if pk.contains(&name) {
            flags |= KEY_FLAGS;
        }
        let data: Option<Cow<'a, [u8]>> = match value {
            None => None,
            Some(s) => {
                if rule.binary {
                    if s.is_ascii() {
                        Some(Cow::Borrowed(s.as_bytes()))
                    } else {
                        let mut out = Vec::with_capacity(s.len());
                        for ch in s.chars() {
                            let c = ch as u32;
                            if c > 0xFF {
                                return Ok(Err(Fallback));
                            }
                            out.push(c as u8);
                        }
                        Some(Cow::Owned(out))
                    }
                } else if rule.java_float != 0 && self.canal_flavor {
                    // Canal's Java Float/Double.toString text ("1.0E10"), canonical as
                    // canal_common.canonical_float makes it; anything unusual goes to Python
                    match java_float_text(s, rule.java_float == 2) {
                        Ok(text) => Some(Cow::Owned(text)),
                        Err(f) => return Ok(Err(f)),
                    }
                } else {
                    Some(Cow::Borrowed(s.as_bytes()))
                }
            }
        };
        let label = match &data {
            Some(d) if rule.labels.is_some() => match label_of(rule, d) {
                Ok(l) => l,
                Err(f) => return Ok(Err(f)),
            },
            _ => None,
        };
        Ok(Ok(TCol { name, rule: ri, flags, value: data, label }))
    }

    fn timage<'a>(&mut self, py: Python<'_>, row: &'a Row<'a>, types: Option<usize>, pk: &[&str]) -> PyResult<R<Vec<TCol<'a>>>> {
        let mut cols = Vec::with_capacity(row.0.len());
        for (j, (n, v)) in row.0.iter().enumerate() {
            match self.tcol(py, types, j, n, v, pk)? {
                Ok(c) => cols.push(c),
                Err(f) => return Ok(Err(f)),
            }
        }
        Ok(Ok(cols))
    }

    /// UPDATE's old image: columns of `old` replace the new image's, missing ones are unchanged.
    fn told_image<'a>(
        &mut self,
        py: Python<'_>,
        old: &'a Row<'a>,
        new: &[TCol<'a>],
        types: Option<usize>,
        pk: &[&str],
    ) -> PyResult<R<Vec<TCol<'a>>>> {
        let aligned = old.0.len() == new.len() && old.0.iter().zip(new).all(|((n, _), c)| n == c.name);
        if !aligned && has_duplicates(old) {
            return Ok(Err(Fallback));
        }
        let mut cols = Vec::with_capacity(new.len());
        for (j, c) in new.iter().enumerate() {
            let at = if aligned { Some(j) } else { old.0.iter().position(|(n, _)| n == c.name) };
            match at {
                Some(k) => match self.tcol(py, types, k, c.name, &old.0[k].1, pk)? {
                    Ok(col) => cols.push(col),
                    Err(f) => return Ok(Err(f)),
                },
                None => cols.push(TCol {
                    name: c.name,
                    rule: c.rule,
                    flags: c.flags,
                    value: c.value.clone(),
                    label: c.label.clone(),
                }),
            }
        }
        if !aligned {
            for (k, (n, v)) in old.0.iter().enumerate() {
                if !new.iter().any(|c| c.name == n) {
                    match self.tcol(py, types, k, n, v, pk)? {
                        Ok(col) => cols.push(col),
                        Err(f) => return Ok(Err(f)),
                    }
                }
            }
        }
        Ok(Ok(cols))
    }

    fn push_timage(&self, list: bool, cols: &[TCol], after: bool, b: &mut Builders) {
        let (target, pool): (_, &mut Columns) =
            if after { (&mut b.after, &mut b.after_cols) } else { (&mut b.before, &mut b.before_cols) };
        if list {
            for c in cols {
                pool.name.push_str(Some(c.name));
                pool.mysql_type.push_str(self.rules[c.rule].type_lower.as_deref());
                pool.flags.push(c.flags);
                pool.value.push(c.value.as_deref());
                pool.label.push_str(c.label.as_deref());
            }
        }
        target.push(list, pool.len());
    }

    /// Decode one record into the builders; Ok(Err(Fallback)) leaves it to Python.
    pub(crate) fn record(&mut self, py: Python<'_>, raw: &[u8], rec: i32, b: &mut Builders) -> PyResult<R<()>> {
        let Ok(text) = std::str::from_utf8(raw) else { return Ok(Err(Fallback)) };
        let msg: Msg = match serde_json::from_str(text) {
            Ok(m) => m,
            Err(_) => return Ok(Err(Fallback)),
        };
        let tidb = msg.tidb.unwrap_or_default();
        for field in [&tidb.only_handle_key, &tidb.claim_check] {
            match field {
                None | Some(Loose::Null) | Some(Loose::Bool(false)) => {}
                _ => return Ok(Err(Fallback)),
            }
        }
        let r = (|| -> R<_> {
            let mut extras: Vec<(&str, String)> = Vec::new();
            if let Some(ts) = &msg.ts {
                if !matches!(ts, Loose::Null) {
                    extras.push(("canal.ts", text_of(ts)?));
                }
            }
            if truthy(&msg.id)? {
                extras.push(("canal.id", text_of(msg.id.as_ref().unwrap())?));
            }
            let es = int_or_none(&msg.es)?;
            let commit_ts = int_or_none(&tidb.commit_ts)?;
            if matches!(msg.is_ddl, Some(Loose::Bool(true))) {
                return Err(Fallback); // DDL: classified by the Python reference
            }
            Ok((extras, es, commit_ts))
        })();
        let (extras, es, commit_ts) = match r {
            Ok(x) => x,
            Err(f) => return Ok(Err(f)),
        };
        let kind_type: &str = match &msg.kind {
            Some(Loose::Str(s)) => s,
            _ => return Ok(Err(Fallback)),
        };
        if kind_type == "TIDB_WATERMARK" {
            let wm = match int_or_none(&tidb.watermark_ts) {
                Ok(Some(w)) => w,
                _ => return Ok(Err(Fallback)),
            };
            b.rec_idx.push(rec);
            b.event_index.push(0);
            b.execute_ts.push(es);
            b.push_watermark(wm);
            b.tx_id.push(None);
            b.push_extras(&extras);
            return Ok(Ok(()));
        }
        let op = match kind_type {
            "INSERT" => "insert",
            "UPDATE" => "update",
            "DELETE" => "delete",
            _ => return Ok(Err(Fallback)),
        };
        let data = match &msg.data {
            Some(a) if !a.is_empty() => a,
            _ => return Ok(Err(Fallback)),
        };
        let old = match (op, &msg.old) {
            ("update", Some(a)) => Some(a),
            ("update", None) => return Ok(Err(Fallback)),
            _ => None,
        };
        let types = match &msg.mysql_type {
            None => None,
            Some(t) => {
                let i = self.types_of(py, t)?;
                if !self.types[i].unique {
                    return Ok(Err(Fallback));
                }
                Some(i)
            }
        };
        let pk_names: Option<Vec<&str>> = match &msg.pk_names {
            None => None,
            Some(a) => {
                if a.iter().any(|t| t.0.is_empty()) {
                    return Ok(Err(Fallback));
                }
                Some(a.iter().map(|t| t.0.as_ref()).collect())
            }
        };
        let pk: &[&str] = pk_names.as_deref().unwrap_or(&[]);
        let (database, table) = match (name_of(&msg.database), name_of(&msg.table)) {
            (Some(d), Some(t)) => (d, t),
            _ => return Ok(Err(Fallback)), // the Python path quarantines it
        };
        let tx_id = match &msg.gtid {
            None | Some(Loose::Null) => None,
            Some(Loose::Str(s)) => (!s.is_empty()).then_some(s.as_ref()),
            _ => return Ok(Err(Fallback)),
        };
        for (i, row) in data.iter().enumerate() {
            // rows aligned with mysqlType have no duplicate names (mysqlType has none)
            let aligned = types.is_some_and(|t| {
                let p = &self.types[t].pairs;
                p.len() == row.0.len() && p.iter().zip(&row.0).all(|((n, _), (n2, _))| n == n2)
            });
            if !aligned && has_duplicates(row) {
                return Ok(Err(Fallback));
            }
            let image = match self.timage(py, row, types, pk)? {
                Ok(c) => c,
                Err(f) => return Ok(Err(f)),
            };
            let before = match old {
                Some(old) => {
                    let Some(old_row) = old.get(i) else { return Ok(Err(Fallback)) };
                    match self.told_image(py, old_row, &image, types, pk)? {
                        Ok(c) => Some(c),
                        Err(f) => return Ok(Err(f)),
                    }
                }
                None => None,
            };
            // the key columns must be in the row that carries the key (archive_io.event_problem)
            for k in pk {
                let found = image.iter().any(|c| c.name == *k)
                    || (k.is_ascii()
                        && image.iter().all(|c| c.name.is_ascii())
                        && image.iter().any(|c| c.name.eq_ignore_ascii_case(k)));
                if !found {
                    return Ok(Err(Fallback));
                }
            }
            b.start_row(rec, i as i32, op, commit_ts, es, database, table);
            match &pk_names {
                Some(names) => {
                    for n in names {
                        b.keys.push_str(Some(n));
                    }
                    b.key_columns.push(true, b.keys.len());
                }
                None => b.key_columns.push(false, b.keys.len()),
            }
            match op {
                "insert" => {
                    self.push_timage(false, &[], false, b);
                    self.push_timage(true, &image, true, b);
                }
                "delete" => {
                    self.push_timage(true, &image, false, b);
                    self.push_timage(false, &[], true, b);
                }
                _ => {
                    self.push_timage(true, before.as_deref().unwrap_or(&[]), false, b);
                    self.push_timage(true, &image, true, b);
                }
            }
            b.watermark_ts.push(None);
            b.tx_id.push_str(tx_id);
            b.push_extras(&extras);
        }
        Ok(Ok(()))
    }
}

//! The canal-protobuf encoder: row events of an Arrow batch in, per event the pieces of its
//! Canal `Entry` out, byte for byte what codecs/canal_protobuf.py writes with the protobuf
//! runtime: the `Header` before and after the `rowsCount` prop (added by Python, which knows
//! how many rows the entry gets), the `RowChange` before its rows, and the `rowDatas` field of
//! the event's `RowData`. The messages are prost's, declared once in canal_protobuf.rs (the
//! decoder's). Grouping rows into entries and entries into `Packet`/`Messages` stays Python
//! (`CanalProtobufCodec.frame`), for compiled and Python-encoded events alike.
//!
//! The Python encoder is the reference: every event this one is not sure about comes back as
//! None and the Python codec encodes it: DDL and watermarks, an unknown op or a missing image,
//! a row whose binlog row index is not 0 (it may continue an entry whose kept original bytes
//! `canal.entry` only Python compares), extras naming kept entries (`canal.entry`,
//! `canal.leading`, `canal.trailing`), a null or repeated extras key, `canal.serverId` /
//! `canal.eventLength` / `canal.tableId` that are not plain decimal int64, text that is not
//! UTF-8, a non-NULL FLOAT / DOUBLE (Java's float text is numpy's) or TIMESTAMP outside UTC,
//! and an unsigned value whose promotion Python's `int()` might read otherwise.

use std::collections::HashMap;

use prost::bytes::Bytes;
use prost::Message;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::canal_protobuf::{Column, Header, Pair, RowChange, RowData};
use crate::encode_common::{plain_int, Col, Events, AFTER, BEFORE};

const HEADER_PROPS: [&[u8]; 4] = [b"curtGtid", b"curtGtidSn", b"curtGtidLct", b"rowsCount"];
const CONTEXT_EXTRAS: [&[u8]; 7] =
    [b"canal.id", b"canal.packet", b"canal.xid", b"canal.threadId", b"canal.leading", b"canal.trailing", b"canal.entry"];
const MYSQL: i32 = 2;
const LOGICAL_BITS: u32 = 18;

// value kinds of `compiled_encode_rule`
const K_TEXT: u8 = 0;
const K_BINARY: u8 = 1;

/// What a column type text implies, from codecs/canal_protobuf.py `compiled_encode_rule`.
#[derive(Clone, Copy)]
struct Rule {
    sql_null: i32,
    sql_value: i32,
    promotion: Option<(i64, i32)>, // (limit, wider sqlType) of an unsigned integer
    kind: u8,
}

#[pyclass]
pub(crate) struct CanalProtobufEncoder {
    rule_fn: Py<PyAny>,
    by_type: HashMap<Option<Vec<u8>>, Option<Rule>>,
}

// ------------------------------------------------------------------------------ the key
// `_key_bytes` of codecs/canal_protobuf.py: what two rows must share to be one entry.

fn key_int(out: &mut Vec<u8>, n: i64) {
    out.push(b'i');
    out.extend_from_slice(n.to_string().as_bytes());
    out.push(b';');
}

fn key_str(out: &mut Vec<u8>, s: Option<&[u8]>) {
    match s {
        None => out.push(b'n'),
        Some(s) => {
            out.push(b's');
            out.extend_from_slice(s.len().to_string().as_bytes());
            out.push(b':');
            out.extend_from_slice(s);
        }
    }
}

fn key_list(out: &mut Vec<u8>, n: usize) {
    out.push(b'l');
    out.extend_from_slice(n.to_string().as_bytes());
    out.push(b':');
}

/// Python's `int(text)` for an int64 extras value written in plain decimal; None: Python decides.
fn int64(text: Option<&[u8]>) -> Option<i64> {
    match text {
        None => Some(0),
        Some(t) => plain_int(t, 19).and_then(|n| i64::try_from(n).ok()),
    }
}

/// Whether `int(value) > limit` for plain decimal `value`; None: Python decides.
fn above(value: &[u8], limit: i64) -> Option<bool> {
    let digits = value.strip_prefix(b"-").unwrap_or(value);
    if digits.is_empty() || digits.len() > 4000 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if value[0] == b'-' {
        return Some(false);
    }
    let digits = match digits.iter().position(|&d| d != b'0') {
        Some(i) => &digits[i..],
        None => return Some(false),
    };
    let limit = limit.to_string();
    Some(digits.len() > limit.len() || (digits.len() == limit.len() && digits > limit.as_bytes()))
}

fn bytes(s: &[u8]) -> Bytes {
    Bytes::copy_from_slice(s)
}

fn pair(key: &[u8], value: &[u8]) -> Option<Pair> {
    Some(Pair { key: String::from_utf8(key.to_vec()).ok()?, value: String::from_utf8(value.to_vec()).ok()? })
}

impl CanalProtobufEncoder {
    fn rule(&mut self, py: Python<'_>, type_text: Option<&[u8]>) -> PyResult<Option<Rule>> {
        let key = type_text.map(<[u8]>::to_vec);
        if let Some(rule) = self.by_type.get(&key) {
            return Ok(*rule);
        }
        let rule = match type_text.map(std::str::from_utf8).transpose() {
            Err(_) => None,
            Ok(text) => {
                let (sql_null, sql_value, limit, wider, kind): (i32, i32, Option<i64>, i32, u8) =
                    self.rule_fn.bind(py).call1((text,))?.extract()?;
                Some(Rule { sql_null, sql_value, promotion: limit.map(|l| (l, wider)), kind })
            }
        };
        self.by_type.insert(key, rule);
        Ok(rule)
    }

    /// `canal_text` and `canal_sql_type` of a column: (text or None for NULL, sqlType); None:
    /// Python decides.
    fn text(&mut self, py: Python<'_>, c: &Col<'_>) -> PyResult<Option<(Option<String>, i32)>> {
        let Some(rule) = self.rule(py, c.mysql_type)? else { return Ok(None) };
        let Some(raw) = c.value else { return Ok(Some((None, rule.sql_null))) };
        let text = match rule.kind {
            K_TEXT => match std::str::from_utf8(raw) {
                Ok(t) => t.to_owned(),
                Err(_) => return Ok(None),
            },
            K_BINARY => raw.iter().map(|&b| b as char).collect(),
            _ => return Ok(None),
        };
        let mut sql = rule.sql_value;
        if let Some((limit, wider)) = rule.promotion {
            match above(raw, limit) {
                Some(true) => sql = wider,
                Some(false) => {}
                None => return Ok(None),
            }
        }
        Ok(Some((Some(text), sql)))
    }

    /// The Columns of one image (`CanalProtobufCodec._row`); `before`: the before image's
    /// texts, for an after image's `updated`. None: Python decides.
    fn image(
        &mut self, py: Python<'_>, cols: &[Col<'_>], keys: &[&[u8]], before: Option<&[Option<String>]>,
    ) -> PyResult<Option<(Vec<Column>, Vec<Option<String>>)>> {
        let mut out = Vec::with_capacity(cols.len());
        let mut texts = Vec::with_capacity(cols.len());
        for (index, c) in cols.iter().enumerate() {
            let Some((text, sql_type)) = self.text(py, c)? else { return Ok(None) };
            if std::str::from_utf8(c.name).is_err() || c.mysql_type.is_some_and(|t| std::str::from_utf8(t).is_err()) {
                return Ok(None);
            }
            let updated = match before {
                Some(texts) => index >= texts.len() || texts[index] != text,
                None => false,
            };
            out.push(Column {
                index: index as i32,
                sql_type,
                name: bytes(c.name),
                is_key: keys.contains(&c.name),
                updated,
                is_null: Some(text.is_none()),
                props: Vec::new(),
                value: text.as_deref().map(|t| bytes(t.as_bytes())).unwrap_or_default(),
                length: 0,
                mysql_type: bytes(c.mysql_type.unwrap_or(b"")),
            });
            texts.push(text);
        }
        Ok(Some((out, texts)))
    }

    /// The pieces of row event `e`'s entry (see the module doc); None: Python encodes it.
    #[allow(clippy::type_complexity)]
    fn event(&mut self, py: Python<'_>, events: &Events, e: usize) -> PyResult<Option<Pieces>> {
        if events.kind.get(e)? != Some(b"row") {
            return Ok(None);
        }
        let op = events.op.get(e)?;
        let event_type = match op {
            Some(b"insert") => 1,
            Some(b"update") => 2,
            Some(b"delete") => 3,
            _ => return Ok(None),
        };
        // the binlog position (file number, offset, row index): a row index past 0 may continue an entry
        let position: Option<[i64; 3]> = events.position(e)?.and_then(|p| p.try_into().ok());
        if position.is_some_and(|p| p[2] != 0) {
            return Ok(None);
        }
        // extras: no null value, no key twice, no kept entries
        let pairs = events.extras_pairs(e)?.unwrap_or_default();
        let mut extras: Vec<(&[u8], &[u8])> = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            let Some(v) = v else { return Ok(None) };
            if extras.iter().any(|(seen, _)| *seen == k) || matches!(k, b"canal.entry" | b"canal.leading" | b"canal.trailing") {
                return Ok(None);
            }
            extras.push((k, v));
        }
        let get = |name: &[u8]| extras.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
        let (Some(server_id), Some(event_length), Some(table_id)) =
            (int64(get(b"canal.serverId")), int64(get(b"canal.eventLength")), int64(get(b"canal.tableId")))
        else {
            return Ok(None);
        };
        let (database, table, tx_id) = (events.database.get(e)?, events.table.get(e)?, events.tx_id.get(e)?);
        for text in [database, table, tx_id].into_iter().flatten() {
            if std::str::from_utf8(text).is_err() {
                return Ok(None);
            }
        }
        let keys = events.keys(e)?;

        // the row (`_row`)
        let key_names: Vec<&[u8]> = keys.clone().unwrap_or_default();
        let before = if event_type != 1 { events.columns(BEFORE, e)? } else { None };
        let after = if event_type != 3 { events.columns(AFTER, e)? } else { None };
        if (event_type != 3 && after.as_ref().map_or(true, Vec::is_empty))
            || (event_type != 1 && before.as_ref().map_or(true, Vec::is_empty))
        {
            return Ok(None);
        }
        let (before_columns, before_texts) = match &before {
            Some(cols) => match self.image(py, cols, &key_names, None)? {
                Some(done) => done,
                None => return Ok(None),
            },
            None => (Vec::new(), Vec::new()),
        };
        let after_columns = match &after {
            Some(cols) => match self.image(py, cols, &key_names, Some(before_texts.as_slice()))? {
                Some((columns, _)) => columns,
                None => return Ok(None),
            },
            None => Vec::new(),
        };
        let row = RowChange {
            row_datas: vec![RowData { before_columns, after_columns, props: Vec::new() }],
            ..Default::default()
        };

        // the header (`_header`), split around where rowsCount goes
        let logfile = match (get(b"canal.logfileName"), position) {
            (Some(name), _) => name.to_vec(),
            (None, Some(p)) => format!("mysql-bin.{:06}", p[0]).into_bytes(),
            (None, None) => Vec::new(),
        };
        let es = match (events.execute_ts_ms(e)?, events.commit_ts(e)?) {
            (Some(es), _) => es,
            (None, Some(ts)) => ts >> LOGICAL_BITS,
            (None, None) => 0,
        };
        let mut head_props = Vec::new();
        let mut tail_props = Vec::new();
        let props: Vec<(&[u8], &[u8])> =
            extras.iter().filter_map(|(k, v)| k.strip_prefix(b"canal.header.").map(|k| (k, *v))).collect();
        for name in HEADER_PROPS {
            if let Some((k, v)) = props.iter().find(|(k, _)| *k == name) {
                let Some(p) = pair(k, v) else { return Ok(None) };
                head_props.push(p);
            }
        }
        for (k, v) in &props {
            if !HEADER_PROPS.contains(k) {
                let Some(p) = pair(k, v) else { return Ok(None) };
                tail_props.push(p);
            }
        }
        let count = !props.iter().any(|(k, _)| *k == b"rowsCount");
        let head = Header {
            version: Some(1),
            logfile_name: Bytes::from(logfile),
            logfile_offset: position.map_or(0, |p| p[1]),
            server_id,
            serveren_code: Bytes::from_static(b"UTF-8"),
            execute_time: es,
            source_type: Some(MYSQL),
            schema_name: bytes(database.unwrap_or(b"")),
            table_name: bytes(table.unwrap_or(b"")),
            event_length,
            event_type: Some(event_type),
            props: head_props,
            gtid: Bytes::new(),
        };
        let tail = Header { props: tail_props, gtid: bytes(tx_id.unwrap_or(b"")), ..Default::default() };
        let prefix = RowChange { table_id, event_type: Some(event_type), is_ddl: Some(false), ..Default::default() };

        // what `frame` groups by: the message (canal.id, canal.packet), the entry (`_Part.key`)
        let key = match position {
            None => None,
            Some(p) => {
                let mut k = Vec::with_capacity(128);
                key_list(&mut k, 9);
                key_int(&mut k, p[0]);
                key_int(&mut k, p[1]);
                key_str(&mut k, op);
                key_str(&mut k, database);
                key_str(&mut k, table);
                match events.execute_ts_ms(e)? {
                    Some(es) => key_int(&mut k, es),
                    None => k.push(b'n'),
                }
                key_str(&mut k, tx_id);
                match &keys {
                    None => k.push(b'n'),
                    Some(names) => {
                        key_list(&mut k, names.len());
                        for name in names {
                            key_str(&mut k, Some(name));
                        }
                    }
                }
                let mut stripped: Vec<&(&[u8], &[u8])> =
                    extras.iter().filter(|(name, _)| !CONTEXT_EXTRAS.contains(name)).collect();
                stripped.sort_by(|a, b| a.0.cmp(b.0));
                key_list(&mut k, stripped.len());
                for (name, value) in stripped {
                    k.push(b't');
                    k.extend_from_slice(b"2:");
                    key_str(&mut k, Some(name));
                    key_str(&mut k, Some(value));
                }
                Some(k)
            }
        };
        Ok(Some(Pieces {
            canal_id: get(b"canal.id").map(<[u8]>::to_vec),
            packet: get(b"canal.packet").map(<[u8]>::to_vec),
            index: position.map(|p| p[2]),
            key,
            head_a: head.encode_to_vec(),
            count,
            head_b: tail.encode_to_vec(),
            prefix: prefix.encode_to_vec(),
            row: row.encode_to_vec(),
        }))
    }
}

/// One row event's share of its entry (`CanalProtobufCodec.compiled_entry` takes it).
struct Pieces {
    canal_id: Option<Vec<u8>>,
    packet: Option<Vec<u8>>,
    index: Option<i64>,
    key: Option<Vec<u8>>,
    head_a: Vec<u8>,
    count: bool,
    head_b: Vec<u8>,
    prefix: Vec<u8>,
    row: Vec<u8>,
}

#[pymethods]
impl CanalProtobufEncoder {
    /// `rule(type_text) -> (sqlType of NULL, sqlType of a value, promotion limit or None, wider
    /// sqlType, value kind)` (codecs/canal_protobuf.py `compiled_encode_rule`), once per type text.
    #[new]
    fn new(rule: Py<PyAny>) -> Self {
        CanalProtobufEncoder { rule_fn: rule, by_type: HashMap::new() }
    }

    /// Encode `n` events given as Arrow buffers (spark_apps/native_encode.py `_arrays`): per
    /// event (canal.id, canal.packet, binlog row index, entry key, header before rowsCount,
    /// whether rowsCount is added, header after it, RowChange before its rows, its rowDatas
    /// field), or None for an event Python must encode.
    fn encode<'py>(&mut self, py: Python<'py>, n: usize, cols: Bound<'py, PyDict>) -> PyResult<Bound<'py, PyList>> {
        let events = Events::new(&cols)?;
        let out = PyList::empty(py);
        let text = |b: &Option<Vec<u8>>| -> PyResult<Py<PyAny>> {
            Ok(match b {
                Some(b) => std::str::from_utf8(b)
                    .map_err(|_| pyo3::exceptions::PyValueError::new_err("extras not UTF-8"))?
                    .into_pyobject(py)?
                    .into_any()
                    .unbind(),
                None => py.None(),
            })
        };
        for e in 0..n {
            match self.event(py, &events, e)? {
                Some(p) => {
                    let items: [Py<PyAny>; 9] = [
                        text(&p.canal_id)?,
                        text(&p.packet)?,
                        p.index.into_pyobject(py)?.into_any().unbind(),
                        match &p.key {
                            Some(k) => PyBytes::new(py, k).into_any().unbind(),
                            None => py.None(),
                        },
                        PyBytes::new(py, &p.head_a).into_any().unbind(),
                        pyo3::types::PyBool::new(py, p.count).to_owned().into_any().unbind(),
                        PyBytes::new(py, &p.head_b).into_any().unbind(),
                        PyBytes::new(py, &p.prefix).into_any().unbind(),
                        PyBytes::new(py, &p.row).into_any().unbind(),
                    ];
                    out.append(PyTuple::new(py, items)?)?
                }
                None => out.append(py.None())?,
            }
        }
        Ok(out)
    }
}

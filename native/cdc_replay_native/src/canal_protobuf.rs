//! Alibaba Canal protobuf (codecs/canal_protobuf.py is the reference): a batch of Canal `Packet`
//! values in, Arrow buffers of the canonical events out, with no Python object per value.
//!
//! The wire format is read by `prost`. A record is decoded here only when every check of the
//! Python codec passes and every event would pass `archive_io.event_problem`; anything else (DDL
//! entries, a record without events, a value its type refuses, bytes prost or the checks below
//! do not take) goes back to the Python codec, which writes the events or the quarantine row.
//! What a column type means (flags, binary, float kind, ENUM/SET labels) comes from the codec's
//! own `canal_common.type_info`, through the `rule` callback, once per distinct type text.

use std::collections::HashMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use prost::bytes::Bytes;
use prost::Message;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::canal_rules::{java_float_text, label_of, Rule};
use crate::{decode_batch, BinaryArg, BinaryArray, Builders, Fallback, KEY_FLAGS, Positions, R};

// ------------------------------------------------------------------------------ messages
//
// Canal's messages, declared with prost's derive from our codecs/proto/canal.proto (the file
// the Python codec's canal_pb2 is generated from) rather than generated: there is no protoc on
// this machine, and a build-time compiler (protox + prost-build) would add two crates and a
// build script for seven small messages. Field numbers, wire types and presence are the
// .proto's; the `optional` fields (Canal's `oneof ..._present`) are `Option`s so that absent
// and 0 differ, as they must for the proto2 defaults. Every string field is declared, even the
// unused ones: prost then checks it is UTF-8 as the Python runtime does (a value it refuses
// goes to Python); a Column's name, value and mysqlType, read for every column, are taken as
// `Bytes` (slices of the record, no copy) and checked by `text`. Messages.batch_id is declared `optional` (the wire is the same) to see
// whether Canal's raw form wrote it.

#[derive(Clone, PartialEq, Message)]
struct Packet {
    #[prost(int32, optional, tag = "1")]
    magic_number: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    version: Option<i32>,
    #[prost(int32, tag = "3")]
    r#type: i32, // enum PacketType
    #[prost(int32, optional, tag = "4")]
    compression: Option<i32>, // enum Compression
    #[prost(bytes = "bytes", tag = "5")]
    body: Bytes,
}

#[derive(Clone, PartialEq, Message)]
struct Messages {
    #[prost(int64, optional, tag = "1")]
    batch_id: Option<i64>,
    #[prost(bytes = "bytes", repeated, tag = "2")]
    messages: Vec<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct Pair {
    #[prost(string, tag = "1")]
    pub(crate) key: String,
    #[prost(string, tag = "2")]
    pub(crate) value: String,
}

#[derive(Clone, PartialEq, Message)]
struct Entry {
    #[prost(message, optional, tag = "1")]
    header: Option<Header>,
    #[prost(int32, optional, tag = "2")]
    entry_type: Option<i32>, // enum EntryType
    #[prost(bytes = "bytes", tag = "3")]
    store_value: Bytes,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct Header {
    #[prost(int32, optional, tag = "1")]
    pub(crate) version: Option<i32>,
    #[prost(bytes = "bytes", tag = "2")]
    pub(crate) logfile_name: Bytes, // string: checked by `Header::check`
    #[prost(int64, tag = "3")]
    pub(crate) logfile_offset: i64,
    #[prost(int64, tag = "4")]
    pub(crate) server_id: i64,
    #[prost(bytes = "bytes", tag = "5")]
    pub(crate) serveren_code: Bytes, // string: checked by `Header::check`
    #[prost(int64, tag = "6")]
    pub(crate) execute_time: i64,
    #[prost(int32, optional, tag = "7")]
    pub(crate) source_type: Option<i32>,
    #[prost(bytes = "bytes", tag = "8")]
    pub(crate) schema_name: Bytes, // string: checked by `Header::check`
    #[prost(bytes = "bytes", tag = "9")]
    pub(crate) table_name: Bytes, // string: checked by `Header::check`
    #[prost(int64, tag = "10")]
    pub(crate) event_length: i64,
    #[prost(int32, optional, tag = "11")]
    pub(crate) event_type: Option<i32>,
    #[prost(message, repeated, tag = "12")]
    pub(crate) props: Vec<Pair>,
    #[prost(bytes = "bytes", tag = "13")]
    pub(crate) gtid: Bytes, // string: checked by `Header::check`
}

impl Header {
    /// Its string fields are UTF-8 (what the runtime checks when it parses the entry).
    fn check(&self) -> R<()> {
        for f in [&self.logfile_name, &self.serveren_code, &self.schema_name, &self.table_name, &self.gtid] {
            text(f)?;
        }
        Ok(())
    }

    fn logfile_name(&self) -> &str {
        std::str::from_utf8(&self.logfile_name).unwrap_or_default() // checked
    }
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct Column {
    #[prost(int32, tag = "1")]
    pub(crate) index: i32,
    #[prost(int32, tag = "2")]
    pub(crate) sql_type: i32,
    #[prost(bytes = "bytes", tag = "3")]
    pub(crate) name: Bytes, // string: checked by `text`
    #[prost(bool, tag = "4")]
    pub(crate) is_key: bool,
    #[prost(bool, tag = "5")]
    pub(crate) updated: bool,
    #[prost(bool, optional, tag = "6")]
    pub(crate) is_null: Option<bool>,
    #[prost(message, repeated, tag = "7")]
    pub(crate) props: Vec<Pair>,
    #[prost(bytes = "bytes", tag = "8")]
    pub(crate) value: Bytes, // string: checked by `text`
    #[prost(int32, tag = "9")]
    pub(crate) length: i32,
    #[prost(bytes = "bytes", tag = "10")]
    pub(crate) mysql_type: Bytes, // string: checked by `text`
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct RowData {
    #[prost(message, repeated, tag = "1")]
    pub(crate) before_columns: Vec<Column>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) after_columns: Vec<Column>,
    #[prost(message, repeated, tag = "3")]
    pub(crate) props: Vec<Pair>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct RowChange {
    #[prost(int64, tag = "1")]
    pub(crate) table_id: i64,
    #[prost(int32, optional, tag = "2")]
    pub(crate) event_type: Option<i32>,
    #[prost(bool, optional, tag = "10")]
    pub(crate) is_ddl: Option<bool>,
    #[prost(string, tag = "11")]
    pub(crate) sql: String,
    #[prost(message, repeated, tag = "12")]
    pub(crate) row_datas: Vec<RowData>,
    #[prost(message, repeated, tag = "13")]
    pub(crate) props: Vec<Pair>,
    #[prost(string, tag = "14")]
    pub(crate) ddl_schema_name: String,
}

#[derive(Clone, PartialEq, Message)]
struct TransactionBegin {
    #[prost(int64, tag = "1")]
    execute_time: i64,
    #[prost(string, tag = "2")]
    transaction_id: String,
    #[prost(message, repeated, tag = "3")]
    props: Vec<Pair>,
    #[prost(int64, tag = "4")]
    thread_id: i64,
}

#[derive(Clone, PartialEq, Message)]
struct TransactionEnd {
    #[prost(int64, tag = "1")]
    execute_time: i64,
    #[prost(string, tag = "2")]
    transaction_id: String,
    #[prost(message, repeated, tag = "3")]
    props: Vec<Pair>,
}

const MESSAGES: i32 = 7;
const COMPRESSION_NONE: i32 = 1;
const TRANSACTION_BEGIN: i32 = 1;
const ROWDATA: i32 = 2;
const TRANSACTION_END: i32 = 3;
const HEARTBEAT: i32 = 4;
const GTIDLOG: i32 = 5;
const INSERT: i32 = 1;
const UPDATE: i32 = 2;
const DELETE: i32 = 3;

fn parse<M: Message + Default>(data: Bytes) -> R<M> {
    M::decode(data).map_err(|_| Fallback)
}

/// A string field read as bytes: UTF-8, or the record goes to Python (whose runtime refuses it).
#[inline]
fn text(b: &Bytes) -> R<&str> {
    std::str::from_utf8(b).map_err(|_| Fallback)
}

// ------------------------------------------------------------------------------ decoding

/// How a column's text becomes canonical bytes (`canal_common.canonical_bytes`' kinds).
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Text,    // the UTF-8 text (TIMESTAMP too when the source zone is UTC)
    Binary,  // one byte per ISO-8859-1 character
    Float,   // canonical float32 text
    Double,  // canonical float64 text
    Refused, // left to Python (a TIMESTAMP to move from another zone)
}

struct TypeRule {
    rule: Rule, // flags and ENUM/SET labels, as canal-json's
    kind: Kind,
}

/// What an event's extras hold besides the message's and its entry's (built when the record is
/// whole: `canal.xid` and `canal.trailing` come from later entries).
struct EventExtras {
    entry: usize,
    leading: Option<String>,
    thread_id: Option<String>,
    xid: Option<String>,
}

#[pyclass]
pub(crate) struct CanalProtobufDecoder {
    rule_fn: Py<PyAny>,
    rules: Vec<TypeRule>,
    by_type: HashMap<String, usize>,
    recent: Vec<(String, usize)>, // (type text, rule) of the last image's columns, by position
    text: Vec<u8>,
}

impl CanalProtobufDecoder {
    /// The rule of a column type text ("" when the column has none), computed by Python once.
    fn rule(&mut self, py: Python<'_>, type_text: &str) -> R<usize> {
        if let Some(&i) = self.by_type.get(type_text) {
            return Ok(i);
        }
        self.new_rule(py, type_text)
    }

    /// The rule of the `n`th column of an image: the same type text as the last image's `n`th
    /// column needs no hash lookup (images of one table repeat).
    #[inline]
    fn rule_at(&mut self, py: Python<'_>, n: usize, type_text: &str) -> R<usize> {
        if let Some((t, i)) = self.recent.get(n) {
            if t.as_bytes() == type_text.as_bytes() {
                return Ok(*i);
            }
        }
        let i = self.rule(py, type_text)?;
        if n < self.recent.len() {
            self.recent[n] = (type_text.to_owned(), i);
        } else if n == self.recent.len() {
            self.recent.push((type_text.to_owned(), i));
        }
        Ok(i)
    }

    fn new_rule(&mut self, py: Python<'_>, type_text: &str) -> R<usize> {
        let arg = (!type_text.is_empty()).then_some(type_text);
        let out = self.rule_fn.bind(py).call1((arg,)).map_err(|_| Fallback)?;
        let (flags, kind, labels, is_enum): (i32, u8, Option<Vec<String>>, bool) = out.extract().map_err(|_| Fallback)?;
        let kind = match kind {
            0 => Kind::Text,
            1 => Kind::Binary,
            2 => Kind::Float,
            3 => Kind::Double,
            _ => Kind::Refused,
        };
        let rule = Rule { type_lower: None, flags, binary: kind == Kind::Binary, java_float: 0, labels, is_enum };
        self.rules.push(TypeRule { rule, kind });
        let i = self.rules.len() - 1;
        self.by_type.insert(type_text.to_owned(), i);
        Ok(i)
    }

    /// A column's canonical value (None: NULL) into `self.text`, checked as `_image` checks it.
    fn value(&mut self, rule: usize, c: &Column) -> R<bool> {
        let value = text(&c.value)?; // checked even when NULL, as the runtime does
        if c.is_null == Some(true) {
            return Ok(false);
        }
        self.text.clear();
        match self.rules[rule].kind {
            Kind::Text => self.text.extend_from_slice(value.as_bytes()),
            Kind::Binary => {
                for ch in value.chars() {
                    let b = u8::try_from(u32::from(ch)).map_err(|_| Fallback)?; // outside ISO-8859-1: Python says so
                    self.text.push(b);
                }
            }
            Kind::Float | Kind::Double => {
                self.text = java_float_text(value, self.rules[rule].kind == Kind::Float)?;
            }
            Kind::Refused => return Err(Fallback),
        }
        Ok(true)
    }

    /// One image's columns (`keep`: appended to its side's pool; else only checked, as the
    /// reference decodes the image an INSERT or DELETE then drops).
    fn image(&mut self, py: Python<'_>, columns: &[Column], after: bool, keep: bool, b: &mut Builders) -> R<()> {
        for (n, c) in columns.iter().enumerate() {
            let (name, mysql_type) = (text(&c.name)?, text(&c.mysql_type)?);
            let rule = self.rule_at(py, n, mysql_type)?;
            let present = self.value(rule, c)?;
            let value = present.then_some(&self.text[..]);
            let r = &self.rules[rule].rule;
            let label = if r.labels.is_some() { value.map(|v| label_of(r, v)).transpose()?.flatten() } else { None };
            if !keep {
                continue;
            }
            let pool = if after { &mut b.after_cols } else { &mut b.before_cols };
            pool.name.push_str(Some(name));
            pool.mysql_type.push_str((!mysql_type.is_empty()).then_some(mysql_type));
            pool.flags.push(if c.is_key { r.flags | KEY_FLAGS } else { r.flags });
            pool.value.push(value);
            pool.label.push_str(label.as_deref());
        }
        Ok(())
    }

    /// One Canal Packet into the builders and `pos` (`rec`: its record index); a record given
    /// back leaves `pos` as it was (the builders are rolled back by `Builders::attempt`).
    pub(crate) fn record(&mut self, py: Python<'_>, d: &[u8], rec: i32, b: &mut Builders, pos: &mut Positions) -> PyResult<R<()>> {
        let events = b.rec_idx.len();
        let out = self.message(py, d, rec, b, pos);
        if out.is_err() {
            pos.truncate(events);
        }
        Ok(out)
    }

    fn message(&mut self, py: Python<'_>, d: &[u8], rec: i32, b: &mut Builders, pos: &mut Positions) -> R<()> {
        let packet: Packet = parse(Bytes::copy_from_slice(d))?;
        if packet.r#type != MESSAGES {
            return Err(Fallback);
        }
        if packet.compression.is_some_and(|c| c != COMPRESSION_NONE && c != 0) {
            return Err(Fallback);
        }
        let messages: Messages = parse(packet.body.clone())?;
        let form = packet_form(&packet, &messages);
        let batch_id = messages.batch_id.unwrap_or(0);

        let mut entries: Vec<(Header, i64)> = Vec::new(); // each event entry's header and table id
        let mut extras: Vec<EventExtras> = Vec::new();
        let mut pending: Vec<&Bytes> = Vec::new();
        let mut open_tx: Vec<usize> = Vec::new();
        let mut thread_id: Option<String> = None;
        for raw in &messages.messages {
            let entry: Entry = parse(raw.clone())?;
            if let Some(h) = &entry.header {
                h.check()?;
            }
            match entry.entry_type.unwrap_or(0) {
                0 | ROWDATA => {
                    let change: RowChange = parse(entry.store_value.clone())?;
                    let header = entry.header.unwrap_or_default();
                    let Some(produced) = self.entry_events(py, &header, &change, rec, extras.len(), b, pos)? else {
                        pending.push(raw); // a statement annotation, XA COMMIT / ROLLBACK, ...: no rows
                        continue;
                    };
                    entries.push((header, change.table_id));
                    let leading = (!pending.is_empty()).then(|| joined(&pending));
                    pending.clear();
                    for k in 0..produced {
                        extras.push(EventExtras {
                            entry: entries.len() - 1,
                            leading: if k == 0 { leading.clone() } else { None },
                            thread_id: thread_id.clone(),
                            xid: None,
                        });
                        open_tx.push(extras.len() - 1);
                    }
                }
                TRANSACTION_BEGIN => {
                    let begin: TransactionBegin = parse(entry.store_value.clone())?;
                    thread_id = (begin.thread_id != 0).then(|| begin.thread_id.to_string());
                    open_tx.clear();
                    pending.push(raw);
                }
                TRANSACTION_END => {
                    let end: TransactionEnd = parse(entry.store_value.clone())?;
                    if !end.transaction_id.is_empty() {
                        for &e in &open_tx {
                            extras[e].xid = Some(end.transaction_id.clone());
                        }
                    }
                    thread_id = None;
                    open_tx.clear();
                    pending.push(raw);
                }
                HEARTBEAT | GTIDLOG => pending.push(raw),
                _ => return Err(Fallback), // unknown entryType: the Python codec quarantines it
            }
        }
        if extras.is_empty() {
            return Err(Fallback); // no event: the Python path writes the record's `empty` marker
        }
        let trailing = (!pending.is_empty()).then(|| joined(&pending));
        let id = batch_id.to_string();
        let last = extras.len() - 1;
        let mut scratch = String::new();
        for (i, e) in extras.iter().enumerate() {
            b.extra_keys.push_str(Some("canal.id"));
            b.extra_values.push_str(Some(&id));
            if let Some(form) = &form {
                b.extra_keys.push_str(Some("canal.packet"));
                b.extra_values.push_str(Some(form));
            }
            let (header, table_id) = &entries[e.entry];
            header_extras(b, header, *table_id, &mut scratch);
            let tail = if i == last { trailing.as_ref() } else { None };
            for (k, v) in [("canal.leading", e.leading.as_ref()), ("canal.threadId", e.thread_id.as_ref()),
                           ("canal.xid", e.xid.as_ref()), ("canal.trailing", tail)] {
                if let Some(v) = v {
                    b.extra_keys.push_str(Some(k));
                    b.extra_values.push_str(Some(v));
                }
            }
            let len = b.extra_keys.len();
            b.extras.push(true, len);
        }
        Ok(())
    }
}

impl CanalProtobufDecoder {
    /// The events of one ROWDATA entry into the builders (`first`: the record's events so far),
    /// None for an entry that is no event.
    #[allow(clippy::too_many_arguments)]
    fn entry_events(
        &mut self,
        py: Python<'_>,
        header: &Header,
        change: &RowChange,
        rec: i32,
        first: usize,
        b: &mut Builders,
        pos: &mut Positions,
    ) -> R<Option<usize>> {
        let seq = if header.logfile_name.is_empty() { None } else { Some(binlog_file_number(header.logfile_name())?) };
        if header.execute_time < 0 || header.logfile_offset < 0 {
            return Err(Fallback); // the Python codec names the negative field
        }
        if change.is_ddl == Some(true) {
            return Err(Fallback); // the statement is classified by the Python reference
        }
        let op = match change.event_type.unwrap_or(0) {
            0 | UPDATE => "update", // absent or proto3's 0: the proto2 default UPDATE
            INSERT => "insert",
            DELETE => "delete",
            _ => {
                // no rows are read, but the runtime parsed (and so checked) every column
                for c in change.row_datas.iter().flat_map(|r| r.before_columns.iter().chain(&r.after_columns)) {
                    for f in [&c.name, &c.value, &c.mysql_type] {
                        text(f)?;
                    }
                }
                return Ok(None);
            }
        };
        if change.row_datas.is_empty() {
            return Err(Fallback); // statement-format DML: the Python codec refuses it
        }
        // archive_io.event_problem: a row needs its database and table names
        if header.schema_name.is_empty() || header.table_name.is_empty() {
            return Err(Fallback);
        }
        let execute_ts = (header.execute_time != 0).then_some(header.execute_time);
        for (r, row) in change.row_datas.iter().enumerate() {
            let (before, after) = (&row.before_columns, &row.after_columns);
            let keep_before = op != "insert" && !before.is_empty();
            let keep_after = op != "delete" && !after.is_empty();
            if (op != "delete" && !keep_after) || (op != "insert" && !keep_before) {
                return Err(Fallback); // an image the op needs is missing: Python says which
            }
            self.image(py, before, false, keep_before, b)?;
            self.image(py, after, true, keep_after, b)?;
            let main = if op == "delete" { before } else { after };
            for c in main.iter().filter(|c| c.is_key) {
                if c.name.is_empty() {
                    return Err(Fallback); // event_problem: a key column name must be a name
                }
                b.keys.push(Some(&c.name)); // checked UTF-8 by `image`
            }
            b.key_columns.push(true, b.keys.len());
            b.before.push(keep_before, b.before_cols.len());
            b.after.push(keep_after, b.after_cols.len());
            b.rec_idx.push(rec);
            b.event_index.push((first + r) as i32);
            b.kind.push_str(Some("row"));
            b.op.push_str(Some(op));
            b.commit_ts.push(None);
            b.execute_ts.push(execute_ts);
            b.database.push(Some(&header.schema_name)); // UTF-8: Header::check
            b.table.push(Some(&header.table_name));
            b.watermark_ts.push(None);
            b.tx_id.push((!header.gtid.is_empty()).then_some(&header.gtid[..]));
            if let Some(seq) = seq {
                pos.items.extend_from_slice(&[seq, header.logfile_offset, r as i64]);
            }
            pos.lists.push(seq.is_some(), pos.items.len());
        }
        Ok(Some(change.row_datas.len()))
    }
}

/// `_header_extras` (+ `canal.tableId`) into an event's extras: a header prop named twice
/// keeps its first place and its last value, as a Python dict does.
fn header_extras(b: &mut Builders, header: &Header, table_id: i64, scratch: &mut String) {
    use std::fmt::Write;
    let mut number = |b: &mut Builders, key: &str, n: i64| {
        if n != 0 {
            scratch.clear();
            write!(scratch, "{n}").unwrap();
            b.extra_keys.push_str(Some(key));
            b.extra_values.push_str(Some(scratch));
        }
    };
    if !header.logfile_name.is_empty() {
        b.extra_keys.push_str(Some("canal.logfileName"));
        b.extra_values.push(Some(&header.logfile_name));
    }
    number(b, "canal.serverId", header.server_id);
    number(b, "canal.eventLength", header.event_length);
    let props = &header.props;
    for (i, p) in props.iter().enumerate() {
        if props[..i].iter().any(|q| q.key == p.key) {
            continue; // written at its first place
        }
        let value = &props[i..].iter().rev().find(|q| q.key == p.key).unwrap().value;
        b.extra_keys.data.extend_from_slice(b"canal.header.");
        b.extra_keys.push_str(Some(&p.key));
        b.extra_values.push_str(Some(value));
    }
    number(b, "canal.tableId", table_id);
}

/// `binlog_file_number`: the ASCII digits after the last dot (mysql-bin.000123 -> 123), below
/// 2^63; anything else (no suffix, Unicode digits, too large) is the Python codec's to judge.
fn binlog_file_number(name: &str) -> R<i64> {
    let suffix = &name[name.rfind('.').ok_or(Fallback)? + 1..];
    if suffix.is_empty() || !suffix.bytes().all(|c| c.is_ascii_digit()) {
        return Err(Fallback);
    }
    let trimmed = suffix.trim_start_matches('0');
    if trimmed.len() > 19 {
        return Err(Fallback);
    }
    let n: u64 = if trimmed.is_empty() { 0 } else { trimmed.parse().map_err(|_| Fallback)? };
    i64::try_from(n).map_err(|_| Fallback)
}

/// `canal.packet`: the Packet's header fields when they are not Canal's standard `version=1`
/// (None), "raw" without any, "bare" when the body has no batch id either (not Canal's raw
/// path: the reference's `_spans` walk, which finds no batch id in a body with a group either).
fn packet_form(packet: &Packet, messages: &Messages) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(m) = packet.magic_number {
        parts.push(format!("magic={m}"));
    }
    match packet.version {
        Some(1) if parts.is_empty() && packet.compression.is_none() => return None,
        Some(v) => parts.push(format!("version={v}")),
        None => {}
    }
    if let Some(c) = packet.compression {
        parts.push(format!("compression={c}"));
    }
    if !parts.is_empty() {
        return Some(parts.join(","));
    }
    let no_batch = messages.batch_id.is_none() || (messages.batch_id == Some(0) && has_group(&packet.body));
    Some(if no_batch { "bare" } else { "raw" }.to_owned())
}

/// Whether a message's top-level fields include a group (which the reference's `_spans` does
/// not walk).
fn has_group(mut data: &[u8]) -> bool {
    use prost::encoding::{decode_key, skip_field, DecodeContext, WireType};
    while !data.is_empty() {
        match decode_key(&mut data) {
            Ok((_, WireType::StartGroup | WireType::EndGroup)) => return true,
            Ok((tag, wire)) => {
                if skip_field(wire, tag, &mut data, DecodeContext::default()).is_err() {
                    return true;
                }
            }
            Err(_) => return true,
        }
    }
    false
}

/// Entries that are no events, as `canal.leading` / `canal.trailing` keep them.
fn joined(raws: &[&Bytes]) -> String {
    raws.iter().map(|r| STANDARD.encode(r)).collect::<Vec<_>>().join(",")
}

#[pymethods]
impl CanalProtobufDecoder {
    /// `rule(type_text or None) -> (flags, kind: 0 text, 1 binary, 2 float, 3 double, 4 left to
    /// Python, labels or None, is_enum)`, from the Python codec (spark_apps/native_decode.py).
    #[new]
    fn new(rule: Py<PyAny>) -> Self {
        CanalProtobufDecoder { rule_fn: rule, rules: Vec::new(), by_type: HashMap::new(), recent: Vec::new(), text: Vec::new() }
    }

    /// As `CanalJsonDecoder.decode`, plus `position` (list offsets, validity) and
    /// `position_items` (int64): each event's Canal binlog position.
    fn decode<'py>(&mut self, py: Python<'py>, values: BinaryArg<'py>) -> PyResult<Bound<'py, PyDict>> {
        let values = BinaryArray::new(values)?;
        let mut pos = Positions::new();
        let d = decode_batch(py, &values, |py, raw, rec, b| self.record(py, raw, rec, b, &mut pos))?;
        pos.export(py, &d)?;
        Ok(d)
    }
}

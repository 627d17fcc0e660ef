//! cdc-replay's compiled canal-json decoder.
//!
//! Takes the record values of a batch as the buffers of an Arrow binary array and returns the
//! buffers of the canonical events (EVENT_SCHEMA, codecs/events.py) for every record it can
//! decode exactly as the Python codec (codecs/canal_json.py) would: no Python object per value.
//! Every record it is not sure about (DDL, claim-check, onlyHandleKey, anything malformed or
//! unusual) is marked for the Python codec, which stays the reference and writes the
//! quarantine rows. What a MySQL type string implies (lower-case text, flags, binary, ENUM/SET
//! labels) comes from the Python reference too (`rule` callback), once per distinct type.

use std::collections::HashMap;

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use serde_json::{Map, Value};

mod archive;
mod canal_typed;

// ------------------------------------------------------------------------------ builders

/// A string/binary column: Arrow offsets, data and one validity byte per slot (packed at the end).
#[derive(Default)]
struct StrCol {
    offsets: Vec<i32>,
    data: Vec<u8>,
    valid: Vec<u8>,
}

impl StrCol {
    fn new() -> Self {
        StrCol { offsets: vec![0], data: Vec::new(), valid: Vec::new() }
    }
    fn push(&mut self, v: Option<&[u8]>) {
        match v {
            Some(b) => {
                self.data.extend_from_slice(b);
                self.valid.push(1);
            }
            None => self.valid.push(0),
        }
        self.offsets.push(self.data.len() as i32);
    }
    fn push_str(&mut self, v: Option<&str>) {
        self.push(v.map(str::as_bytes))
    }
    fn len(&self) -> usize {
        self.valid.len()
    }
    fn truncate(&mut self, n: usize) {
        self.offsets.truncate(n + 1);
        self.data.truncate(self.offsets[n] as usize);
        self.valid.truncate(n);
    }
    fn export<'py>(&self, py: Python<'py>) -> Bound<'py, PyTuple> {
        let (bitmap, nulls) = pack(&self.valid);
        PyTuple::new(
            py,
            [
                bitmap.into_pyobject(py).unwrap().into_any(),
                PyBytes::new(py, as_bytes(&self.offsets)).into_any(),
                PyBytes::new(py, &self.data).into_any(),
                nulls.into_pyobject(py).unwrap().into_any(),
            ],
        )
        .unwrap()
    }
}

#[derive(Default)]
struct I64Col {
    values: Vec<i64>,
    valid: Vec<u8>,
}

impl I64Col {
    fn push(&mut self, v: Option<i64>) {
        self.values.push(v.unwrap_or(0));
        self.valid.push(v.is_some() as u8);
    }
    fn truncate(&mut self, n: usize) {
        self.values.truncate(n);
        self.valid.truncate(n);
    }
    fn export<'py>(&self, py: Python<'py>) -> Bound<'py, PyTuple> {
        export_fixed(py, &self.valid, as_bytes(&self.values))
    }
}

/// (validity bitmap or None, the fixed-width buffer, null count): what Python wraps with
/// `pa.Array.from_buffers` for a column of fixed-width values or list offsets.
fn export_fixed<'py>(py: Python<'py>, valid: &[u8], data: &[u8]) -> Bound<'py, PyTuple> {
    let (bitmap, nulls) = pack(valid);
    PyTuple::new(
        py,
        [
            bitmap.into_pyobject(py).unwrap().into_any(),
            PyBytes::new(py, data).into_any(),
            nulls.into_pyobject(py).unwrap().into_any(),
        ],
    )
    .unwrap()
}

/// List offsets with validity (the child column is built beside it).
struct ListCol {
    offsets: Vec<i32>,
    valid: Vec<u8>,
}

impl ListCol {
    fn new() -> Self {
        ListCol { offsets: vec![0], valid: Vec::new() }
    }
    fn push(&mut self, valid: bool, child_len: usize) {
        self.valid.push(valid as u8);
        self.offsets.push(child_len as i32);
    }
    fn truncate(&mut self, n: usize) {
        self.offsets.truncate(n + 1);
        self.valid.truncate(n);
    }
    fn export<'py>(&self, py: Python<'py>) -> Bound<'py, PyTuple> {
        export_fixed(py, &self.valid, as_bytes(&self.offsets))
    }
}

/// The items of an image (list<struct<name, mysql_type, flags, value, label>>).
struct Columns {
    name: StrCol,
    mysql_type: StrCol,
    flags: Vec<i32>,
    value: StrCol,
    label: StrCol,
}

impl Columns {
    fn new() -> Self {
        Columns { name: StrCol::new(), mysql_type: StrCol::new(), flags: Vec::new(), value: StrCol::new(), label: StrCol::new() }
    }
    fn len(&self) -> usize {
        self.flags.len()
    }
    fn truncate(&mut self, n: usize) {
        self.name.truncate(n);
        self.mysql_type.truncate(n);
        self.flags.truncate(n);
        self.value.truncate(n);
        self.label.truncate(n);
    }
    fn push(&mut self, c: &Col, rule: &Rule) {
        self.name.push_str(Some(&c.name));
        self.mysql_type.push_str(rule.type_lower.as_deref());
        self.flags.push(c.flags);
        self.value.push(c.value.as_deref());
        self.label.push_str(c.label.as_deref());
    }
    fn export<'py>(&self, py: Python<'py>) -> Bound<'py, PyDict> {
        let d = PyDict::new(py);
        d.set_item("name", self.name.export(py)).unwrap();
        d.set_item("mysql_type", self.mysql_type.export(py)).unwrap();
        d.set_item("flags", PyBytes::new(py, as_bytes(&self.flags))).unwrap();
        d.set_item("value", self.value.export(py)).unwrap();
        d.set_item("label", self.label.export(py)).unwrap();
        d
    }
}

fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: plain integers, read as their native-endian bytes (Arrow's layout on this host).
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// One validity byte per slot -> an Arrow bitmap (None when nothing is null) and the null count.
fn pack(valid: &[u8]) -> (Option<Vec<u8>>, usize) {
    let nulls = valid.iter().filter(|&&v| v == 0).count();
    if nulls == 0 {
        return (None, 0);
    }
    let mut bitmap = vec![0u8; valid.len().div_ceil(8)];
    for (i, &v) in valid.iter().enumerate() {
        if v != 0 {
            bitmap[i >> 3] |= 1 << (i & 7);
        }
    }
    (Some(bitmap), nulls)
}

// ------------------------------------------------------------------------------ decoding

/// What a column's type text implies, from the Python reference (`canal_json._column_rule`).
struct Rule {
    type_lower: Option<String>,
    flags: i32, // without the key flags
    binary: bool,
    java_float: bool,
    labels: Option<Vec<String>>,
    is_enum: bool,
}

/// A decoded column before it is appended (the rule is looked up again by index).
struct Col {
    name: String,
    rule: usize,
    flags: i32,
    value: Option<Vec<u8>>,
    label: Option<String>,
}

/// Why the native path gives a record to the Python codec (never shown: Python decides).
struct Fallback;

type R<T> = Result<T, Fallback>;

const KEY_FLAGS: i32 = (1 << 3) | (1 << 1); // PRIMARY_KEY | HANDLE_KEY
const MAX_TS: u64 = 1 << 63;

/// `_int_or_none`: JSON integers and strings of ASCII digits in 0..2^63; anything else goes to Python.
fn int_or_none(v: Option<&Value>) -> R<Option<i64>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(x) if x < MAX_TS => Ok(Some(x as i64)),
            _ => Err(Fallback),
        },
        Some(Value::String(s)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && s.len() <= 19 => {
            match s.parse::<u64>() {
                Ok(x) if x < MAX_TS => Ok(Some(x as i64)),
                _ => Err(Fallback),
            }
        }
        _ => Err(Fallback),
    }
}

/// `str(value)` of an integer or a string (extras), anything else to Python.
fn text_of(v: &Value) -> R<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
        _ => Err(Fallback),
    }
}

/// Truthiness the way the Python codec tests `msg.get(...)` for the fields it reads so.
fn truthy(v: Option<&Value>) -> R<bool> {
    match v {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) => Ok(!s.is_empty()),
        Some(Value::Number(n)) => match n.as_u64().or_else(|| n.as_i64().map(|x| x as u64)) {
            Some(x) => Ok(x != 0),
            None => Err(Fallback),
        },
        Some(Value::Array(a)) => Ok(!a.is_empty()),
        Some(Value::Object(o)) => Ok(!o.is_empty()),
    }
}

/// A plain decimal integer (what Python's int() reads without doubt), for ENUM/SET labels.
fn plain_int(b: &[u8]) -> R<i128> {
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

fn label_of(rule: &Rule, value: &[u8]) -> R<Option<String>> {
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

struct Builders {
    rec_idx: Vec<i32>,
    event_index: Vec<i32>,
    kind: StrCol,
    op: StrCol,
    commit_ts: I64Col,
    execute_ts: I64Col,
    database: StrCol,
    table: StrCol,
    key_columns: ListCol,
    keys: StrCol,
    before: ListCol,
    before_cols: Columns,
    after: ListCol,
    after_cols: Columns,
    watermark_ts: I64Col,
    tx_id: StrCol,
    extras: ListCol,
    extra_keys: StrCol,
    extra_values: StrCol,
}

/// Builder lengths at the start of a record, to undo a record the native path gives up on.
struct Mark {
    events: usize,
    keys: usize,
    before_cols: usize,
    after_cols: usize,
    extra: usize,
}

impl Builders {
    fn new() -> Self {
        Builders {
            rec_idx: Vec::new(),
            event_index: Vec::new(),
            kind: StrCol::new(),
            op: StrCol::new(),
            commit_ts: I64Col::default(),
            execute_ts: I64Col::default(),
            database: StrCol::new(),
            table: StrCol::new(),
            key_columns: ListCol::new(),
            keys: StrCol::new(),
            before: ListCol::new(),
            before_cols: Columns::new(),
            after: ListCol::new(),
            after_cols: Columns::new(),
            watermark_ts: I64Col::default(),
            tx_id: StrCol::new(),
            extras: ListCol::new(),
            extra_keys: StrCol::new(),
            extra_values: StrCol::new(),
        }
    }
    fn mark(&self) -> Mark {
        Mark {
            events: self.rec_idx.len(),
            keys: self.keys.len(),
            before_cols: self.before_cols.len(),
            after_cols: self.after_cols.len(),
            extra: self.extra_keys.len(),
        }
    }
    fn rollback(&mut self, m: &Mark) {
        let n = m.events;
        self.rec_idx.truncate(n);
        self.event_index.truncate(n);
        self.kind.truncate(n);
        self.op.truncate(n);
        self.commit_ts.truncate(n);
        self.execute_ts.truncate(n);
        self.database.truncate(n);
        self.table.truncate(n);
        self.key_columns.truncate(n);
        self.keys.truncate(m.keys);
        self.before.truncate(n);
        self.before_cols.truncate(m.before_cols);
        self.after.truncate(n);
        self.after_cols.truncate(m.after_cols);
        self.watermark_ts.truncate(n);
        self.tx_id.truncate(n);
        self.extras.truncate(n);
        self.extra_keys.truncate(m.extra);
        self.extra_values.truncate(m.extra);
    }
    /// The buffers of every column (see spark_apps/native_decode.py), in a dict.
    fn export<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("events", self.rec_idx.len())?;
        d.set_item("rec_idx", PyBytes::new(py, as_bytes(&self.rec_idx)))?;
        d.set_item("event_index", PyBytes::new(py, as_bytes(&self.event_index)))?;
        d.set_item("kind", self.kind.export(py))?;
        d.set_item("op", self.op.export(py))?;
        d.set_item("commit_ts", self.commit_ts.export(py))?;
        d.set_item("execute_ts_ms", self.execute_ts.export(py))?;
        d.set_item("database", self.database.export(py))?;
        d.set_item("table", self.table.export(py))?;
        d.set_item("key_columns", self.key_columns.export(py))?;
        d.set_item("key_items", self.keys.export(py))?;
        d.set_item("before", self.before.export(py))?;
        d.set_item("before_items", self.before_cols.export(py))?;
        d.set_item("after", self.after.export(py))?;
        d.set_item("after_items", self.after_cols.export(py))?;
        d.set_item("watermark_ts", self.watermark_ts.export(py))?;
        d.set_item("tx_id", self.tx_id.export(py))?;
        d.set_item("extras", self.extras.export(py))?;
        d.set_item("extra_keys", self.extra_keys.export(py))?;
        d.set_item("extra_values", self.extra_values.export(py))?;
        Ok(d)
    }

    fn push_extras(&mut self, extras: &[(&str, String)]) {
        for (k, v) in extras {
            self.extra_keys.push_str(Some(k));
            self.extra_values.push_str(Some(v));
        }
        let len = self.extra_keys.len();
        self.extras.push(!extras.is_empty(), len);
    }
}

#[pyclass]
struct CanalJsonDecoder {
    rule_fn: Py<PyAny>,
    canal_flavor: bool,
    rules: Vec<Rule>,
    by_type: HashMap<String, usize>,
    untyped: Option<usize>,
    types: Vec<canal_typed::Types>, // the typed front end's resolved mysqlType of recent tables
    typed: bool,
}

impl CanalJsonDecoder {
    /// The rule of a type text (None: the column has no mysqlType), computed by Python once.
    fn rule(&mut self, py: Python<'_>, type_text: Option<&str>) -> PyResult<usize> {
        let cached = match type_text {
            Some(t) => self.by_type.get(t).copied(),
            None => self.untyped,
        };
        if let Some(i) = cached {
            return Ok(i);
        }
        let out = self.rule_fn.bind(py).call1((type_text,))?;
        let (type_lower, flags, binary, java_float, labels, is_enum): (Option<String>, i32, bool, bool, Option<Vec<String>>, bool) =
            out.extract()?;
        self.rules.push(Rule { type_lower, flags, binary, java_float, labels, is_enum });
        let i = self.rules.len() - 1;
        match type_text {
            Some(t) => {
                self.by_type.insert(t.to_owned(), i);
            }
            None => self.untyped = Some(i),
        }
        Ok(i)
    }

    fn column(
        &mut self,
        py: Python<'_>,
        name: &str,
        value: &Value,
        types: Option<&Map<String, Value>>,
        pk: &[&str],
    ) -> PyResult<R<Col>> {
        let type_text = match types.and_then(|t| t.get(name)) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(_) => return Ok(Err(Fallback)),
        };
        let ri = match self.rule(py, type_text) {
            Ok(i) => i,
            Err(_) => return Ok(Err(Fallback)), // the reference fails on this type: Python quarantines
        };
        let rule = &self.rules[ri];
        let mut flags = rule.flags;
        if pk.contains(&name) {
            flags |= KEY_FLAGS;
        }
        let data = match value {
            Value::Null => None,
            Value::String(s) => {
                if rule.binary {
                    let mut out = Vec::with_capacity(s.len());
                    for ch in s.chars() {
                        let c = ch as u32;
                        if c > 0xFF {
                            return Ok(Err(Fallback));
                        }
                        out.push(c as u8);
                    }
                    Some(out)
                } else if rule.java_float && self.canal_flavor {
                    return Ok(Err(Fallback)); // Canal's Java float text: the Python codec rewrites it
                } else {
                    Some(s.as_bytes().to_vec())
                }
            }
            _ => return Ok(Err(Fallback)),
        };
        let label = match &data {
            Some(d) if rule.labels.is_some() => match label_of(rule, d) {
                Ok(l) => l,
                Err(f) => return Ok(Err(f)),
            },
            _ => None,
        };
        Ok(Ok(Col { name: name.to_owned(), rule: ri, flags, value: data, label }))
    }

    fn image(&mut self, py: Python<'_>, row: &Value, types: Option<&Map<String, Value>>, pk: &[&str]) -> PyResult<R<Vec<Col>>> {
        let row = match row {
            Value::Object(o) => o,
            _ => return Ok(Err(Fallback)),
        };
        let mut cols = Vec::with_capacity(row.len());
        for (n, v) in row {
            match self.column(py, n, v, types, pk)? {
                Ok(c) => cols.push(c),
                Err(f) => return Ok(Err(f)),
            }
        }
        Ok(Ok(cols))
    }

    /// UPDATE's old image: columns of `old` replace the new image's, missing ones are unchanged.
    fn old_image(
        &mut self,
        py: Python<'_>,
        old_row: &Value,
        new_image: &[Col],
        types: Option<&Map<String, Value>>,
        pk: &[&str],
    ) -> PyResult<R<Vec<Col>>> {
        let old_row = match old_row {
            Value::Object(o) => o,
            _ => return Ok(Err(Fallback)),
        };
        let mut cols = Vec::with_capacity(new_image.len());
        for c in new_image {
            match old_row.get(&c.name) {
                Some(v) => match self.column(py, &c.name, v, types, pk)? {
                    Ok(col) => cols.push(col),
                    Err(f) => return Ok(Err(f)),
                },
                None => cols.push(Col {
                    name: c.name.clone(),
                    rule: c.rule,
                    flags: c.flags,
                    value: c.value.clone(),
                    label: c.label.clone(),
                }),
            }
        }
        for (n, v) in old_row {
            if !new_image.iter().any(|c| &c.name == n) {
                match self.column(py, n, v, types, pk)? {
                    Ok(col) => cols.push(col),
                    Err(f) => return Ok(Err(f)),
                }
            }
        }
        Ok(Ok(cols))
    }

    fn push_image(&self, list: bool, cols: &[Col], after: bool, b: &mut Builders) {
        let (target, pool) = if after { (&mut b.after, &mut b.after_cols) } else { (&mut b.before, &mut b.before_cols) };
        if list {
            for c in cols {
                pool.push(c, &self.rules[c.rule]);
            }
        }
        target.push(list, pool.len());
    }

    /// Decode one record into the builders; Ok(Err(Fallback)) leaves it to Python.
    fn record(&mut self, py: Python<'_>, raw: &[u8], rec: i32, b: &mut Builders) -> PyResult<R<()>> {
        let msg: Value = match serde_json::from_slice(raw) {
            Ok(v) => v,
            Err(_) => return Ok(Err(Fallback)),
        };
        let msg = match &msg {
            Value::Object(o) => o,
            _ => return Ok(Err(Fallback)),
        };
        let empty = Map::new();
        let tidb = match msg.get("_tidb") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(o)) => o,
            _ => return Ok(Err(Fallback)),
        };
        for field in ["onlyHandleKey", "claimCheckLocation"] {
            match tidb.get(field) {
                None | Some(Value::Null) | Some(Value::Bool(false)) => {}
                _ => return Ok(Err(Fallback)),
            }
        }
        let r = (|| -> R<_> {
            let mut extras: Vec<(&str, String)> = Vec::new();
            if let Some(ts) = msg.get("ts") {
                if !ts.is_null() {
                    extras.push(("canal.ts", text_of(ts)?));
                }
            }
            if truthy(msg.get("id"))? {
                extras.push(("canal.id", text_of(&msg["id"])?));
            }
            let es = int_or_none(msg.get("es"))?;
            let commit_ts = int_or_none(tidb.get("commitTs"))?;
            if matches!(msg.get("isDdl"), Some(Value::Bool(true))) {
                return Err(Fallback); // DDL: classified by the Python reference
            }
            Ok((extras, es, commit_ts))
        })();
        let (extras, es, commit_ts) = match r {
            Ok(x) => x,
            Err(f) => return Ok(Err(f)),
        };
        let kind_type = match msg.get("type") {
            Some(Value::String(s)) => s.as_str(),
            _ => return Ok(Err(Fallback)),
        };
        if kind_type == "TIDB_WATERMARK" {
            let wm = match int_or_none(tidb.get("watermarkTs")) {
                Ok(Some(w)) => w,
                _ => return Ok(Err(Fallback)),
            };
            b.rec_idx.push(rec);
            b.event_index.push(0);
            b.kind.push_str(Some("watermark"));
            b.op.push(None);
            b.commit_ts.push(None);
            b.execute_ts.push(es);
            b.database.push(None);
            b.table.push(None);
            b.key_columns.push(false, b.keys.len());
            b.before.push(false, b.before_cols.len());
            b.after.push(false, b.after_cols.len());
            b.watermark_ts.push(Some(wm));
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
        let data = match msg.get("data") {
            Some(Value::Array(a)) if !a.is_empty() => a,
            _ => return Ok(Err(Fallback)),
        };
        let old = match (op, msg.get("old")) {
            ("update", Some(Value::Array(a))) => Some(a),
            ("update", _) => return Ok(Err(Fallback)),
            _ => None,
        };
        let types = match msg.get("mysqlType") {
            None | Some(Value::Null) => None,
            Some(Value::Object(o)) => Some(o),
            _ => return Ok(Err(Fallback)),
        };
        let pk_names: Option<Vec<&str>> = match msg.get("pkNames") {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) => {
                let mut names = Vec::with_capacity(a.len());
                for v in a {
                    match v {
                        Value::String(s) if !s.is_empty() => names.push(s.as_str()),
                        _ => return Ok(Err(Fallback)),
                    }
                }
                Some(names)
            }
            _ => return Ok(Err(Fallback)),
        };
        let pk: &[&str] = pk_names.as_deref().unwrap_or(&[]);
        let name_of = |field: &str| match msg.get(field) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.as_str()),
            _ => None,
        };
        let (database, table) = match (name_of("database"), name_of("table")) {
            (Some(d), Some(t)) => (d, t),
            _ => return Ok(Err(Fallback)), // the Python path quarantines it
        };
        let tx_id = match msg.get("gtid") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => (!s.is_empty()).then_some(s.as_str()),
            _ => return Ok(Err(Fallback)),
        };
        for (i, row) in data.iter().enumerate() {
            let image = match self.image(py, row, types, pk)? {
                Ok(c) => c,
                Err(f) => return Ok(Err(f)),
            };
            let before = match old {
                Some(old) => {
                    let Some(old_row) = old.get(i) else { return Ok(Err(Fallback)) };
                    match self.old_image(py, old_row, &image, types, pk)? {
                        Ok(c) => Some(c),
                        Err(f) => return Ok(Err(f)),
                    }
                }
                None => None,
            };
            // the key columns must be in the row that carries the key (archive_io.event_problem):
            // `data` is the after image, or the before image of a DELETE
            let keyed = &image;
            for k in pk {
                let found = keyed.iter().any(|c| c.name == *k)
                    || (k.is_ascii()
                        && keyed.iter().all(|c| c.name.is_ascii())
                        && keyed.iter().any(|c| c.name.eq_ignore_ascii_case(k)));
                if !found {
                    return Ok(Err(Fallback));
                }
            }
            b.rec_idx.push(rec);
            b.event_index.push(i as i32);
            b.kind.push_str(Some("row"));
            b.op.push_str(Some(op));
            b.commit_ts.push(commit_ts);
            b.execute_ts.push(es);
            b.database.push_str(Some(database));
            b.table.push_str(Some(table));
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
                    self.push_image(false, &[], false, b);
                    self.push_image(true, &image, true, b);
                }
                "delete" => {
                    self.push_image(true, &image, false, b);
                    self.push_image(false, &[], true, b);
                }
                _ => {
                    self.push_image(true, before.as_deref().unwrap_or(&[]), false, b);
                    self.push_image(true, &image, true, b);
                }
            }
            b.watermark_ts.push(None);
            b.tx_id.push_str(tx_id);
            b.push_extras(&extras);
        }
        Ok(Ok(()))
    }
}

fn buffer_bytes<'a>(buf: &'a PyBuffer<u8>) -> &'a [u8] {
    // SAFETY: the buffer is held (and so kept alive and unchanged) for the whole call.
    unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const u8, buf.len_bytes()) }
}

#[pymethods]
impl CanalJsonDecoder {
    /// `rule(type_text) -> (type_lower, flags, binary, java_float, labels, is_enum)`;
    /// `canal_flavor`: flat-message-flavor=canal (Java float text goes to Python).
    #[new]
    fn new(rule: Py<PyAny>, canal_flavor: bool) -> Self {
        let typed = std::env::var("CDC_REPLAY_FRONTEND").map_or(true, |v| v != "value");
        CanalJsonDecoder {
            rule_fn: rule,
            canal_flavor,
            rules: Vec::new(),
            by_type: HashMap::new(),
            untyped: None,
            types: Vec::new(),
            typed,
        }
    }

    /// Decode `length` values of an Arrow binary array given as its buffers (validity bitmap
    /// or None, offsets (int32, or int64 when `large`), data) starting at slot `offset`.
    /// Returns a dict of Arrow buffers (see spark_apps/native_decode.py) and `status`: one byte
    /// per record, 1 when decoded here, 0 when the Python codec must decode it.
    #[pyo3(signature = (validity, offsets, data, offset, length, large=false))]
    fn decode<'py>(
        &mut self,
        py: Python<'py>,
        validity: Option<Bound<'py, PyAny>>,
        offsets: Bound<'py, PyAny>,
        data: Bound<'py, PyAny>,
        offset: usize,
        length: usize,
        large: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let vbuf = validity.map(|v| PyBuffer::<u8>::get(&v)).transpose()?;
        let obuf = PyBuffer::<u8>::get(&offsets)?;
        let dbuf = PyBuffer::<u8>::get(&data)?;
        let vbytes = vbuf.as_ref().map(buffer_bytes);
        let obytes = buffer_bytes(&obuf);
        let dbytes = buffer_bytes(&dbuf);
        let width = if large { 8 } else { 4 };
        if obytes.len() < (offset + length + 1) * width {
            return Err(pyo3::exceptions::PyValueError::new_err("offsets buffer too short"));
        }
        let off = |i: usize| -> usize {
            let p = i * width;
            if large {
                i64::from_ne_bytes(obytes[p..p + 8].try_into().unwrap()) as usize
            } else {
                i32::from_ne_bytes(obytes[p..p + 4].try_into().unwrap()) as usize
            }
        };
        let mut b = Builders::new();
        let mut status = vec![0u8; length];
        for (i, st) in status.iter_mut().enumerate() {
            let slot = offset + i;
            if let Some(v) = vbytes {
                if v[slot >> 3] >> (slot & 7) & 1 == 0 {
                    continue; // no value: the Python codec names the tombstone
                }
            }
            let (start, end) = (off(slot), off(slot + 1));
            if end > dbytes.len() || start > end {
                return Err(pyo3::exceptions::PyValueError::new_err("offsets beyond the data buffer"));
            }
            let mark = b.mark();
            let raw = &dbytes[start..end];
            let out = if self.typed { self.record_typed(py, raw, i as i32, &mut b)? } else { self.record(py, raw, i as i32, &mut b)? };
            match out {
                Ok(()) => *st = 1,
                Err(Fallback) => b.rollback(&mark),
            }
        }
        let d = b.export(py)?;
        d.set_item("status", PyBytes::new(py, &status))?;
        Ok(d)
    }
}

#[pymodule]
fn cdc_replay_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CanalJsonDecoder>()?;
    m.add_function(wrap_pyfunction!(archive::decode_lines, m)?)?;
    m.add("__doc__", "cdc-replay's compiled canal-json decoder (see spark_apps/native_decode.py)")?;
    Ok(())
}

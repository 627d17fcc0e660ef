//! TiCDC Avro (codecs/avro.py is the reference): Confluent-framed key/value records in, Arrow
//! buffers of the canonical events out, with no Python object per value.
//!
//! The Avro binary is read by the `apache-avro` crate with the writer schema the Python codec
//! resolves from the registry (`plan` callback, once per schema id): the schema as the codec
//! reads it (strings as bytes, no logical types: `avro._io_type`) and, per field, the column's
//! canonical type text, flags and value rule, taken from the codec's own analysis
//! (`_WriterSchema`). ENUM/SET labels are mapped by the codec's converter, once per distinct
//! label. A record goes back to the Python codec when anything is doubtful: an unknown schema
//! id or one the codec rejects, a body the crate refuses (it is stricter than fastavro: varints
//! past 10 bytes, negative lengths, union indexes and booleans out of range, strings that are
//! not UTF-8 in the key/value names), a value its rule refuses, DDL, and records without key
//! and value. Those are decoded (or quarantined) by the reference.

use std::collections::{BTreeMap, HashMap};

use std::sync::OnceLock;

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::schema::{Name, RecordField, RecordSchema, UnionSchema};
use apache_avro::types::Value;
use apache_avro::Schema;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{craft, BinaryArg, BinaryArray, Builders, Fallback, R};

const MAGIC: u8 = 0x00;
const DDL: u8 = 0x01;
const WATERMARK: u8 = 0x02;
const HANDLE_KEY: i32 = 1 << 1;
const DEFAULT_NAMESPACE: &str = "default";

/// How a field's datum becomes the canonical value (the converters of codecs/avro.py).
enum Rule {
    Text,
    Integer,
    U64,
    Float32,
    Float64,
    Boolean,
    Bit,
    Decimal(u32),
    /// ENUM/SET: the codec's converter, called once per distinct label (None: it refused it).
    Call(Py<PyAny>, HashMap<Vec<u8>, Converted>),
}

/// The codec converter's answer for one raw value: (value, label), or None when it refused it.
type Converted = Option<(Vec<u8>, Option<String>)>;

enum Field {
    Column { name: String, mysql_type: Option<String>, flags: i32, rule: Rule },
    Op,
    CommitTs,
    Physical,
    Checksum,
    Corrupted,
    ChecksumVersion,
}

/// A parsed Avro schema and the crate's datum reader for it, which borrows it.
pub(crate) struct SchemaReader {
    // the reader borrows `_schema`: declared first so it is dropped first
    pub(crate) reader: GenericDatumReader<'static>,
    _schema: Box<Schema>,
}

impl SchemaReader {
    /// None when the crate cannot build a reader for the schema.
    pub(crate) fn new(schema: Box<Schema>) -> Option<Self> {
        // SAFETY: the schema is boxed (it never moves) and kept in the same struct as the
        // reader, which is dropped before it.
        let schema_ref: &'static Schema = unsafe { &*(schema.as_ref() as *const Schema) };
        let reader = GenericDatumReader::builder(schema_ref).build().ok()?;
        Some(SchemaReader { reader, _schema: schema })
    }
}

/// A field's Avro type as the codec reads it (`avro._io_code`: "long", "null,bytes"): a
/// primitive or a union of them; None for anything else (the codec's analysis gives no other).
fn io_schema(code: &str) -> Option<Schema> {
    fn primitive(name: &str) -> Option<Schema> {
        Some(match name {
            "null" => Schema::Null,
            "boolean" => Schema::Boolean,
            "int" => Schema::Int,
            "long" => Schema::Long,
            "float" => Schema::Float,
            "double" => Schema::Double,
            "bytes" => Schema::Bytes,
            _ => return None,
        })
    }
    if !code.contains(',') {
        return primitive(code);
    }
    let branches = code.split(',').map(primitive).collect::<Option<Vec<_>>>()?;
    UnionSchema::new(branches).ok().map(Schema::Union)
}

/// The record schema the crate reads a writer schema's datums with, built from the fields'
/// types: not its JSON text, which the crate's parser reads with serde_json and checks every
/// name of with a regex (most of a schema id's cost in the extension, and TiCDC registers
/// about one id per ten records). Only the types and their order decide how the binary is
/// read: the record keeps one fixed name, and its fields none (the crate copies a field's
/// name into every datum it reads; the plan names the fields, by position), so the lookup
/// by name is empty.
fn record_schema(types: Vec<Schema>) -> Schema {
    static NAME: OnceLock<Name> = OnceLock::new();
    let name = NAME.get_or_init(|| Name::new("record").expect("a valid Avro name")).clone();
    let fields = types
        .into_iter()
        .map(|schema| RecordField {
            name: String::new(),
            doc: None,
            aliases: Vec::new(),
            default: None,
            schema,
            custom_attributes: BTreeMap::new(),
        })
        .collect();
    Schema::Record(RecordSchema { name, aliases: None, doc: None, fields, lookup: BTreeMap::new(), attributes: BTreeMap::new() })
}

/// A writer schema analysed by the Python codec, with its datum reader.
struct Plan {
    reader: SchemaReader,
    id: i32,
    namespace: String,
    database: String,
    table: String,
    fields: Vec<Field>,
}

impl Plan {
    fn columns(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().filter_map(|f| match f {
            Field::Column { name, .. } => Some(name.as_str()),
            _ => None,
        })
    }
}

#[pyclass]
pub(crate) struct AvroDecoder {
    plan_fn: Py<PyAny>,
    plans: Vec<Plan>,
    by_id: HashMap<i32, Option<usize>>,
    text: Vec<u8>,
}

/// The datum of a nullable field (`["null", T]` in either order) or a plain one; None: null.
fn non_null(v: &Value) -> Option<&Value> {
    match v {
        Value::Null => None,
        Value::Union(_, inner) => non_null(inner),
        other => Some(other),
    }
}

fn as_long(v: &Value) -> R<i64> {
    match v {
        Value::Int(n) => Ok(*n as i64),
        Value::Long(n) => Ok(*n),
        _ => Err(Fallback),
    }
}

fn as_bytes(v: &Value) -> R<&[u8]> {
    match v {
        Value::Bytes(b) => Ok(b),
        Value::String(s) => Ok(s.as_bytes()),
        _ => Err(Fallback),
    }
}

fn as_float(v: &Value) -> R<f64> {
    match v {
        Value::Float(f) => Ok(*f as f64),
        Value::Double(f) => Ok(*f),
        _ => Err(Fallback),
    }
}

/// `avro.decimal_text` of a big-endian two's-complement integer (wider than i128: Python).
fn decimal_text(raw: &[u8], scale: usize, out: &mut Vec<u8>) -> R<()> {
    if raw.len() > 16 {
        return Err(Fallback);
    }
    let mut n: i128 = if raw.first().is_some_and(|b| b & 0x80 != 0) { -1 } else { 0 };
    for &b in raw {
        n = (n << 8) | b as i128;
    }
    if n < 0 {
        out.push(b'-');
    }
    let digits = n.unsigned_abs().to_string();
    if scale == 0 {
        out.extend_from_slice(digits.as_bytes());
        return Ok(());
    }
    let padded = format!("{:0>width$}", digits, width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    out.extend_from_slice(int.as_bytes());
    out.push(b'.');
    out.extend_from_slice(frac.as_bytes());
    Ok(())
}

impl AvroDecoder {
    /// The plan of a schema id (None: the Python codec decodes records of it), asked once.
    fn plan(&mut self, py: Python<'_>, id: i32) -> PyResult<Option<usize>> {
        if let Some(&p) = self.by_id.get(&id) {
            return Ok(p);
        }
        let found = self.build(py, id)?;
        let index = found.map(|p| {
            self.plans.push(p);
            self.plans.len() - 1
        });
        self.by_id.insert(id, index);
        Ok(index)
    }

    fn build(&self, py: Python<'_>, id: i32) -> PyResult<Option<Plan>> {
        let out = self.plan_fn.bind(py).call1((id,))?;
        if out.is_none() {
            return Ok(None);
        }
        type FieldSpec = (String, Option<String>, i32, String, Py<PyAny>, String);
        let (namespace, database, table, specs): (String, String, String, Vec<FieldSpec>) = out.extract()?;
        let mut fields = Vec::with_capacity(specs.len());
        let mut read_as = Vec::with_capacity(specs.len());
        for (name, mysql_type, flags, kind, arg, io_type) in specs {
            let Some(schema) = io_schema(&io_type) else { return Ok(None) };
            read_as.push(schema);
            fields.push(match kind.as_str() {
                "_tidb_op" => Field::Op,
                "_tidb_commit_ts" => Field::CommitTs,
                "_tidb_commit_physical_time" => Field::Physical,
                "_tidb_row_level_checksum" => Field::Checksum,
                "_tidb_corrupted" => Field::Corrupted,
                "_tidb_checksum_version" => Field::ChecksumVersion,
                _ => {
                    let rule = match kind.as_str() {
                        "text" => Rule::Text,
                        "integer" => Rule::Integer,
                        "u64" => Rule::U64,
                        "float32" => Rule::Float32,
                        "float64" => Rule::Float64,
                        "boolean" => Rule::Boolean,
                        "bit" => Rule::Bit,
                        "decimal" => Rule::Decimal(arg.bind(py).extract()?),
                        "call" => Rule::Call(arg, HashMap::new()),
                        _ => return Ok(None),
                    };
                    Field::Column { name, mysql_type, flags, rule }
                }
            });
        }
        let Some(reader) = SchemaReader::new(Box::new(record_schema(read_as))) else { return Ok(None) };
        Ok(Some(Plan { reader, id, namespace, database, table, fields }))
    }

    /// A Confluent-framed part: its plan and the record's field datums.
    fn read(&mut self, py: Python<'_>, data: &[u8]) -> PyResult<R<(usize, Vec<Value>)>> {
        if data.len() < 5 || data[0] != MAGIC {
            return Ok(Err(Fallback));
        }
        let id = i32::from_be_bytes(data[1..5].try_into().unwrap());
        if id <= 0 {
            return Ok(Err(Fallback));
        }
        let Some(p) = self.plan(py, id)? else { return Ok(Err(Fallback)) };
        let mut body = &data[5..];
        let Ok(Value::Record(items)) = self.plans[p].reader.reader.read_value(&mut body) else {
            return Ok(Err(Fallback));
        };
        if !body.is_empty() || items.len() != self.plans[p].fields.len() {
            return Ok(Err(Fallback)); // trailing bytes: the reference names them
        }
        Ok(Ok((p, items.into_iter().map(|(_, v)| v).collect())))
    }

    /// One image's columns appended to a side's pool (`keys`: the handle-key names).
    fn image(&mut self, py: Python<'_>, p: usize, datums: &[Value], keys: &[String], after: bool, b: &mut Builders) -> PyResult<R<()>> {
        let pool = if after { &mut b.after_cols } else { &mut b.before_cols };
        let text = &mut self.text;
        for (field, datum) in self.plans[p].fields.iter_mut().zip(datums) {
            let Field::Column { name, mysql_type, flags, rule } = field else { continue };
            text.clear();
            let mut label: Option<&str> = None;
            let value = match non_null(datum) {
                None => None,
                Some(v) => {
                    let ok = match rule {
                        Rule::Text => as_bytes(v).map(|raw| text.extend_from_slice(raw)),
                        Rule::Integer => as_long(v).map(|n| text.extend_from_slice(n.to_string().as_bytes())),
                        Rule::U64 => as_long(v).map(|n| text.extend_from_slice((n as u64).to_string().as_bytes())),
                        Rule::Float32 => as_float(v).and_then(|f| craft::shortest_f32(f, text)),
                        Rule::Float64 => as_float(v).and_then(|f| craft::shortest_f64(f, text)),
                        Rule::Boolean => match v {
                            Value::Boolean(x) => {
                                text.push(if *x { b'1' } else { b'0' });
                                Ok(())
                            }
                            _ => Err(Fallback),
                        },
                        Rule::Bit => as_bytes(v).and_then(|raw| {
                            if raw.len() > 8 {
                                return Err(Fallback);
                            }
                            let n = raw.iter().fold(0u64, |n, &x| n << 8 | x as u64);
                            text.extend_from_slice(n.to_string().as_bytes());
                            Ok(())
                        }),
                        Rule::Decimal(scale) => as_bytes(v).and_then(|raw| decimal_text(raw, *scale as usize, text)),
                        Rule::Call(convert, cache) => {
                            let raw = match as_bytes(v) {
                                Ok(raw) => raw,
                                Err(f) => return Ok(Err(f)),
                            };
                            if !cache.contains_key(raw) {
                                let got = convert
                                    .bind(py)
                                    .call1((pyo3::types::PyBytes::new(py, raw),))
                                    .ok()
                                    .and_then(|out| out.extract::<(Vec<u8>, Option<String>)>().ok());
                                cache.insert(raw.to_vec(), got);
                            }
                            match &cache[raw] {
                                Some((value, l)) => {
                                    text.extend_from_slice(value);
                                    label = l.as_deref();
                                    Ok(())
                                }
                                None => Err(Fallback), // refused: the reference quarantines it
                            }
                        }
                    };
                    if ok.is_err() {
                        return Ok(Err(Fallback));
                    }
                    Some(&text[..])
                }
            };
            let key = keys.iter().any(|k| k == name);
            pool.name.push_str(Some(name));
            pool.mysql_type.push_str(mysql_type.as_deref());
            pool.flags.push(if key { *flags | HANDLE_KEY } else { *flags });
            pool.value.push(value);
            pool.label.push_str(label);
        }
        Ok(Ok(()))
    }

    /// One record (key, value) into the builders (`rec`: its record index).
    pub(crate) fn record(&mut self, py: Python<'_>, key: Option<&[u8]>, value: Option<&[u8]>, rec: i32, b: &mut Builders) -> PyResult<R<()>> {
        let key = key.filter(|k| !k.is_empty()); // `record.key or None`
        let value = value.filter(|v| !v.is_empty());
        let Some(key) = key else {
            return Ok(match value {
                Some(v) if v[0] == WATERMARK => watermark(v, rec, b),
                Some(v) if v[0] == DDL => Err(Fallback), // classified by the reference
                Some(v) => return self.row(py, None, v, rec, b),
                None => Err(Fallback), // neither key nor value: the reference names it
            });
        };
        match value {
            Some(v) => self.row(py, Some(key), v, rec, b),
            None => self.tombstone(py, key, rec, b),
        }
    }

    fn start(b: &mut Builders, rec: i32) {
        b.rec_idx.push(rec);
        b.event_index.push(0);
        b.tx_id.push(None);
        b.watermark_ts.push(None);
        b.kind.push_str(Some("row"));
    }

    fn names_ok(plan: &Plan) -> bool {
        !plan.database.is_empty() && !plan.table.is_empty() && plan.columns().next().is_some()
    }

    fn tombstone(&mut self, py: Python<'_>, key: &[u8], rec: i32, b: &mut Builders) -> PyResult<R<()>> {
        let (kp, datums) = match self.read(py, key)? {
            Ok(x) => x,
            Err(f) => return Ok(Err(f)),
        };
        let plan = &self.plans[kp];
        if !Self::names_ok(plan) {
            return Ok(Err(Fallback));
        }
        let keys: Vec<String> = plan.columns().map(str::to_owned).collect();
        let mut extras = vec![("avro.key_schema_id", plan.id.to_string())];
        if plan.namespace != DEFAULT_NAMESPACE {
            extras.push(("avro.namespace", plan.namespace.clone()));
        }
        let (database, table) = (plan.database.clone(), plan.table.clone());
        Self::start(b, rec);
        if let Err(f) = self.image(py, kp, &datums, &keys, false, b)? {
            return Ok(Err(f));
        }
        b.op.push_str(Some("delete"));
        b.commit_ts.push(None);
        b.execute_ts.push(None);
        b.database.push_str(Some(&database));
        b.table.push_str(Some(&table));
        for k in &keys {
            b.keys.push_str(Some(k));
        }
        b.key_columns.push(true, b.keys.len());
        b.before.push(true, b.before_cols.len());
        b.after.push(false, b.after_cols.len());
        b.push_extras(&extras);
        Ok(Ok(()))
    }

    fn row(&mut self, py: Python<'_>, key: Option<&[u8]>, value: &[u8], rec: i32, b: &mut Builders) -> PyResult<R<()>> {
        let mut extras: Vec<(&str, String)> = Vec::new();
        let mut keys: Vec<String> = Vec::new();
        let mut key_plan = None;
        if let Some(key) = key {
            let (kp, _) = match self.read(py, key)? {
                Ok(x) => x,
                Err(f) => return Ok(Err(f)),
            };
            keys = self.plans[kp].columns().map(str::to_owned).collect();
            extras.push(("avro.key_schema_id", self.plans[kp].id.to_string()));
            key_plan = Some(kp);
        }
        let (vp, datums) = match self.read(py, value)? {
            Ok(x) => x,
            Err(f) => return Ok(Err(f)),
        };
        let plan = &self.plans[vp];
        extras.push(("avro.value_schema_id", plan.id.to_string()));
        if let Some(kp) = key_plan {
            let k = &self.plans[kp];
            if (&k.database, &k.table, &k.namespace) != (&plan.database, &plan.table, &plan.namespace) {
                return Ok(Err(Fallback));
            }
        }
        if !Self::names_ok(plan) {
            return Ok(Err(Fallback));
        }
        // archive_io.event_problem: every key column is in the image
        for k in &keys {
            let found = plan.columns().any(|c| c == k || (c.is_ascii() && k.is_ascii() && c.eq_ignore_ascii_case(k)));
            if k.is_empty() || !found {
                return Ok(Err(Fallback));
            }
        }
        if plan.namespace != DEFAULT_NAMESPACE {
            extras.push(("avro.namespace", plan.namespace.clone()));
        }
        let (mut op, mut commit_ts, mut physical) = ("insert", None, None);
        let mut checksum: [Option<String>; 3] = [None, None, None];
        for (field, datum) in plan.fields.iter().zip(&datums) {
            let ok: R<()> = (|| {
                match field {
                    Field::Column { .. } => {}
                    Field::Op => {
                        op = match as_bytes(datum)? {
                            b"c" => "insert",
                            b"u" => "update",
                            _ => return Err(Fallback),
                        }
                    }
                    Field::CommitTs => {
                        let ts = as_long(datum)?;
                        if ts < 0 {
                            return Err(Fallback);
                        }
                        commit_ts = (ts != 0).then_some(ts);
                    }
                    Field::Physical => {
                        let ms = as_long(datum)?;
                        physical = (ms != 0).then_some(ms);
                    }
                    Field::Checksum => {
                        let s = std::str::from_utf8(as_bytes(datum)?).map_err(|_| Fallback)?;
                        checksum[0] = Some(s.to_owned());
                    }
                    Field::Corrupted => match datum {
                        Value::Boolean(x) => checksum[1] = Some(if *x { "true" } else { "false" }.to_owned()),
                        _ => return Err(Fallback),
                    },
                    Field::ChecksumVersion => checksum[2] = Some(as_long(datum)?.to_string()),
                }
                Ok(())
            })();
            if ok.is_err() {
                return Ok(Err(Fallback));
            }
        }
        for (name, v) in ["avro.row_level_checksum", "avro.corrupted", "avro.checksum_version"].into_iter().zip(checksum) {
            if let Some(v) = v {
                extras.push((name, v));
            }
        }
        let (database, table) = (plan.database.clone(), plan.table.clone());
        Self::start(b, rec);
        if let Err(f) = self.image(py, vp, &datums, &keys, true, b)? {
            return Ok(Err(f));
        }
        b.op.push_str(Some(op));
        b.commit_ts.push(commit_ts);
        b.execute_ts.push(physical);
        b.database.push_str(Some(&database));
        b.table.push_str(Some(&table));
        for k in &keys {
            b.keys.push_str(Some(k));
        }
        b.key_columns.push(true, b.keys.len());
        b.before.push(false, b.before_cols.len());
        b.after.push(true, b.after_cols.len());
        b.push_extras(&extras);
        Ok(Ok(()))
    }
}

/// `0x02 | uint64 BE ts`: a watermark event.
fn watermark(v: &[u8], rec: i32, b: &mut Builders) -> R<()> {
    if v.len() != 9 {
        return Err(Fallback);
    }
    let ts = u64::from_be_bytes(v[1..9].try_into().unwrap());
    if ts >= 1 << 63 {
        return Err(Fallback);
    }
    let ts = ts as i64;
    b.rec_idx.push(rec);
    b.event_index.push(0);
    b.execute_ts.push((ts >> 18 != 0).then_some(ts >> 18));
    b.tx_id.push(None);
    b.push_watermark(ts);
    b.push_extras(&[]);
    Ok(())
}

#[pymethods]
impl AvroDecoder {
    /// `plan(schema_id) -> None | (namespace, database, table, fields)`, each field `(name,
    /// mysql_type, flags, rule, arg, Avro type as read)` (codecs/avro.py `_compiled_plan`).
    #[new]
    fn new(plan: Py<PyAny>) -> Self {
        AvroDecoder { plan_fn: plan, plans: Vec::new(), by_id: HashMap::new(), text: Vec::new() }
    }

    /// As `OpenProtocolDecoder.decode`: values and keys as Arrow binary buffers. Unlike the
    /// other protocols a null value is decoded here (a DELETE is the key alone).
    fn decode<'py>(&mut self, py: Python<'py>, values: BinaryArg<'py>, keys: BinaryArg<'py>) -> PyResult<Bound<'py, PyDict>> {
        let values = BinaryArray::new(values)?;
        let keys = values.keys(keys)?;
        let mut b = Builders::new();
        let mut status = vec![0u8; values.length];
        for (i, st) in status.iter_mut().enumerate() {
            let (key, value) = (keys.get(i)?, values.get(i)?);
            *st = b.attempt(|b| self.record(py, key, value, i as i32, b))? as u8;
        }
        let d = b.export(py)?;
        d.set_item("status", pyo3::types::PyBytes::new(py, &status))?;
        Ok(d)
    }
}

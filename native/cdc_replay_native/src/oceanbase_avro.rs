//! OceanBase OMS `AvroRecord` (codecs/oceanbase_avro.py is the reference): plain or
//! Confluent-framed Avro records in, Arrow buffers of the canonical events out, with no Python
//! object per value.
//!
//! The Avro binary is read by the `apache-avro` crate (its schema-aware serde reader, straight
//! into the types below) with the codec's own schema (`SCHEMA_JSON`). What a column's type is —
//! its dataTypeNumber, disambiguated and completed by its values' type_info, member, charset and
//! DECIMAL/BIT/ENUM/SET parameters — comes from the codec's `_column_type`, once per distinct
//! combination; ENUM/SET values go through the codec's `_render`, once per distinct value; a
//! time zone's offset comes from the codec's `parse_zone`, once per zone text. The other members
//! are rendered here as `_render` does. A record goes back to the Python codec when anything is
//! doubtful: a body the crate refuses (it is stricter than fastavro: negative enum and union
//! indexes, ints beyond 32 bits, varints past 10 bytes, booleans other than 0/1), a Confluent
//! attempt that fails (auto framing then retries as plain Avro in Python), DDL, transaction
//! boundaries and heartbeats (no event: Python writes the `empty` marker), split records, any
//! check of the reference that fails, a value the reference refuses or this path cannot render
//! exactly (NaN, float ties, time zones with rules, decimals outside the plain grammar, tag texts
//! that JSON escapes), and events `archive_io.event_problem` would quarantine.

use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasherDefault;

use apache_avro::Schema;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use crate::avro::SchemaReader;
use crate::{craft, decode_batch, push_int, BinaryArg, BinaryArray, Builders, Fallback, Fx, Positions, KEY_FLAGS, R};

// ------------------------------------------------------------------------------ the record

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "UPPERCASE")]
enum Operation {
    Insert,
    Update,
    Delete,
    Ddl,
    Begin,
    Commit,
    Heartbeat,
}

#[derive(Deserialize, Clone, Copy)]
enum Txind {
    B,
    M,
    E,
    W,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum SourceType {
    ObMysql,
    ObOracle,
}

#[derive(Deserialize)]
struct Source {
    #[serde(rename = "sourceType")]
    source_type: SourceType,
    version: String,
}

/// `ColumnValue.type_info`, in the schema's symbol order (TYPE_INFOS names them).
#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum DataType {
    Null,
    Integer,
    Long,
    Float,
    Double,
    Decimal,
    String,
    Binary,
    Timestamp,
    Date,
    Time,
    Datetime,
    Boolean,
    Bit,
    Geometry,
    Raw,
    Enum,
    Set,
    Array,
    Vector,
    SparseVector,
    Roaringbitmap,
    Map,
}

const TYPE_INFOS: [&str; 23] = [
    "NULL", "INTEGER", "LONG", "FLOAT", "DOUBLE", "DECIMAL", "STRING", "BINARY", "TIMESTAMP", "DATE", "TIME", "DATETIME",
    "BOOLEAN", "BIT", "GEOMETRY", "RAW", "ENUM", "SET", "ARRAY", "VECTOR", "SPARSE_VECTOR", "ROARINGBITMAP", "MAP",
];

/// Avro `bytes`.
struct Blob(Vec<u8>);

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Blob;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("bytes")
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Blob, E> {
                Ok(Blob(v))
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Blob, E> {
                Ok(Blob(v.to_vec()))
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// `tags` as the Python dict fastavro builds: a repeated key keeps its first place, last value.
struct Tags(Vec<(String, String)>);

impl<'de> Deserialize<'de> for Tags {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Tags;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tags, A::Error> {
                let mut out: Vec<(String, String)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, String>()? {
                    match out.iter_mut().find(|(seen, _)| *seen == k) {
                        Some(slot) => slot.1 = v,
                        None => out.push((k, v)),
                    }
                }
                Ok(Tags(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The `ColumnValue.value` union, its members in the schema's order (KINDS names them).
#[derive(Deserialize)]
enum Member {
    Null,
    Boolean(bool),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Bytes(Blob),
    Str(String),
    StringObject {
        #[serde(rename = "charsetName")]
        charset: String,
        value: String,
    },
    DecimalObject {
        precision: i32,
        scale: i32,
        value: String,
    },
    DateObject {
        year: i32,
        month: i32,
        day: i32,
    },
    TimeObject {
        negative: bool,
        hours: i32,
        minutes: i32,
        seconds: i32,
        nanos: i32,
    },
    DateTimeObject {
        year: i32,
        month: i32,
        day: i32,
        hours: i32,
        minutes: i32,
        seconds: i32,
        nanos: i32,
    },
    TimestampObject {
        seconds: i64,
        nanos: i32,
        timezone: Option<String>,
    },
    BitObject {
        bit_length: i32,
        value: String,
    },
    EnumSetValue {
        value: String,
        defines: Option<Vec<String>>,
    },
    GeometryValue {
        srid: i32,
        wkb: Blob,
    },
}

const KINDS: [&str; 17] = [
    "null", "boolean", "int", "long", "float", "double", "bytes", "string", "StringObject", "DecimalObject", "DateObject",
    "TimeObject", "DateTimeObject", "TimestampObject", "BitObject", "EnumSetValue", "GeometryValue",
];

impl Member {
    fn kind(&self) -> u8 {
        match self {
            Member::Null => 0,
            Member::Boolean(_) => 1,
            Member::Int(_) => 2,
            Member::Long(_) => 3,
            Member::Float(_) => 4,
            Member::Double(_) => 5,
            Member::Bytes(_) => 6,
            Member::Str(_) => 7,
            Member::StringObject { .. } => 8,
            Member::DecimalObject { .. } => 9,
            Member::DateObject { .. } => 10,
            Member::TimeObject { .. } => 11,
            Member::DateTimeObject { .. } => 12,
            Member::TimestampObject { .. } => 13,
            Member::BitObject { .. } => 14,
            Member::EnumSetValue { .. } => 15,
            Member::GeometryValue { .. } => 16,
        }
    }
}

struct ColumnValue {
    type_info: DataType,
    value: Member,
}

struct FieldDef {
    name: String,
    code: i32, // dataTypeNumber
}

struct AvroRecord {
    id: i64,
    version: i32,
    operation: Option<Operation>,
    xid: Option<String>,
    txind: Option<Txind>,
    position: Option<String>,
    timestamp: Option<i64>,
    source: Option<Source>,
    schema_name: Option<String>,
    table_name: Option<String>,
    fields: Option<Vec<FieldDef>>,
    pk_indexes: Option<Vec<i32>>,
    uk_indexes: Option<Vec<Vec<i32>>>,
    before_images: Option<Vec<ColumnValue>>,
    after_images: Option<Vec<ColumnValue>>,
    tags: Option<Tags>,
    total: i32,
    index: i32,
    before_image_bytes: Blob,
    after_image_bytes: Blob,
}

// The three records read most are read by position, not by field name (matching names was a
// tenth of the parse): the schema's field order is checked once (`check_order`).
const RECORD_FIELDS: [&str; 21] = [
    "id", "version", "operation", "xid", "txind", "position", "timestamp", "source", "schemaName", "tableName", "fields",
    "pkIndexes", "ukIndexes", "beforeImages", "afterImages", "sql", "tags", "total", "index", "beforeImageBytes",
    "afterImageBytes",
];
const COLUMN_VALUE_FIELDS: [&str; 2] = ["type_info", "value"];
const FIELD_FIELDS: [&str; 2] = ["name", "dataTypeNumber"];

/// A record field's name, not looked at: the fields come in the schema's order.
struct AnyName;

impl<'de> Deserialize<'de> for AnyName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AnyName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E>(self, _: &str) -> Result<AnyName, E> {
                Ok(AnyName)
            }
        }
        d.deserialize_identifier(V)
    }
}

/// The next field's value.
fn next<'de, A: MapAccess<'de>, T: Deserialize<'de>>(map: &mut A) -> Result<T, A::Error> {
    match map.next_key::<AnyName>()? {
        Some(AnyName) => map.next_value(),
        None => Err(de::Error::custom("a field is missing")),
    }
}

/// The end of the record.
fn end<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    match map.next_key::<AnyName>()? {
        None => Ok(()),
        Some(AnyName) => Err(de::Error::custom("more fields than expected")),
    }
}

/// `Deserialize` for a record read by position; `$build` reads its fields with `next`.
macro_rules! positional {
    ($ty:ident, $name:literal, $fields:ident, |$map:ident| $build:expr) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str($name)
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut $map: A) -> Result<$ty, A::Error> {
                        let value = $build;
                        end(&mut $map)?;
                        Ok(value)
                    }
                }
                d.deserialize_struct($name, &$fields, V)
            }
        }
    };
}

positional!(ColumnValue, "ColumnValue", COLUMN_VALUE_FIELDS, |map| ColumnValue {
    type_info: next(&mut map)?,
    value: next(&mut map)?
});

positional!(FieldDef, "Field", FIELD_FIELDS, |map| FieldDef { name: next(&mut map)?, code: next(&mut map)? });

positional!(AvroRecord, "AvroRecord", RECORD_FIELDS, |map| {
    // read in the schema's order (tuple and struct expressions evaluate left to right)
    let (id, version, operation, xid, txind, position, timestamp, source) = (
        next(&mut map)?,
        next(&mut map)?,
        next(&mut map)?,
        next(&mut map)?,
        next(&mut map)?,
        next(&mut map)?,
        next(&mut map)?,
        next(&mut map)?,
    );
    let (schema_name, table_name, fields, pk_indexes, uk_indexes) =
        (next(&mut map)?, next(&mut map)?, next(&mut map)?, next(&mut map)?, next(&mut map)?);
    let (before_images, after_images) = (next(&mut map)?, next(&mut map)?);
    let _sql: Option<de::IgnoredAny> = next(&mut map)?; // read (the body must be whole); DDL goes to Python
    AvroRecord {
        id,
        version,
        operation,
        xid,
        txind,
        position,
        timestamp,
        source,
        schema_name,
        table_name,
        fields,
        pk_indexes,
        uk_indexes,
        before_images,
        after_images,
        tags: next(&mut map)?,
        total: next(&mut map)?,
        index: next(&mut map)?,
        before_image_bytes: next(&mut map)?,
        after_image_bytes: next(&mut map)?,
    }
});

/// The field names of record `name` in `schema` (searched depth-first), to check the order.
fn record_fields(schema: &Schema, name: &str) -> Option<Vec<String>> {
    match schema {
        Schema::Record(r) if r.name.name() == name => Some(r.fields.iter().map(|f| f.name.clone()).collect()),
        Schema::Record(r) => r.fields.iter().find_map(|f| record_fields(&f.schema, name)),
        Schema::Union(u) => u.variants().iter().find_map(|v| record_fields(v, name)),
        Schema::Array(a) => record_fields(&a.items, name),
        _ => None,
    }
}

/// The positional records' fields are in the order they are read in.
fn check_order(schema: &Schema) -> Result<(), String> {
    for (name, expected) in
        [("AvroRecord", &RECORD_FIELDS[..]), ("ColumnValue", &COLUMN_VALUE_FIELDS[..]), ("Field", &FIELD_FIELDS[..])]
    {
        if record_fields(schema, name).as_deref().map(|f| f.iter().map(String::as_str).eq(expected.iter().copied())) != Some(true) {
            return Err(format!("the schema's {name} does not have the fields {expected:?} in this order"));
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------ rules

/// A column type as the codec's `_column_type` decides it (`native_decode._oceanbase_rules`).
struct ColRule {
    mysql_type: Option<String>,
    flags: i32, // BINARY for the binary bases, without the key flags
    binary: bool,
    float: bool,    // base FLOAT: float values are float32 texts
    enum_set: bool, // base ENUM/SET: a plain string is a label
    labels: bool,   // the type states its labels
    default_code: i32,
    parsed: Py<PyAny>, // the codec's MySQLType, for `_render` calls
}

/// The codec's `_render` answer for one ENUM/SET value: (value, label), or None when refused.
type Converted = Option<(Vec<u8>, Option<String>)>;

#[derive(Clone, Copy)]
enum Framing {
    Auto,
    Plain,
    Confluent,
}

#[pyclass]
pub(crate) struct OceanBaseAvroDecoder {
    reader: SchemaReader,
    column_fn: Py<PyAny>,
    render_fn: Py<PyAny>,
    zone_fn: Py<PyAny>,
    framing: Framing,
    ms_per_unit: i64,
    default_zone: Option<i64>,
    rules: Vec<ColRule>,
    by_key: HashMap<Vec<u8>, Option<usize>>,
    recent: Vec<Vec<Seen>>, // the last few column types of each column position
    calls: HashMap<Vec<u8>, Converted, BuildHasherDefault<Fx>>,
    zones: HashMap<String, Option<i64>>,
    key: Vec<u8>,
    scratch: Scratch,
}

/// Buffers reused from record to record.
#[derive(Default)]
struct Scratch {
    text: Vec<u8>,
    label: String,
    keys: Vec<usize>, // the key columns' field indexes
}

/// What `_column_type` reads of a value besides its type_info and member.
#[derive(PartialEq)]
enum Detail {
    None,
    Charset(String),
    Decimal(i32, i32),
    Bit(i32),
    Defines(Option<Vec<String>>),
}

impl Detail {
    fn of(v: &Member) -> Detail {
        match v {
            Member::StringObject { charset, .. } => Detail::Charset(charset.clone()),
            Member::DecimalObject { precision, scale, .. } => Detail::Decimal(*precision, *scale),
            Member::BitObject { bit_length, .. } => Detail::Bit(*bit_length),
            Member::EnumSetValue { defines, .. } => Detail::Defines(defines.clone()),
            _ => Detail::None,
        }
    }
    /// The same as `v`'s (whose member kind is the one this was taken from).
    fn same(&self, v: &Member) -> bool {
        match (self, v) {
            (Detail::None, _) => true,
            (Detail::Charset(c), Member::StringObject { charset, .. }) => c == charset,
            (Detail::Decimal(p, s), Member::DecimalObject { precision, scale, .. }) => p == precision && s == scale,
            (Detail::Bit(n), Member::BitObject { bit_length, .. }) => n == bit_length,
            (Detail::Defines(d), Member::EnumSetValue { defines, .. }) => d == defines,
            _ => false,
        }
    }
}

/// A column type seen at a column position: compared field by field with the next records'
/// columns, so a repeated type costs no key and no hash lookup.
struct Seen {
    code: i32,
    values: Vec<(u8, u8, Detail)>,
    rule: Option<usize>,
}

impl Seen {
    fn same(&self, code: i32, values: &[&ColumnValue]) -> bool {
        self.code == code
            && self.values.len() == values.len()
            && self.values.iter().zip(values).all(|((info, kind, detail), v)| {
                *info == v.type_info as u8 && *kind == v.value.kind() && detail.same(&v.value)
            })
    }
}

/// A column's values' share of its type key: what `_column_type` reads of each.
fn key_of(v: &ColumnValue, key: &mut Vec<u8>) {
    key.push(v.type_info as u8);
    key.push(v.value.kind());
    match &v.value {
        Member::StringObject { charset, .. } => push_text(key, charset),
        Member::DecimalObject { precision, scale, .. } => {
            key.extend_from_slice(&precision.to_le_bytes());
            key.extend_from_slice(&scale.to_le_bytes());
        }
        Member::BitObject { bit_length, .. } => key.extend_from_slice(&bit_length.to_le_bytes()),
        Member::EnumSetValue { defines, .. } => match defines {
            None => key.push(0),
            Some(d) => {
                key.push(1);
                key.extend_from_slice(&(d.len() as u32).to_le_bytes());
                for label in d {
                    push_text(key, label);
                }
            }
        },
        _ => {}
    }
}

/// What `_column_type` is asked with for one value: (type_info, member, detail).
fn describe<'py>(py: Python<'py>, v: &ColumnValue) -> PyResult<Bound<'py, PyTuple>> {
    let detail: Bound<'py, PyAny> = match &v.value {
        Member::StringObject { charset, .. } => charset.into_pyobject(py)?.into_any(),
        Member::DecimalObject { precision, scale, .. } => (precision, scale).into_pyobject(py)?.into_any(),
        Member::BitObject { bit_length, .. } => bit_length.into_pyobject(py)?.into_any(),
        Member::EnumSetValue { defines, .. } => defines.into_pyobject(py)?.into_any(),
        _ => py.None().into_bound(py),
    };
    PyTuple::new(
        py,
        [
            TYPE_INFOS[v.type_info as usize].into_pyobject(py)?.into_any(),
            KINDS[v.value.kind() as usize].into_pyobject(py)?.into_any(),
            detail,
        ],
    )
}

fn push_text(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// `_decimal_text` for the plain grammar (`-?\d+(\.\d+)?`, ASCII digits); anything else,
/// which the reference checks with `decimal.Decimal`, goes to Python.
fn decimal_text(text: &str, scale: i32, out: &mut Vec<u8>) -> R<()> {
    let b = text.as_bytes();
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    let (int, frac) = match digits.iter().position(|&c| c == b'.') {
        Some(p) => (&digits[..p], Some(&digits[p + 1..])),
        None => (digits, None),
    };
    let plain = |d: &[u8]| !d.is_empty() && d.iter().all(u8::is_ascii_digit);
    if !plain(int) || frac.is_some_and(|f| !plain(f)) {
        return Err(Fallback);
    }
    out.extend_from_slice(b);
    let have = frac.map_or(0, <[u8]>::len) as i64;
    let missing = scale as i64 - have;
    if missing > 0 {
        if missing > 1000 {
            return Err(Fallback); // the reference would build it; not worth it here
        }
        if frac.is_none() {
            out.push(b'.');
        }
        out.resize(out.len() + missing as usize, b'0');
    }
    Ok(())
}

/// `n` (checked to be 0 or more) in decimal, zero-padded to `width` digits: `f"{n:0{width}d}"`.
fn push_padded(out: &mut Vec<u8>, n: i64, width: usize) {
    let mut digits = [b'0'; 20];
    let mut i = digits.len();
    let mut u = n.unsigned_abs();
    while u > 0 {
        i -= 1;
        digits[i] = b'0' + (u % 10) as u8;
        u /= 10;
    }
    out.extend_from_slice(&digits[i.min(digits.len() - width)..]);
}

/// `_fraction`: nothing, microseconds, or nanoseconds.
fn fraction(nanos: i32, out: &mut Vec<u8>) {
    if nanos == 0 {
    } else if nanos % 1000 == 0 {
        out.push(b'.');
        push_padded(out, i64::from(nanos / 1000), 6);
    } else {
        out.push(b'.');
        push_padded(out, i64::from(nanos), 9);
    }
}

/// `HH:MM:SS` (hours at least two digits).
fn push_clock(out: &mut Vec<u8>, h: i64, m: i64, s: i64) {
    push_padded(out, h, 2);
    out.push(b':');
    push_padded(out, m, 2);
    out.push(b':');
    push_padded(out, s, 2);
}

/// `YYYY-MM-DD`.
fn push_date(out: &mut Vec<u8>, year: i64, month: i64, day: i64) {
    push_padded(out, year, 4);
    out.push(b'-');
    push_padded(out, month, 2);
    out.push(b'-');
    push_padded(out, day, 2);
}

fn date_text(year: i64, month: i64, day: i64, out: &mut Vec<u8>) -> R<()> {
    if !((0..=9999).contains(&year) && (0..=12).contains(&month) && (0..=31).contains(&day)) {
        return Err(Fallback);
    }
    push_date(out, year, month, day);
    Ok(())
}

fn time_text(negative: bool, h: i64, m: i64, s: i64, nanos: i32, max_hours: i64, out: &mut Vec<u8>) -> R<()> {
    if !((0..=max_hours).contains(&h) && (0..60).contains(&m) && (0..60).contains(&s) && (0..1_000_000_000).contains(&nanos)) {
        return Err(Fallback);
    }
    if negative {
        out.push(b'-');
    }
    push_clock(out, h, m, s);
    fraction(nanos, out);
    Ok(())
}

/// The proleptic Gregorian (year, month, day) of a day count from 1970-01-01.
fn civil(days: i64) -> (i64, i64, i64) {
    // shift to a calendar starting on 0000-03-01, so that leap days end each 4/100/400-year cycle
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 { month_from_march + 3 } else { month_from_march - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Seconds from the epoch of 0001-01-01 00:00:00 and 9999-12-31 23:59:59: Python's datetime range.
const SECONDS: std::ops::RangeInclusive<i64> = -62_135_596_800..=253_402_300_799;

/// `_timestamp_text` in a zone of fixed offset `offset` (seconds east of UTC).
fn timestamp_text(seconds: i64, nanos: i32, offset: i64, out: &mut Vec<u8>) -> R<()> {
    if !(0..1_000_000_000).contains(&nanos) || !SECONDS.contains(&seconds) {
        return Err(Fallback);
    }
    let local = seconds + offset;
    if !SECONDS.contains(&local) {
        return Err(Fallback); // Python's OverflowError: the reference quarantines it
    }
    let (year, month, day) = civil(local.div_euclid(86_400));
    let s = local.rem_euclid(86_400);
    push_date(out, year, month, day);
    out.push(b' ');
    push_clock(out, s / 3600, s / 60 % 60, s % 60);
    fraction(nanos, out);
    Ok(())
}

/// `_text`: UTF-8, or ISO-8859-1 for binary columns (a character above U+00FF goes to Python).
fn text_value(s: &str, binary: bool, out: &mut Vec<u8>) -> R<()> {
    if !binary {
        out.extend_from_slice(s.as_bytes());
        return Ok(());
    }
    for c in s.chars() {
        out.push(u8::try_from(u32::from(c)).map_err(|_| Fallback)?);
    }
    Ok(())
}

/// `orjson.dumps(tags)` for texts JSON writes as they are; anything it escapes goes to Python.
fn tags_json(tags: &[(String, String)]) -> R<String> {
    let plain = |s: &str| s.bytes().all(|c| c >= 0x20 && c != b'"' && c != b'\\');
    let mut out = String::from("{");
    for (i, (k, v)) in tags.iter().enumerate() {
        if !plain(k) || !plain(v) {
            return Err(Fallback);
        }
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        out.push_str(k);
        out.push_str("\":\"");
        out.push_str(v);
        out.push('"');
    }
    out.push('}');
    Ok(out)
}

fn indexes_json(lists: &[Vec<i32>]) -> String {
    let inner: Vec<String> =
        lists.iter().map(|l| format!("[{}]", l.iter().map(i32::to_string).collect::<Vec<_>>().join(","))).collect();
    format!("[{}]", inner.join(","))
}

/// `_side`: the image when the operation has it (with a value per field), else None.
fn side(image: &Option<Vec<ColumnValue>>, wanted: bool, width: usize) -> R<Option<&Vec<ColumnValue>>> {
    match (image, wanted) {
        (Some(img), false) if !img.is_empty() => Err(Fallback),
        (_, false) => Ok(None),
        (None, true) => Err(Fallback),
        (Some(img), true) if img.len() != width => Err(Fallback),
        (Some(img), true) => Ok(Some(img)),
    }
}

/// Keys kept per column position (`rule_at`).
const RECENT: usize = 4;

/// How a value came out: null, a value, or a value with its label (in the label buffer).
enum Rendered {
    Null,
    Value,
    Labelled,
}

impl OceanBaseAvroDecoder {
    /// The rule of column `n` whose values (after image's, then before image's) are `values`:
    /// a key among the last few of the `n`th column needs no hash lookup (records of one table
    /// repeat; a nullable column has two). None: the codec refuses the column (its record goes
    /// to Python).
    fn rule_at(&mut self, py: Python<'_>, n: usize, code: i32, values: &[&ColumnValue]) -> PyResult<Option<usize>> {
        if let Some(seen) = self.recent.get(n).and_then(|seen| seen.iter().find(|s| s.same(code, values))) {
            return Ok(seen.rule);
        }
        let key = &mut self.key;
        key.clear();
        key.extend_from_slice(&code.to_le_bytes());
        for v in values {
            key_of(v, key);
        }
        let rule = match self.by_key.get(key.as_slice()) {
            Some(&rule) => rule,
            None => {
                let rule = self.new_rule(py, code, values)?;
                self.by_key.insert(self.key.clone(), rule);
                rule
            }
        };
        if n == self.recent.len() {
            self.recent.push(Vec::new());
        }
        if let Some(seen) = self.recent.get_mut(n) {
            if seen.len() == RECENT {
                seen.remove(0);
            }
            let values = values.iter().map(|v| (v.type_info as u8, v.value.kind(), Detail::of(&v.value))).collect();
            seen.push(Seen { code, values, rule });
        }
        Ok(rule)
    }

    fn new_rule(&mut self, py: Python<'_>, code: i32, values: &[&ColumnValue]) -> PyResult<Option<usize>> {
        let described = values.iter().map(|v| describe(py, v)).collect::<PyResult<Vec<_>>>()?;
        let out = self.column_fn.bind(py).call1((code, PyList::new(py, described)?))?;
        if out.is_none() {
            return Ok(None);
        }
        type Spec = (Option<String>, i32, bool, bool, bool, bool, i32, Py<PyAny>);
        let (mysql_type, flags, binary, float, enum_set, labels, default_code, parsed): Spec = out.extract()?;
        self.rules.push(ColRule { mysql_type, flags, binary, float, enum_set, labels, default_code, parsed });
        Ok(Some(self.rules.len() - 1))
    }

    /// The codec's `_render` of an ENUM/SET value, once per distinct (rule, member, payload).
    fn call(&mut self, py: Python<'_>, rule: usize, v: &Member, text: &mut Vec<u8>, label: &mut String) -> PyResult<R<Rendered>> {
        let key = &mut self.key;
        key.clear();
        key.extend_from_slice(&rule.to_le_bytes());
        key.push(v.kind());
        match v {
            Member::Int(n) => key.extend_from_slice(&i64::from(*n).to_le_bytes()),
            Member::Long(n) => key.extend_from_slice(&n.to_le_bytes()),
            Member::Str(s) => push_text(key, s),
            Member::EnumSetValue { value, defines } => {
                push_text(key, value);
                for d in defines.iter().flatten() {
                    push_text(key, d);
                }
            }
            _ => return Ok(Err(Fallback)),
        }
        if !self.calls.contains_key(key.as_slice()) {
            let payload: Bound<'_, PyAny> = match v {
                Member::Int(n) => n.into_pyobject(py)?.into_any(),
                Member::Long(n) => n.into_pyobject(py)?.into_any(),
                Member::Str(s) => s.into_pyobject(py)?.into_any(),
                Member::EnumSetValue { value, defines } => (value, defines).into_pyobject(py)?.into_any(),
                _ => unreachable!(),
            };
            let parsed = self.rules[rule].parsed.bind(py);
            let out = self.render_fn.bind(py).call1((parsed, KINDS[v.kind() as usize], payload))?;
            let got: Converted = out.extract()?;
            if self.calls.len() >= 1 << 16 {
                self.calls.clear(); // distinct ENUM/SET values are few; bound the odd stream
            }
            self.calls.insert(self.key.clone(), got);
        }
        Ok(match &self.calls[self.key.as_slice()] {
            None => Err(Fallback), // refused: the reference quarantines the record
            Some((value, l)) => {
                text.extend_from_slice(value);
                match l {
                    Some(l) => {
                        label.push_str(l);
                        Ok(Rendered::Labelled)
                    }
                    None => Ok(Rendered::Value),
                }
            }
        })
    }

    /// The fixed offset of a zone text (None: a zone with rules, or one the codec refuses).
    fn zone(&mut self, py: Python<'_>, text: &str) -> PyResult<Option<i64>> {
        if let Some(&z) = self.zones.get(text) {
            return Ok(z);
        }
        let z: Option<i64> = self.zone_fn.bind(py).call1((text,))?.extract()?;
        if self.zones.len() >= 1 << 12 {
            self.zones.clear();
        }
        self.zones.insert(text.to_owned(), z);
        Ok(z)
    }

    /// `_render` of one value under rule `rule` into `text` (and `label`).
    fn render(&mut self, py: Python<'_>, rule: usize, v: &Member, text: &mut Vec<u8>, label: &mut String) -> PyResult<R<Rendered>> {
        let r = &self.rules[rule];
        let (binary, float, enum_set, labels) = (r.binary, r.float, r.enum_set, r.labels);
        let done = |ok: R<()>| Ok(ok.map(|()| Rendered::Value));
        match v {
            Member::Null => Ok(Ok(Rendered::Null)),
            Member::Boolean(x) => {
                text.push(if *x { b'1' } else { b'0' });
                Ok(Ok(Rendered::Value))
            }
            Member::Int(_) | Member::Long(_) if labels => self.call(py, rule, v, text, label),
            Member::Int(n) => {
                push_int(text, i64::from(*n));
                Ok(Ok(Rendered::Value))
            }
            Member::Long(n) => {
                push_int(text, *n);
                Ok(Ok(Rendered::Value))
            }
            Member::Float(f) => {
                let f = f64::from(*f);
                done(if float { craft::shortest_f32(f, text) } else { craft::shortest_f64(f, text) })
            }
            Member::Double(d) => {
                let single = float && (*d as f32) as f64 == *d;
                if float && (*d as f32).is_infinite() {
                    return Ok(Err(Fallback)); // NumPy warns of the overflow: Python decides
                }
                done(if single { craft::shortest_f32(*d, text) } else { craft::shortest_f64(*d, text) })
            }
            Member::Bytes(b) => {
                text.extend_from_slice(&b.0);
                Ok(Ok(Rendered::Value))
            }
            Member::Str(_) if enum_set => self.call(py, rule, v, text, label),
            Member::Str(s) => done(text_value(s, binary, text)),
            Member::StringObject { charset, value } => {
                let binary = binary
                    || match charset.is_ascii() {
                        true => charset.eq_ignore_ascii_case("binary"),
                        false => return Ok(Err(Fallback)), // Unicode lower(): Python's
                    };
                done(text_value(value, binary, text))
            }
            Member::DecimalObject { scale, value, .. } => done(decimal_text(value, *scale, text)),
            Member::DateObject { year, month, day } => done(date_text(i64::from(*year), i64::from(*month), i64::from(*day), text)),
            Member::TimeObject { negative, hours, minutes, seconds, nanos } => {
                done(time_text(*negative, i64::from(*hours), i64::from(*minutes), i64::from(*seconds), *nanos, 838, text))
            }
            Member::DateTimeObject { year, month, day, hours, minutes, seconds, nanos } => {
                let ok = date_text(i64::from(*year), i64::from(*month), i64::from(*day), text).and_then(|()| {
                    text.push(b' ');
                    time_text(false, i64::from(*hours), i64::from(*minutes), i64::from(*seconds), *nanos, 23, text)
                });
                done(ok)
            }
            Member::TimestampObject { seconds, nanos, timezone } => {
                let offset = match timezone.as_deref() {
                    Some(t) if !t.is_empty() => self.zone(py, t)?,
                    _ => self.default_zone,
                };
                match offset {
                    Some(offset) => done(timestamp_text(*seconds, *nanos, offset, text)),
                    None => Ok(Err(Fallback)),
                }
            }
            Member::BitObject { bit_length, value } => {
                if value.is_empty() || !value.bytes().all(|c| c.is_ascii_digit()) || !(1..=64).contains(bit_length) {
                    return Ok(Err(Fallback));
                }
                let digits = value.trim_start_matches('0');
                if digits.len() > 20 {
                    return Ok(Err(Fallback));
                }
                let n: u128 = if digits.is_empty() { 0 } else { digits.parse().unwrap_or(u128::MAX) };
                if n >> *bit_length != 0 {
                    return Ok(Err(Fallback));
                }
                text.extend_from_slice(n.to_string().as_bytes());
                Ok(Ok(Rendered::Value))
            }
            Member::EnumSetValue { value, defines } => {
                if defines.is_some() && labels {
                    return self.call(py, rule, v, text, label);
                }
                text.extend_from_slice(value.as_bytes());
                label.push_str(value);
                Ok(Ok(Rendered::Labelled))
            }
            Member::GeometryValue { srid, wkb } => {
                text.extend_from_slice(&srid.to_le_bytes());
                text.extend_from_slice(&wkb.0);
                Ok(Ok(Rendered::Value))
            }
        }
    }

    /// `_read`: the record and the Confluent schema id. Any doubt (the crate refusing the
    /// body, bytes after it) sends the record to Python, which also retries auto framing as
    /// plain Avro.
    fn read(&self, data: &[u8]) -> R<(AvroRecord, Option<u32>)> {
        let confluent = match self.framing {
            Framing::Confluent => true,
            Framing::Auto => data.first() == Some(&0) && data.len() >= 5,
            Framing::Plain => false,
        };
        let (mut body, id) = if confluent {
            if data.first() != Some(&0) || data.len() < 5 {
                return Err(Fallback);
            }
            (&data[5..], Some(u32::from_be_bytes(data[1..5].try_into().unwrap())))
        } else {
            (data, None)
        };
        let msg: AvroRecord = self.reader.reader.read_deser(&mut body).map_err(|_| Fallback)?;
        if !body.is_empty() {
            return Err(Fallback);
        }
        Ok((msg, id))
    }

    pub(crate) fn record(&mut self, py: Python<'_>, d: &[u8], rec: i32, b: &mut Builders, pos: &mut Positions) -> PyResult<R<()>> {
        let events = b.rec_idx.len();
        let mut scratch = std::mem::take(&mut self.scratch);
        let out = self.message(py, d, rec, b, pos, &mut scratch);
        self.scratch = scratch;
        if !matches!(out, Ok(Ok(()))) {
            pos.truncate(events);
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn message(&mut self, py: Python<'_>, d: &[u8], rec: i32, b: &mut Builders, pos: &mut Positions, scratch: &mut Scratch) -> PyResult<R<()>> {
        let Scratch { text, label, keys } = scratch;
        keys.clear();
        let (mut msg, schema_id) = match self.read(d) {
            Ok(x) => x,
            Err(f) => return Ok(Err(f)),
        };
        let op = match msg.operation {
            Some(Operation::Insert) => "insert",
            Some(Operation::Update) => "update",
            Some(Operation::Delete) => "delete",
            _ => return Ok(Err(Fallback)), // none, DDL, BEGIN/COMMIT/HEARTBEAT: Python's
        };
        if !msg.before_image_bytes.0.is_empty()
            || !msg.after_image_bytes.0.is_empty()
            || !matches!(msg.total, -1 | 1)
            || !matches!(msg.index, -1 | 0)
        {
            return Ok(Err(Fallback)); // a split record: the reference names it
        }
        let mut extras: Vec<(&str, String)> = Vec::new();
        if let Some(t) = msg.txind {
            extras.push(("oceanbase.txind", ["B", "M", "E", "W"][t as usize].to_owned()));
        }
        if let Some(p) = msg.position.take() {
            extras.push(("oceanbase.position", p));
        }
        if msg.version != 1 {
            extras.push(("oceanbase.version", msg.version.to_string()));
        }
        if let Some(s) = msg.source.take() {
            let source_type = match s.source_type {
                SourceType::ObMysql => "OB_MYSQL",
                SourceType::ObOracle => "OB_ORACLE",
            };
            extras.push(("oceanbase.sourceType", source_type.to_owned()));
            extras.push(("oceanbase.sourceVersion", s.version));
        }
        if let Some(uk) = &msg.uk_indexes {
            extras.push(("oceanbase.ukIndexes", indexes_json(uk)));
        }
        if let Some(tags) = &msg.tags {
            match tags_json(&tags.0) {
                Ok(t) => extras.push(("oceanbase.tags", t)),
                Err(f) => return Ok(Err(f)),
            }
        }
        if msg.total != -1 || msg.index != -1 {
            extras.push(("oceanbase.total", msg.total.to_string()));
            extras.push(("oceanbase.index", msg.index.to_string()));
        }
        if let Some(id) = schema_id {
            extras.push(("oceanbase.schemaId", id.to_string()));
        }
        let execute_ts = match msg.timestamp {
            None => None,
            Some(t) => match t.checked_mul(self.ms_per_unit) {
                Some(ms) => Some(ms),
                None => return Ok(Err(Fallback)),
            },
        };
        // archive_io.event_problem: a row needs its database and table names
        let (Some(database), Some(table)) = (msg.schema_name.as_deref(), msg.table_name.as_deref()) else {
            return Ok(Err(Fallback));
        };
        if database.is_empty() || table.is_empty() {
            return Ok(Err(Fallback));
        }
        let fields = match &msg.fields {
            Some(f) if !f.is_empty() => f,
            _ => return Ok(Err(Fallback)),
        };
        let width = fields.len();
        for &i in msg.pk_indexes.iter().flatten() {
            match usize::try_from(i).ok().filter(|&i| i < width) {
                Some(i) if !fields[i].name.is_empty() => keys.push(i),
                _ => return Ok(Err(Fallback)), // out of range, or event_problem: a key name must be a name
            }
        }
        let (before, after) = match (side(&msg.before_images, op != "insert", width), side(&msg.after_images, op != "delete", width)) {
            (Ok(before), Ok(after)) => (before, after),
            _ => return Ok(Err(Fallback)),
        };
        let mut codes_differ = false;
        for (i, field) in fields.iter().enumerate() {
            let values = match (after, before) {
                (Some(a), Some(b)) => [&a[i], &b[i]],
                (Some(img), None) | (None, Some(img)) => [&img[i], &img[i]],
                (None, None) => unreachable!("an operation has an image"),
            };
            let values = &values[..1 + usize::from(after.is_some() && before.is_some())];
            let Some(rule) = self.rule_at(py, i, field.code, values)? else { return Ok(Err(Fallback)) };
            codes_differ |= field.code != self.rules[rule].default_code;
            let key = keys.iter().any(|&k| fields[k].name == field.name);
            for (img, is_after) in [(after, true), (before, false)] {
                let Some(img) = img else { continue };
                text.clear();
                label.clear();
                let rendered = match self.render(py, rule, &img[i].value, text, label)? {
                    Ok(r) => r,
                    Err(f) => return Ok(Err(f)),
                };
                let r = &self.rules[rule];
                let pool = if is_after { &mut b.after_cols } else { &mut b.before_cols };
                pool.name.push_str(Some(&field.name));
                pool.mysql_type.push_str(r.mysql_type.as_deref());
                pool.flags.push(if key { r.flags | KEY_FLAGS } else { r.flags });
                pool.value.push((!matches!(rendered, Rendered::Null)).then_some(&text[..]));
                pool.label.push_str(matches!(rendered, Rendered::Labelled).then_some(label.as_str()));
            }
        }
        if codes_differ {
            let codes: Vec<String> = fields.iter().map(|f| f.code.to_string()).collect();
            extras.push(("oceanbase.dataTypeNumbers", codes.join(",")));
        }
        b.start_row(rec, 0, op, None, execute_ts, database, table);
        for &k in keys.iter() {
            b.keys.push_str(Some(&fields[k].name));
        }
        b.key_columns.push(true, b.keys.len());
        b.before.push(before.is_some(), b.before_cols.len());
        b.after.push(after.is_some(), b.after_cols.len());
        b.watermark_ts.push(None);
        b.tx_id.push_str(msg.xid.as_deref());
        b.push_extras(&extras);
        pos.items.push(msg.id);
        pos.lists.push(true, pos.items.len());
        Ok(Ok(()))
    }
}

#[pymethods]
impl OceanBaseAvroDecoder {
    /// `schema`: the codec's AvroRecord schema (JSON text); `framing`: auto, plain or
    /// confluent; `ms_per_unit`: of `timestamp`; `column(code, [(type_info, member, detail)])
    /// -> None | (mysql_type, flags, binary, float, enum_set, labels, default_code, parsed)`,
    /// `render(parsed, member, payload) -> None | (value, label)`, `zone(text or None) -> None
    /// | offset seconds` (spark_apps/native_decode.py `_oceanbase_rules`).
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        schema: &str,
        framing: &str,
        ms_per_unit: i64,
        column: Py<PyAny>,
        render: Py<PyAny>,
        zone: Py<PyAny>,
    ) -> PyResult<Self> {
        let invalid = |e: String| pyo3::exceptions::PyValueError::new_err(e);
        let parsed = Schema::parse_str(schema).map_err(|e| invalid(format!("the AvroRecord schema: {e}")))?;
        check_order(&parsed).map_err(invalid)?;
        let reader = SchemaReader::new(Box::new(parsed)).ok_or_else(|| invalid("no datum reader for the schema".into()))?;
        let framing = match framing {
            "auto" => Framing::Auto,
            "plain" => Framing::Plain,
            "confluent" => Framing::Confluent,
            other => return Err(invalid(format!("avro-framing {other:?}"))),
        };
        let default_zone: Option<i64> = zone.bind(py).call1((py.None(),))?.extract()?;
        Ok(OceanBaseAvroDecoder {
            reader,
            column_fn: column,
            render_fn: render,
            zone_fn: zone,
            framing,
            ms_per_unit,
            default_zone,
            rules: Vec::new(),
            by_key: HashMap::new(),
            recent: Vec::new(),
            calls: HashMap::default(),
            zones: HashMap::new(),
            key: Vec::new(),
            scratch: Scratch::default(),
        })
    }

    /// As `CanalProtobufDecoder.decode`: the events and `position` (each row's record id).
    fn decode<'py>(&mut self, py: Python<'py>, values: BinaryArg<'py>) -> PyResult<Bound<'py, PyDict>> {
        let values = BinaryArray::new(values)?;
        let mut pos = Positions::new();
        let d = decode_batch(py, &values, |py, raw, rec, b| self.record(py, raw, rec, b, &mut pos))?;
        pos.export(py, &d)?;
        Ok(d)
    }
}

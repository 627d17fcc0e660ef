//! cdc-replay's compiled decoders, one module per protocol (canal_json.rs with its serde
//! reader canal_typed.rs, canal_protobuf.rs, craft.rs, open_protocol.rs, avro.rs,
//! oceanbase_avro.rs), and what they share: the Arrow builders of the canonical events, the
//! batch loop and the allocator (alloc.rs).
//!
//! A decoder takes the record values of a batch as the buffers of an Arrow binary array and
//! returns the buffers of the canonical events (EVENT_SCHEMA, codecs/events.py) for every record
//! it can decode exactly as the Python codec would: no Python object per value. Every record it
//! is not sure about (DDL, claim-check, anything malformed or unusual) is marked for the Python
//! codec, which stays the reference and writes the quarantine rows. What a type implies comes
//! from the Python reference too (a rule callback, once per distinct type). archive.rs reads an
//! archive object's lines in the same pass, so Python sees neither lines nor values.

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

mod alloc;
mod archive;
mod avro;
mod avro_encode;
mod canal_json;
mod canal_json_encode;
mod encode_common;
mod canal_protobuf;
mod canal_protobuf_encode;
mod canal_rules;
mod canal_typed;
mod craft;
mod craft_encode;
mod identity;
mod oceanbase_avro;
mod oceanbase_avro_encode;
mod open_protocol;
mod open_protocol_encode;


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

/// The `position` column (canal-protobuf's binlog file number, offset and row index,
/// oceanbase-avro's record id), which the shared builders do not carry: kept by the decoder
/// beside them and rolled back with them.
pub(crate) struct Positions {
    pub(crate) lists: ListCol,
    pub(crate) items: Vec<i64>,
}

impl Positions {
    pub(crate) fn new() -> Self {
        Positions { lists: ListCol::new(), items: Vec::new() }
    }
    pub(crate) fn truncate(&mut self, events: usize) {
        self.lists.truncate(events);
        self.items.truncate(self.lists.offsets[events] as usize);
    }
    /// `position` (list offsets, validity) and `position_items` (int64) into the output dict.
    pub(crate) fn export(&self, py: Python<'_>, d: &Bound<'_, PyDict>) -> PyResult<()> {
        d.set_item("position", self.lists.export(py))?;
        d.set_item("position_items", PyBytes::new(py, as_bytes(&self.items)))
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

/// A fast hasher for the decoders' caches of distinct values (a multiply-rotate over 8-byte
/// words; SipHash showed in the profile). Its keys come from records: a flood of colliding
/// keys would cost time, not correctness, and the caches are bounded.
#[derive(Default, Clone, Copy)]
pub(crate) struct Fx(u64);

impl Fx {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap()));
        }
        let rest = chunks.remainder();
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        self.add(u64::from_le_bytes(last) ^ (rest.len() as u64) << 56);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// An integer's decimal text (what `str(int)` writes), without the formatting machinery.
pub(crate) fn push_int(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    push_uint(out, n.unsigned_abs());
}

pub(crate) fn push_uint(out: &mut Vec<u8>, mut u: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}


/// Why the native path gives a record to the Python codec (never shown: Python decides).
struct Fallback;

type R<T> = Result<T, Fallback>;

const KEY_FLAGS: i32 = (1 << 3) | (1 << 1); // PRIMARY_KEY | HANDLE_KEY
const MAX_TS: u64 = 1 << 63;


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
    /// A watermark event's kind, its commit ts as `watermark_ts`, and the row fields left null
    /// (the caller pushes record index, event index, event time, tx id and extras).
    fn push_watermark(&mut self, ts: i64) {
        self.kind.push_str(Some("watermark"));
        self.op.push(None);
        self.commit_ts.push(None);
        self.database.push(None);
        self.table.push(None);
        self.key_columns.push(false, self.keys.len());
        self.before.push(false, self.before_cols.len());
        self.after.push(false, self.after_cols.len());
        self.watermark_ts.push(Some(ts));
    }
    /// A row event's first fields: record and event index, kind, op, times, names.
    #[allow(clippy::too_many_arguments)]
    fn start_row(&mut self, rec: i32, index: i32, op: &str, commit_ts: Option<i64>, execute_ts: Option<i64>, database: &str, table: &str) {
        self.rec_idx.push(rec);
        self.event_index.push(index);
        self.kind.push_str(Some("row"));
        self.op.push_str(Some(op));
        self.commit_ts.push(commit_ts);
        self.execute_ts.push(execute_ts);
        self.database.push_str(Some(database));
        self.table.push_str(Some(table));
    }
    /// One record written by `record`, or nothing of it when `record` gives it up (rolled
    /// back); true when it was taken. Every decoder's record loop goes through here.
    fn attempt(&mut self, record: impl FnOnce(&mut Builders) -> PyResult<R<()>>) -> PyResult<bool> {
        let mark = self.mark();
        match record(self)? {
            Ok(()) => Ok(true),
            Err(Fallback) => {
                self.rollback(&mark);
                Ok(false)
            }
        }
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


pub(crate) fn buffer_bytes(buf: &PyBuffer<u8>) -> &[u8] {
    // SAFETY: the buffer is held (and so kept alive and unchanged) for the whole call.
    unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const u8, buf.len_bytes()) }
}


/// An Arrow binary array given as its buffers (validity bitmap or None, offsets (int32, or
/// int64 when `large`), data) and its slots `offset..offset + length`, held for the call.
pub(crate) struct BinaryArray {
    validity: Option<PyBuffer<u8>>,
    offsets: PyBuffer<u8>,
    data: PyBuffer<u8>,
    offset: usize,
    length: usize,
    large: bool,
}

/// How Python passes an Arrow binary array to a decoder: (validity bitmap or None, offsets,
/// data, offset, length, large) — spark_apps/native_decode.py `_binary_args`. One argument of
/// every decoder's `decode`, so the buffers' signature is written once.
#[derive(FromPyObject)]
pub(crate) struct BinaryArg<'py>(Option<Bound<'py, PyAny>>, Bound<'py, PyAny>, Bound<'py, PyAny>, usize, usize, bool);

impl BinaryArray {
    pub(crate) fn new(arg: BinaryArg<'_>) -> PyResult<Self> {
        let BinaryArg(validity, offsets, data, offset, length, large) = arg;
        let validity = validity.map(|v| PyBuffer::<u8>::get(&v)).transpose()?;
        let offsets = PyBuffer::<u8>::get(&offsets)?;
        let data = PyBuffer::<u8>::get(&data)?;
        let width = if large { 8 } else { 4 };
        if buffer_bytes(&offsets).len() < (offset + length + 1) * width {
            return Err(pyo3::exceptions::PyValueError::new_err("offsets buffer too short"));
        }
        if validity.as_ref().is_some_and(|v| buffer_bytes(v).len() * 8 < offset + length) {
            return Err(pyo3::exceptions::PyValueError::new_err("validity buffer too short"));
        }
        Ok(BinaryArray { validity, offsets, data, offset, length, large })
    }

    fn off(&self, slot: usize) -> usize {
        let o = buffer_bytes(&self.offsets);
        if self.large {
            i64::from_ne_bytes(o[slot * 8..slot * 8 + 8].try_into().unwrap()) as usize
        } else {
            i32::from_ne_bytes(o[slot * 4..slot * 4 + 4].try_into().unwrap()) as usize
        }
    }

    /// The records' keys, one per value (open-protocol and avro carry event data in the key).
    pub(crate) fn keys(&self, keys: BinaryArg<'_>) -> PyResult<BinaryArray> {
        let keys = BinaryArray::new(keys)?;
        if keys.length != self.length {
            return Err(pyo3::exceptions::PyValueError::new_err("as many keys as values are needed"));
        }
        Ok(keys)
    }

    /// The value of record `i` (None: null).
    pub(crate) fn get(&self, i: usize) -> PyResult<Option<&[u8]>> {
        let slot = self.offset + i;
        if let Some(v) = &self.validity {
            if buffer_bytes(v)[slot >> 3] >> (slot & 7) & 1 == 0 {
                return Ok(None);
            }
        }
        let data = buffer_bytes(&self.data);
        let (start, end) = (self.off(slot), self.off(slot + 1));
        if end > data.len() || start > end {
            return Err(pyo3::exceptions::PyValueError::new_err("offsets beyond the data buffer"));
        }
        Ok(Some(&data[start..end]))
    }
}

/// The record loop of a batch of values, every decoder's (archive.rs's `decode_lines` is the
/// same loop over an archive object's lines): each value of `values` given to `record` with
/// its record index; a record it gives up on is rolled back. Returns the dict of Arrow buffers
/// spark_apps/native_decode.py wraps, and `status`: one byte per record, 1 when decoded here,
/// 0 when the Python codec must decode it (null values always go to Python: it names them).
pub(crate) fn decode_batch<'py, F>(py: Python<'py>, values: &BinaryArray, mut record: F) -> PyResult<Bound<'py, PyDict>>
where
    F: FnMut(Python<'py>, &[u8], i32, &mut Builders) -> PyResult<R<()>>,
{
    let mut b = Builders::new();
    let mut status = vec![0u8; values.length];
    for (i, st) in status.iter_mut().enumerate() {
        let Some(raw) = values.get(i)? else { continue };
        *st = b.attempt(|b| record(py, raw, i as i32, b))? as u8;
    }
    let d = b.export(py)?;
    d.set_item("status", PyBytes::new(py, &status))?;
    Ok(d)
}

#[pymodule]
fn cdc_replay_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<canal_json::CanalJsonDecoder>()?;
    m.add_class::<canal_json_encode::CanalJsonEncoder>()?;
    m.add_class::<craft::CraftDecoder>()?;
    m.add_class::<craft_encode::CraftEncoder>()?;
    m.add_class::<open_protocol::OpenProtocolDecoder>()?;
    m.add_class::<open_protocol_encode::OpenProtocolEncoder>()?;
    m.add_class::<avro::AvroDecoder>()?;
    m.add_class::<avro_encode::AvroEncoder>()?;
    m.add_class::<canal_protobuf::CanalProtobufDecoder>()?;
    m.add_class::<canal_protobuf_encode::CanalProtobufEncoder>()?;
    m.add_class::<oceanbase_avro::OceanBaseAvroDecoder>()?;
    m.add_class::<oceanbase_avro_encode::OceanBaseAvroEncoder>()?;
    m.add_function(wrap_pyfunction!(archive::decode_lines, m)?)?;
    m.add_function(wrap_pyfunction!(archive::value_lines, m)?)?;
    m.add_function(wrap_pyfunction!(identity::identities, m)?)?;
    m.add("__doc__", "cdc-replay's compiled decoders (see spark_apps/native_decode.py)")?;
    Ok(())
}

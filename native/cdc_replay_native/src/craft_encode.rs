//! The craft encoder: row events of an Arrow batch in, each row event's *entry* out, byte for
//! byte what codecs/craft.py `_row_entry` makes of the same event: `(1, commit ts, partition id,
//! schema, table, size estimate, groups)`, a group being `(head, names, rest)` (its type and
//! column count; the column names as a string chunk; type codes, flags, value lengths and
//! values as written). Only the term ids of the names depend on the message, so the batching,
//! the headers, the term dictionary and the size tables stay in Python (`CraftCodec.frame`).
//! The Python encoder is the reference: every event this one is not sure about comes back as
//! None and the Python codec encodes it (or refuses it): DDL and resolved events, an event with
//! neither commit ts nor event time or one outside 0..2^63-1, a `craft.partition_id` extra that
//! is not plain decimal, a row with no non-empty image, negative flags, an integer that is not
//! plain decimal (`+5`, ` 5`, `1_0`) or is out of its range, a FLOAT/DOUBLE text Python's
//! `float()` might read otherwise (`nan`, `.5`, ` 1`) or a FLOAT too large for float32, and a
//! type whose rule Python does not give.

use std::collections::{HashMap, HashSet};

use prost::encoding::encode_varint;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::encode_common::{plain_int, Events, AFTER, BEFORE};
use crate::encode_common::plain_float;

const ROW: i64 = 1; // the entry's event type (craft's header type of a row)
const GROUP_NEW: u8 = 1;
const GROUP_OLD: u8 = 2;
const LOGICAL_BITS: u32 = 18; // codecs/tso.py: a TSO is ms << 18 | logical

// value kinds (codecs/craft.py `V_*`)
const V_RAW: u8 = 0;
const V_UVARINT: u8 = 1;
const V_ZIGZAG: u8 = 2;
const V_DOUBLE: u8 = 3;
const V_FLOAT: u8 = 4;
const V_NULL: u8 = 5;

/// What a column's (mysql_type, flags) imply, from the Python rule once per pair.
#[derive(Clone, Copy)]
struct Rule {
    code: u64,
    flags: u64, // before the handle-key bit of the event's key columns
    kind: u8,
}

/// One column group of an entry.
struct Group {
    head: Vec<u8>,
    names: Vec<u8>,
    rest: Vec<u8>,
}

/// One row event's entry.
struct Entry {
    ts: i64,
    partition: i64,
    schema: Option<Vec<u8>>,
    table: Option<Vec<u8>>,
    estimate: usize,
    groups: Vec<Group>,
}

#[pyclass]
pub(crate) struct CraftEncoder {
    rule_fn: Py<PyAny>,
    handle_key: u64,
    // key: flags (4 bytes), 0 for a null type / 1 and the type's text
    by_type: HashMap<Vec<u8>, Option<Rule>>,
    key: Vec<u8>,
}

fn varint(out: &mut Vec<u8>, v: i64) {
    encode_varint(((v << 1) ^ (v >> 63)) as u64, out);
}

impl CraftEncoder {
    fn rule(&mut self, py: Python<'_>, type_text: Option<&[u8]>, flags: i32) -> PyResult<Option<Rule>> {
        self.key.clear();
        self.key.extend_from_slice(&flags.to_le_bytes());
        if let Some(text) = type_text {
            self.key.push(1);
            self.key.extend_from_slice(text);
        } else {
            self.key.push(0);
        }
        if let Some(rule) = self.by_type.get(self.key.as_slice()) {
            return Ok(*rule);
        }
        let rule = match type_text.map(std::str::from_utf8).transpose() {
            Err(_) => None,
            Ok(text) => match self.rule_fn.bind(py).call1((text, flags)) {
                Ok(out) => {
                    let (code, flags, kind): (u64, u64, u8) = out.extract()?;
                    Some(Rule { code, flags, kind })
                }
                Err(_) => None, // the Python encoder meets the same error and says it
            },
        };
        self.by_type.insert(self.key.clone(), rule);
        Ok(rule)
    }

    /// The entry of row event `e`; None: Python encodes it.
    fn event(&mut self, py: Python<'_>, events: &Events, e: usize) -> PyResult<Option<Entry>> {
        if events.kind.get(e)? != Some(b"row") {
            return Ok(None); // DDL and watermarks: the reference
        }
        let ts = match events.commit_ts(e)? {
            Some(ts) => ts as i128,
            None => match events.execute_ts_ms(e)? {
                Some(ms) => (ms as i128) << LOGICAL_BITS,
                None => return Ok(None),
            },
        };
        if !(0..=i64::MAX as i128).contains(&ts) {
            return Ok(None);
        }
        let [pid] = events.extras(e, [b"craft.partition_id"])?;
        let partition = match pid {
            None => -1,
            Some(text) => match plain_int(text, 38) {
                Some(n) => n as i64, // Go's int64 wrap-around, as `_wrap_i64`
                None => return Ok(None),
            },
        };
        let schema = events.database.get(e)?.filter(|t| !t.is_empty()).map(<[u8]>::to_vec);
        let table = events.table.get(e)?.filter(|t| !t.is_empty()).map(<[u8]>::to_vec);
        let mut estimate = 32 + schema.as_ref().map_or(0, Vec::len) + table.as_ref().map_or(0, Vec::len);
        let keys: HashSet<&[u8]> = events.keys(e)?.unwrap_or_default().into_iter().collect();
        let mut groups = Vec::with_capacity(2);
        for (group_type, side) in [(GROUP_NEW, AFTER), (GROUP_OLD, BEFORE)] {
            let Some(cols) = events.columns(side, e)?.filter(|c| !c.is_empty()) else { continue };
            let n = cols.len() as u64;
            let mut head = vec![group_type];
            encode_varint(n, &mut head);
            let mut names = Vec::with_capacity(16 + 8 * cols.len());
            encode_varint(n, &mut names);
            let mut types = Vec::with_capacity(cols.len());
            let mut flags = Vec::with_capacity(2 * cols.len());
            let mut lengths = Vec::with_capacity(2 * cols.len());
            let mut values = Vec::with_capacity(16 * cols.len());
            for c in &cols {
                encode_varint(c.name.len() as u64, &mut names);
                if c.flags < 0 {
                    return Ok(None);
                }
                let Some(rule) = self.rule(py, c.mysql_type, c.flags)? else { return Ok(None) };
                let mut written = rule.flags;
                if keys.contains(c.name) {
                    written |= self.handle_key;
                }
                encode_varint(rule.code, &mut types);
                encode_varint(written, &mut flags);
                let start = values.len();
                match c.value.filter(|_| rule.kind != V_NULL) {
                    None => lengths.push(1), // zigzag -1: NULL
                    Some(raw) => {
                        match rule.kind {
                            V_RAW => values.extend_from_slice(raw),
                            V_UVARINT => match plain_int(raw, 38) {
                                Some(v) if (0..=u64::MAX as i128).contains(&v) => encode_varint(v as u64, &mut values),
                                _ => return Ok(None),
                            },
                            V_ZIGZAG => match plain_int(raw, 38) {
                                Some(v) if (i64::MIN as i128..=i64::MAX as i128).contains(&v) => varint(&mut values, v as i64),
                                _ => return Ok(None),
                            },
                            V_DOUBLE => {
                                let Some(v) = plain_float(raw) else { return Ok(None) };
                                values.extend_from_slice(&v.to_le_bytes());
                            }
                            V_FLOAT => {
                                let Some(v) = plain_float(raw) else { return Ok(None) };
                                let narrow = v as f32;
                                if narrow.is_infinite() && v.is_finite() {
                                    return Ok(None); // struct.pack("<f") refuses it: Python says so
                                }
                                values.extend_from_slice(&(narrow as f64).to_le_bytes());
                            }
                            _ => return Ok(None),
                        }
                        varint(&mut lengths, (values.len() - start) as i64);
                    }
                }
                estimate += c.name.len() + (values.len() - start) + 16;
            }
            for c in &cols {
                names.extend_from_slice(c.name);
            }
            types.extend_from_slice(&flags);
            types.extend_from_slice(&lengths);
            types.extend_from_slice(&values);
            groups.push(Group { head, names, rest: types });
        }
        if groups.is_empty() {
            return Ok(None);
        }
        Ok(Some(Entry { ts: ts as i64, partition, schema, table, estimate, groups }))
    }
}

#[pymethods]
impl CraftEncoder {
    /// `rule(type_text, flags) -> (type code, flags, value kind)` (codecs/craft.py
    /// `compiled_rule`); `handle_key`: the handle-key flag bit.
    #[new]
    fn new(rule: Py<PyAny>, handle_key: u64) -> Self {
        CraftEncoder { rule_fn: rule, handle_key, by_type: HashMap::new(), key: Vec::new() }
    }

    /// Encode `n` events given as Arrow buffers (spark_apps/native_encode.py `_arrays`): per
    /// event its entry (a tuple, as `_row_entry`), or None for an event Python must encode.
    fn encode<'py>(&mut self, py: Python<'py>, n: usize, cols: Bound<'py, PyDict>) -> PyResult<Bound<'py, PyList>> {
        let events = Events::new(&cols)?;
        let out = PyList::empty(py);
        for e in 0..n {
            match self.event(py, &events, e)? {
                Some(entry) => {
                    let name = |t: &Option<Vec<u8>>| -> Bound<'py, PyAny> {
                        match t {
                            Some(t) => PyBytes::new(py, t).into_any(),
                            None => py.None().into_bound(py),
                        }
                    };
                    let groups = entry
                        .groups
                        .iter()
                        .map(|g| PyTuple::new(py, [PyBytes::new(py, &g.head), PyBytes::new(py, &g.names), PyBytes::new(py, &g.rest)]))
                        .collect::<PyResult<Vec<_>>>()?;
                    let items: [Bound<'py, PyAny>; 7] = [
                        ROW.into_pyobject(py)?.into_any(),
                        entry.ts.into_pyobject(py)?.into_any(),
                        entry.partition.into_pyobject(py)?.into_any(),
                        name(&entry.schema),
                        name(&entry.table),
                        entry.estimate.into_pyobject(py)?.into_any(),
                        PyTuple::new(py, groups)?.into_any(),
                    ];
                    out.append(PyTuple::new(py, items)?)?
                }
                None => out.append(py.None())?,
            }
        }
        Ok(out)
    }
}

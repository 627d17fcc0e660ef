//! The duplicate check's identity of a lean row: 16 bytes of BLAKE2b over an injective encoding
//! of the row's identity fields, computed in the decode task so the check's shuffle only moves
//! them (spark_apps/identity.py holds the encoding's reference implementation, in Python, and
//! says which fields). Each field of a row, in the order given: a null is the byte 0; a
//! string or binary value is 1, its length (u64 little-endian), its bytes; an integer is 1 and
//! its 8 bytes (little-endian); a list is 1, its element count (u64 little-endian), and each
//! element encoded so.

use blake2::digest::consts::U16;
use blake2::{Blake2b, Digest};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::buffer_bytes;

type Hasher = Blake2b<U16>;

/// One column as its Arrow buffers: validity bitmaps and offsets are read at `off + slot`.
enum Col {
    Bin { valid: Option<PyBuffer<u8>>, offs: PyBuffer<u8>, data: PyBuffer<u8>, off: usize },
    Int { valid: Option<PyBuffer<u8>>, data: PyBuffer<u8>, off: usize },
    List { valid: Option<PyBuffer<u8>>, offs: PyBuffer<u8>, off: usize, child: Box<Col> },
}

fn buffer(item: Bound<'_, PyAny>) -> PyResult<Option<PyBuffer<u8>>> {
    if item.is_none() {
        Ok(None)
    } else {
        Ok(Some(PyBuffer::<u8>::get(&item)?))
    }
}

fn required(item: Bound<'_, PyAny>) -> PyResult<PyBuffer<u8>> {
    PyBuffer::<u8>::get(&item)
}

impl Col {
    /// ("b", validity, offsets, data, offset) | ("i", validity, data, offset) |
    /// ("l", validity, offsets, offset, child)
    fn from_spec(spec: &Bound<'_, PyTuple>) -> PyResult<Col> {
        let kind: String = spec.get_item(0)?.extract()?;
        match kind.as_str() {
            "b" => Ok(Col::Bin {
                valid: buffer(spec.get_item(1)?)?,
                offs: required(spec.get_item(2)?)?,
                data: required(spec.get_item(3)?)?,
                off: spec.get_item(4)?.extract()?,
            }),
            "i" => Ok(Col::Int {
                valid: buffer(spec.get_item(1)?)?,
                data: required(spec.get_item(2)?)?,
                off: spec.get_item(3)?.extract()?,
            }),
            "l" => Ok(Col::List {
                valid: buffer(spec.get_item(1)?)?,
                offs: required(spec.get_item(2)?)?,
                off: spec.get_item(3)?.extract()?,
                child: Box::new(Col::from_spec(spec.get_item(4)?.cast::<PyTuple>()?)?),
            }),
            other => Err(pyo3::exceptions::PyValueError::new_err(format!("unknown column kind {other:?}"))),
        }
    }

    fn is_valid(valid: &Option<PyBuffer<u8>>, slot: usize) -> bool {
        valid.as_ref().is_none_or(|v| buffer_bytes(v)[slot >> 3] >> (slot & 7) & 1 == 1)
    }

    fn offset_at(offs: &PyBuffer<u8>, slot: usize) -> usize {
        let o = buffer_bytes(offs);
        i32::from_le_bytes(o[slot * 4..slot * 4 + 4].try_into().unwrap()) as usize
    }

    /// The null byte, or 1 and the length of the value at `slot` (its offsets' span): the span.
    fn prefix(valid: &Option<PyBuffer<u8>>, offs: &PyBuffer<u8>, slot: usize, h: &mut Hasher) -> Option<(usize, usize)> {
        if !Col::is_valid(valid, slot) {
            h.update([0u8]);
            return None;
        }
        let (start, end) = (Col::offset_at(offs, slot), Col::offset_at(offs, slot + 1));
        h.update([1u8]);
        h.update(((end - start) as u64).to_le_bytes());
        Some((start, end))
    }

    /// Row `i` of this column into the hasher.
    fn write(&self, i: usize, h: &mut Hasher) {
        match self {
            Col::Bin { valid, offs, data, off } => {
                if let Some((start, end)) = Col::prefix(valid, offs, off + i, h) {
                    h.update(&buffer_bytes(data)[start..end]);
                }
            }
            Col::Int { valid, data, off } => {
                let slot = off + i;
                if !Col::is_valid(valid, slot) {
                    h.update([0u8]);
                    return;
                }
                h.update([1u8]);
                h.update(&buffer_bytes(data)[slot * 8..slot * 8 + 8]);
            }
            Col::List { valid, offs, off, child } => {
                if let Some((start, end)) = Col::prefix(valid, offs, off + i, h) {
                    for j in start..end {
                        child.write(j, h);
                    }
                }
            }
        }
    }
}

/// The identities of rows 0..`length` of `columns` (specs as `Col::from_spec` reads them):
/// 16 bytes per row, one after the other.
#[pyfunction]
pub fn identities<'py>(py: Python<'py>, columns: Vec<Bound<'py, PyTuple>>, length: usize) -> PyResult<Bound<'py, PyBytes>> {
    let cols = columns.iter().map(Col::from_spec).collect::<PyResult<Vec<_>>>()?;
    let mut out = Vec::with_capacity(length * 16);
    for i in 0..length {
        let mut h = Hasher::new();
        for c in &cols {
            c.write(i, &mut h);
        }
        out.extend_from_slice(&h.finalize());
    }
    Ok(PyBytes::new(py, &out))
}

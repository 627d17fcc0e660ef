//! The canal-json decoder's Python class; its message reader is canal_typed.rs.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::canal_rules::Rule;
use crate::{canal_typed, decode_batch, BinaryArg, BinaryArray};

#[pyclass]
pub(crate) struct CanalJsonDecoder {
    pub(crate) rule_fn: Py<PyAny>,
    pub(crate) canal_flavor: bool,
    pub(crate) rules: Vec<Rule>,
    pub(crate) by_type: HashMap<String, usize>,
    pub(crate) untyped: Option<usize>,
    pub(crate) types: Vec<canal_typed::Types>, // the resolved mysqlType of recent tables (canal_typed.rs)
}

impl CanalJsonDecoder {
    /// The rule of a type text (None: the column has no mysqlType), computed by Python once.
    pub(crate) fn rule(&mut self, py: Python<'_>, type_text: Option<&str>) -> PyResult<usize> {
        let cached = match type_text {
            Some(t) => self.by_type.get(t).copied(),
            None => self.untyped,
        };
        if let Some(i) = cached {
            return Ok(i);
        }
        let out = self.rule_fn.bind(py).call1((type_text,))?;
        let (type_lower, flags, binary, java_float, labels, is_enum): (Option<String>, i32, bool, u8, Option<Vec<String>>, bool) =
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
}

#[pymethods]
impl CanalJsonDecoder {
    /// `rule(type_text) -> (type_lower, flags, binary, java_float (0 no, 1 DOUBLE, 2 FLOAT), labels, is_enum)`;
    /// `canal_flavor`: flat-message-flavor=canal (Java float text made canonical, `java_float_text`).
    #[new]
    fn new(rule: Py<PyAny>, canal_flavor: bool) -> Self {
        CanalJsonDecoder {
            rule_fn: rule,
            canal_flavor,
            rules: Vec::new(),
            by_type: HashMap::new(),
            untyped: None,
            types: Vec::new(),
        }
    }

    /// Decode `length` values of an Arrow binary array given as its buffers (validity bitmap
    /// or None, offsets (int32, or int64 when `large`), data) starting at slot `offset`.
    /// Returns a dict of Arrow buffers (see spark_apps/native_decode.py) and `status`: one byte
    /// per record, 1 when decoded here, 0 when the Python codec must decode it.
    fn decode<'py>(&mut self, py: Python<'py>, values: BinaryArg<'py>) -> PyResult<Bound<'py, PyDict>> {
        let values = BinaryArray::new(values)?;
        decode_batch(py, &values, |py, raw, rec, b| self.record(py, raw, rec, b))
    }
}

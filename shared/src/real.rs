//! `f64` values that survive every encoding the control protocol and `--json` use.
//!
//! JSON (RFC 8259 §6) has no infinity and no NaN: `serde_json` writes them as `null`, which
//! then fails to read back as an `f64` (a capacity of `inf` in a live `explain`
//! decision broke the command). The rule applied by every `#[serde(with = ...)]` helper
//! here:
//!
//! - **human-readable formats** (JSON, TOML, `serde_json::Value`): a finite value is a
//!   number; a non-finite one is the string `"inf"`, `"-inf"` or `"nan"`. Readers accept a
//!   number, one of those strings, or (for compatibility with older peers) `null` read as
//!   NaN.
//! - **binary formats** (postcard control frames): the IEEE 754 value as is, so no
//!   information is lost.
//!
//! Use [`Real`] directly, or the field helpers [`f64`](mod@self::f64), [`opt`], [`map`] and
//! [`pairs`] with `#[serde(with = "crate::real::map")]`.

use serde::de::{Deserializer, Error, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// An `f64` that serialises as described in the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Default)]
pub struct Real(pub f64);

impl Serialize for Real {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if !s.is_human_readable() || v.is_finite() {
            s.serialize_f64(v)
        } else if v.is_nan() {
            s.serialize_str("nan")
        } else if v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }
}

struct RealVisitor;

impl<'de> Visitor<'de> for RealVisitor {
    type Value = Real;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number, or one of the strings \"inf\", \"-inf\", \"nan\"")
    }
    fn visit_f64<E: Error>(self, v: f64) -> Result<Real, E> {
        Ok(Real(v))
    }
    fn visit_f32<E: Error>(self, v: f32) -> Result<Real, E> {
        Ok(Real(v.into()))
    }
    fn visit_i64<E: Error>(self, v: i64) -> Result<Real, E> {
        Ok(Real(v as f64))
    }
    fn visit_u64<E: Error>(self, v: u64) -> Result<Real, E> {
        Ok(Real(v as f64))
    }
    fn visit_str<E: Error>(self, v: &str) -> Result<Real, E> {
        match v {
            "inf" | "+inf" | "infinity" => Ok(Real(f64::INFINITY)),
            "-inf" | "-infinity" => Ok(Real(f64::NEG_INFINITY)),
            "nan" => Ok(Real(f64::NAN)),
            _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
        }
    }
    fn visit_unit<E: Error>(self) -> Result<Real, E> {
        Ok(Real(f64::NAN))
    }
    fn visit_none<E: Error>(self) -> Result<Real, E> {
        Ok(Real(f64::NAN))
    }
}

impl<'de> Deserialize<'de> for Real {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Real, D::Error> {
        if d.is_human_readable() {
            d.deserialize_any(RealVisitor)
        } else {
            d.deserialize_f64(RealVisitor)
        }
    }
}

/// `#[serde(with = "crate::real::f64")]` for an `f64` field.
pub mod f64 {
    use super::*;
    /// Serialises like [`Real`].
    pub fn serialize<S: Serializer>(v: &::core::primitive::f64, s: S) -> Result<S::Ok, S::Error> {
        Real(*v).serialize(s)
    }
    /// Deserialises like [`Real`].
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<::core::primitive::f64, D::Error> {
        Real::deserialize(d).map(|r| r.0)
    }
}

/// `#[serde(with = "crate::real::opt")]` for an `Option<f64>` field (`None` stays `null`).
pub mod opt {
    use super::*;
    /// Serialises like `Option<Real>`.
    pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        v.map(Real).serialize(s)
    }
    /// Deserialises like `Option<Real>`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        Option::<Real>::deserialize(d).map(|o| o.map(|r| r.0))
    }
}

/// `#[serde(with = "crate::real::map")]` for a `BTreeMap<String, f64>` field.
pub mod map {
    use super::*;
    /// Serialises like `BTreeMap<String, Real>`.
    pub fn serialize<S: Serializer>(m: &BTreeMap<String, f64>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(m.iter().map(|(k, v)| (k, Real(*v))))
    }
    /// Deserialises like `BTreeMap<String, Real>`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, f64>, D::Error> {
        BTreeMap::<String, Real>::deserialize(d).map(|m| m.into_iter().map(|(k, v)| (k, v.0)).collect())
    }
}

/// `#[serde(with = "crate::real::pairs")]` for a `Vec<(usize, f64)>` field.
pub mod pairs {
    use super::*;
    /// Serialises like `Vec<(usize, Real)>`.
    pub fn serialize<S: Serializer>(v: &[(usize, f64)], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|&(i, x)| (i, Real(x))))
    }
    /// Deserialises like `Vec<(usize, Real)>`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(usize, f64)>, D::Error> {
        Vec::<(usize, Real)>::deserialize(d).map(|v| v.into_iter().map(|(i, r)| (i, r.0)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_spells_non_finite_values_as_strings() {
        for (v, text) in [(f64::INFINITY, "\"inf\""), (f64::NEG_INFINITY, "\"-inf\""), (f64::NAN, "\"nan\""), (1.5, "1.5")] {
            assert_eq!(serde_json::to_string(&Real(v)).unwrap(), text);
            let back: Real = serde_json::from_str(text).unwrap();
            assert_eq!(format!("{:?}", back.0), format!("{v:?}"));
        }
        assert!(serde_json::from_str::<Real>("null").unwrap().0.is_nan());
        assert!(serde_json::from_str::<Real>("3").unwrap().0 == 3.0);
        let e = serde_json::from_str::<Real>("\"fast\"").unwrap_err().to_string();
        assert!(e.contains("\"inf\""), "{e}");
    }

    #[test]
    fn postcard_keeps_the_bits() {
        for v in [f64::INFINITY, f64::NEG_INFINITY, f64::MAX, -0.0, f64::MIN_POSITIVE] {
            let b = postcard::to_stdvec(&Real(v)).unwrap();
            assert_eq!(b.len(), 8);
            assert_eq!(postcard::from_bytes::<Real>(&b).unwrap().0.to_bits(), v.to_bits());
        }
    }
}

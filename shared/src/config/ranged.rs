//! Deserialisers of integer fields: read any TOML integer (never a float, not even `1e3`) as `i64`
//! and refuse one that does not fit the field's type with the range of its
//! [`super::limits`] row, instead of serde's bare "expected u32". The range itself is
//! checked by [`super::Config::validate`].
//!
//! Float fields whose range starts at 0.0 ([`float`], [`optional_float`], [`float_map`])
//! read negative zero (`-0.0`, a TOML float distinct from `0.0`) as `0.0`: it passes
//! every `>= 0.0` check, so without this it would be kept and shown (`spillover_ratio =
//! -0.0`) by `config show`, the edit's diff and the written-back file.

use serde::de::{Deserializer, Error, Visitor};
use std::fmt;

struct Wide(&'static str);
impl Visitor<'_> for Wide {
    type Value = i64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&super::limits::get(self.0).allowed())
    }
    fn visit_i64<E: Error>(self, v: i64) -> Result<i64, E> {
        Ok(v)
    }
    fn visit_u64<E: Error>(self, v: u64) -> Result<i64, E> {
        i64::try_from(v).map_err(|_| E::custom(super::limits::get(self.0).allowed()))
    }
    fn visit_f64<E: Error>(self, v: f64) -> Result<i64, E> {
        // `1e3` or `80.0` is a float in TOML: refused, even when integral, so a file
        // and a live edit accept the same integers.
        Err(E::custom(format!("{} (a plain integer, not the float {v:?})", super::limits::get(self.0).allowed())))
    }
    fn visit_str<E: Error>(self, s: &str) -> Result<i64, E> {
        // A live edit's value that TOML could not read as an integer arrives as a string:
        // all digits (no leading zero), it is a number beyond TOML's integers (signed 64
        // bits), not text (fresh-user QA).
        let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
        let why = if digits.len() > 1 && !digits.starts_with('0') && digits.bytes().all(|b| b.is_ascii_digit()) && s.parse::<i64>().is_err() {
            "a whole number beyond TOML's signed 64-bit integers"
        } else {
            "a number, not a string"
        };
        Err(E::custom(format!("{} ({why})", super::limits::get(self.0).allowed())))
    }
    fn visit_bool<E: Error>(self, _: bool) -> Result<i64, E> {
        Err(E::custom(format!("{} (a number, not a boolean)", super::limits::get(self.0).allowed())))
    }
}

fn int<'de, D: Deserializer<'de>, T: TryFrom<i64>>(d: D, path: &'static str) -> Result<T, D::Error> {
    let v = d.deserialize_any(Wide(path))?;
    T::try_from(v).map_err(|_| D::Error::custom(super::limits::get(path).allowed()))
}

macro_rules! fields {
    ($($name:ident: $t:ty = $path:literal;)*) => {$(
        pub fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
            int(d, $path)
        }
    )*};
}
macro_rules! optional {
    ($($name:ident: $t:ty = $path:literal;)*) => {$(
        pub fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<$t>, D::Error> {
            int(d, $path).map(Some)
        }
    )*};
}
fields! {
    workers: u16 = "dataplane.workers";
    mbufs_per_port: u32 = "dataplane.mbufs_per_port";
    descriptors: u16 = "dataplane.descriptors";
    idle_sleep_us: u32 = "dataplane.idle_sleep_us";
    icmp_errors_per_sec: u32 = "dataplane.icmp_errors_per_sec";
    capacity_per_worker: u32 = "conntrack.capacity_per_worker";
    tcp_idle_timeout_sec: u32 = "conntrack.tcp_idle_timeout_sec";
    tcp_syn_timeout_sec: u32 = "conntrack.tcp_syn_timeout_sec";
    tcp_closing_timeout_sec: u32 = "conntrack.tcp_closing_timeout_sec";
    udp_idle_timeout_sec: u32 = "conntrack.udp_idle_timeout_sec";
    neighbors_refresh_sec: u32 = "neighbors.refresh_sec";
    neighbors_expiry_sec: u32 = "neighbors.expiry_sec";
    neighbors_retry_ms: u32 = "neighbors.retry_ms";
    port: u16 = "services[].port";
    connection_drain_timeout_sec: u32 = "services[].connection_drain_timeout_sec";
    encap_mtu: u16 = "services[].encap_mtu";
    port_mtu: u16 = "ports[].mtu";
    maglev_table_size: u32 = "services[].maglev_table_size";
    healthy_threshold: u32 = "services[].health_check.healthy_threshold";
    unhealthy_threshold: u32 = "services[].health_check.unhealthy_threshold";
    weight: u32 = "services[].backends[].weight";
    endpoint_weight: u32 = "services[].backends[].endpoints[].weight";
    priority: u32 = "services[].backends[].priority";
}
optional! {
    idle_timeout_sec: u32 = "services[].idle_timeout_sec";
    failover_health_threshold: u32 = "services[].failover_health_threshold";
    hc_port: u16 = "services[].health_check.port";
    expected_status: u16 = "services[].health_check.expected_status";
}

/// `v` with negative zero made `0.0` (IEEE 754 `-0.0 == 0.0`, but it prints as `-0.0`).
pub(crate) fn unsigned_zero(v: f64) -> f64 {
    if v == 0.0 {
        0.0
    } else {
        v
    }
}

/// A float field (any TOML number); `-0.0` reads as `0.0`.
pub fn float<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    <f64 as serde::Deserialize>::deserialize(d).map(unsigned_zero)
}

/// An optional float field (with `#[serde(default)]`); `-0.0` reads as `0.0`.
pub fn optional_float<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    float(d).map(Some)
}

/// `rtt_ms.<zone>.<zone>`: milliseconds per zone pair; `-0.0` reads as `0.0`.
pub fn float_map<'de, D: Deserializer<'de>>(d: D) -> Result<std::collections::BTreeMap<String, std::collections::BTreeMap<String, f64>>, D::Error> {
    let mut m: std::collections::BTreeMap<String, std::collections::BTreeMap<String, f64>> = serde::Deserialize::deserialize(d)?;
    m.values_mut().flat_map(|inner| inner.values_mut()).for_each(|v| *v = unsigned_zero(*v));
    Ok(m)
}

/// `worker_cores`: core ids (non-negative integers).
pub fn worker_cores<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<usize>, D::Error> {
    let v: Vec<i64> = serde::Deserialize::deserialize(d)?;
    v.iter()
        .map(|&c| usize::try_from(c).map_err(|_| D::Error::custom(format!("core {c}: core ids are integers >= 0 that {}", super::limits::get("dataplane.worker_cores[]").allowed().trim_start_matches("must ")))))
        .collect()
}

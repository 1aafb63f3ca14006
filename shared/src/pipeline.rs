//! Routing pipeline — TEMPORARY minimal version (availability + last resort only) used
//! until the full pipeline lands; same API.
#![allow(missing_docs)]
use crate::config::{Config, Service};
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;

pub struct Topology {
    zones: Vec<String>,
    table: crate::net::PrefixTable<ClientClass>,
}
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ClientClass {
    Zone(String),
    Incompatible,
}
impl Topology {
    pub fn from_config(cfg: &Config) -> Topology {
        let mut zones: Vec<String> = cfg.zones.iter().map(|z| z.zone.clone()).collect();
        for cz in &cfg.client_zones {
            if let Some(z) = &cz.zone {
                if !zones.contains(z) {
                    zones.push(z.clone());
                }
            }
        }
        let table = crate::net::PrefixTable::new(cfg.client_zones.iter().map(|c| {
            (c.prefix, if c.compatible { ClientClass::Zone(c.zone.clone().unwrap_or_default()) } else { ClientClass::Incompatible })
        }));
        Topology { zones, table }
    }
    pub fn classify(&self, ip: Ipv4Addr) -> ClientClass {
        self.table.lookup(ip).cloned().unwrap_or(ClientClass::Incompatible)
    }
    pub fn client_classes(&self) -> Vec<ClientClass> {
        let mut v: Vec<ClientClass> = self.zones.iter().cloned().map(ClientClass::Zone).collect();
        v.push(ClientClass::Incompatible);
        v
    }
}
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendState {
    pub endpoints: u32,
    pub healthy_endpoints: u32,
    pub latency_ms: Option<f64>,
    pub load_cps: f64,
}
#[derive(Clone, Debug, Default)]
pub struct ServiceState {}
pub struct Decision {
    pub drop: bool,
    pub eligible: Vec<usize>,
    pub weights: Vec<(usize, f64)>,
}
pub fn evaluate(svc: &Service, states: &[BackendState], _t: &Topology, _c: &ClientClass, _o: Option<f64>, _s: &mut ServiceState, _now: f64) -> Decision {
    let enabled: Vec<usize> = (0..svc.backends.len()).filter(|i| svc.backends[*i].enabled).collect();
    let healthy: Vec<usize> = enabled.iter().copied().filter(|i| states[*i].healthy_endpoints > 0).collect();
    let eligible = if healthy.is_empty() { enabled } else { healthy };
    let total: f64 = eligible.iter().map(|i| f64::from(svc.backends[*i].weight)).sum();
    let weights = eligible.iter().map(|i| (*i, f64::from(svc.backends[*i].weight) / total)).collect();
    Decision { drop: eligible.is_empty(), eligible, weights }
}

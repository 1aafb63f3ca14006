//! Endpoint slots: a stable index per (service, backend, endpoint) for the life of the
//! endpoint, with an incarnation number bumped on reuse, so a connection entry of a removed
//! endpoint never matches the endpoint that reuses its slot. A single-endpoint backend has
//! one slot, keyed by its endpoint named like the backend
//! ([`spillway_shared::config::Backend::members`]).

use crate::fastpath::stats::MAX_BACKEND_SLOTS;
use spillway_shared::config::Config;

/// (service, backend, endpoint): the key of backend slots, of the health view and of health
/// targets. A single-endpoint backend's endpoint is named like the backend
/// ([`spillway_shared::config::Backend::members`]).
pub type EndpointKey = (String, String, String);

/// Stable slots for endpoints, keyed by (service name, backend name, endpoint name).
#[derive(Clone, Debug, Default)]
pub struct SlotMap {
    index: std::collections::HashMap<EndpointKey, u16>,
    owners: Vec<Option<EndpointKey>>,
    incarnations: Vec<u16>,
    /// Address of the endpoint holding each slot: an endpoint whose address changes is a
    /// new endpoint (new incarnation: its connections move, docs/semantics.md).
    addresses: Vec<Option<std::net::IpAddr>>,
    /// Slots given to an endpoint since the last [`SlotMap::take_fresh`].
    fresh: Vec<u16>,
}

fn keys(cfg: &Config) -> Vec<(EndpointKey, std::net::IpAddr)> {
    let mut out = Vec::new();
    for s in &cfg.services {
        for b in &s.backends {
            for m in b.members() {
                out.push(((s.name.clone(), b.name.clone(), m.name), m.address));
            }
        }
    }
    out
}

impl SlotMap {
    /// Assigns slots to every endpoint of `cfg`, keeping the slots of endpoints that are
    /// still configured and freeing the others. Errors when more than [`MAX_BACKEND_SLOTS`].
    pub fn sync(&mut self, cfg: &Config) -> Result<(), String> {
        let all = keys(cfg);
        let wanted: std::collections::HashSet<&EndpointKey> = all.iter().map(|(k, _)| k).collect();
        // free removed
        let removed: Vec<EndpointKey> = self.index.keys().filter(|k| !wanted.contains(*k)).cloned().collect();
        for k in removed {
            if let Some(slot) = self.index.remove(&k) {
                self.owners[usize::from(slot)] = None;
            }
        }
        for (k, address) in all {
            if let Some(&slot) = self.index.get(&k) {
                let i = usize::from(slot);
                if self.addresses.get(i).copied().flatten() != Some(address) {
                    // same name, another address: a new endpoint in the same slot
                    self.incarnations[i] = self.incarnations[i].wrapping_add(1);
                    self.addresses[i] = Some(address);
                    self.fresh.push(slot);
                }
                continue;
            }
            let slot = match self.owners.iter().position(Option::is_none) {
                Some(i) => i,
                None => {
                    if self.owners.len() >= MAX_BACKEND_SLOTS {
                        return Err(format!("more than {MAX_BACKEND_SLOTS} endpoints in all services"));
                    }
                    self.owners.push(None);
                    self.incarnations.push(0);
                    self.addresses.push(None);
                    self.owners.len() - 1
                }
            };
            self.owners[slot] = Some(k.clone());
            self.addresses[slot] = Some(address);
            self.incarnations[slot] = self.incarnations[slot].wrapping_add(1);
            self.index.insert(k, slot as u16);
            self.fresh.push(slot as u16);
        }
        Ok(())
    }

    /// Slot of an endpoint (for a single-endpoint backend: `endpoint` = the backend's name).
    pub fn slot(&self, service: &str, backend: &str, endpoint: &str) -> Option<u16> {
        self.index.get(&(service.to_string(), backend.to_string(), endpoint.to_string())).copied()
    }

    /// Slots of every endpoint of a backend, in no particular order.
    pub fn backend_slots(&self, service: &str, backend: &str) -> Vec<u16> {
        self.index.iter().filter(|((s, b, _), _)| s == service && b == backend).map(|(_, v)| *v).collect()
    }

    /// (service, backend, endpoint) holding a slot, if any.
    pub fn owner(&self, slot: u16) -> Option<&EndpointKey> {
        self.owners.get(usize::from(slot)).and_then(Option::as_ref)
    }

    /// Number of slots (used or free).
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    /// Whether no slot exists.
    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }

    /// Slots assigned to a new endpoint since the last call (by [`SlotMap::sync`]). The
    /// daemon records the per-slot counters' totals at that moment as the new endpoint's
    /// zero, so an endpoint never inherits the totals of a removed one that used its slot.
    pub fn take_fresh(&mut self) -> Vec<u16> {
        std::mem::take(&mut self.fresh)
    }

    /// Incarnation of a slot.
    pub fn incarnation(&self, slot: u16) -> u16 {
        self.incarnations.get(usize::from(slot)).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(b1_addr: &str) -> Config {
        Config::from_toml(&format!(
            "[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n[[services.backends]]\nname = \"b1\"\naddress = \"{b1_addr}\"\nmac = \"02:00:00:00:0b:01\"\n[[services.backends]]\nname = \"b2\"\naddress = \"10.0.1.2\"\nmac = \"02:00:00:00:0b:02\"\n"
        ))
        .unwrap()
    }

    /// An endpoint whose address changes keeps its slot under a new incarnation (a new
    /// endpoint: entries of the old one no longer match, counters start from zero); the
    /// others keep theirs (review finding S1).
    #[test]
    fn an_address_change_is_a_new_incarnation() {
        let mut m = SlotMap::default();
        m.sync(&cfg("10.0.1.1")).unwrap();
        m.take_fresh();
        let (s1, s2) = (m.slot("web", "b1", "b1").unwrap(), m.slot("web", "b2", "b2").unwrap());
        let (i1, i2) = (m.incarnation(s1), m.incarnation(s2));
        m.sync(&cfg("10.0.1.1")).unwrap();
        assert_eq!((m.incarnation(s1), m.incarnation(s2)), (i1, i2));
        assert!(m.take_fresh().is_empty());
        m.sync(&cfg("10.0.1.9")).unwrap();
        assert_eq!(m.slot("web", "b1", "b1"), Some(s1));
        assert_ne!(m.incarnation(s1), i1);
        assert_eq!(m.incarnation(s2), i2);
        assert_eq!(m.take_fresh(), vec![s1]);
    }
}

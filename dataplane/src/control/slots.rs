//! Endpoint slots: a stable index per (service, backend, endpoint) for the life of the
//! endpoint, with an incarnation number bumped on reuse, so a connection entry of a removed
//! endpoint never matches the endpoint that reuses its slot. A single-endpoint backend has
//! one slot, keyed by its endpoint named like the backend
//! ([`spillway_shared::config::Backend::members`]).

use crate::fastpath::stats::MAX_BACKEND_SLOTS;
use spillway_shared::config::{Config, Service};

/// (service, backend, endpoint): the key of backend slots, of the health view and of health
/// targets. A single-endpoint backend's endpoint is named like the backend
/// ([`spillway_shared::config::Backend::members`]).
pub type EndpointKey = (String, String, String);

/// An [`EndpointKey`] by its parts, borrowed: a map keyed by [`EndpointKey`] is looked up
/// with `map.get(&(service, backend, endpoint) as &dyn EndpointKeyParts)` ([`key`])
/// without copying three strings per lookup (a scrape or a compilation at 20,000
/// endpoints looks up every endpoint). Hashes and compares as the owned key does (a tuple
/// hashes its fields in order, a `String` as its `str`), as `Borrow` requires.
pub trait EndpointKeyParts {
    /// (service, backend, endpoint).
    fn parts(&self) -> (&str, &str, &str);
}

impl EndpointKeyParts for EndpointKey {
    fn parts(&self) -> (&str, &str, &str) {
        (&self.0, &self.1, &self.2)
    }
}

impl EndpointKeyParts for (&str, &str, &str) {
    fn parts(&self) -> (&str, &str, &str) {
        *self
    }
}

impl<'a> std::borrow::Borrow<dyn EndpointKeyParts + 'a> for EndpointKey {
    fn borrow(&self) -> &(dyn EndpointKeyParts + 'a) {
        self
    }
}

impl std::hash::Hash for dyn EndpointKeyParts + '_ {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
    }
}

impl PartialEq for dyn EndpointKeyParts + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn EndpointKeyParts + '_ {}

/// The borrowed lookup key of (service, backend, endpoint) ([`EndpointKeyParts`]).
pub fn key<'a>(parts: &'a (&'a str, &'a str, &'a str)) -> &'a (dyn EndpointKeyParts + 'a) {
    parts
}

/// Stable slots for endpoints, keyed by (service name, backend name, endpoint name).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlotMap {
    index: std::collections::HashMap<EndpointKey, u16>,
    owners: Vec<Option<EndpointKey>>,
    incarnations: Vec<u16>,
    /// Address of the endpoint holding each slot: an endpoint whose address changes is a
    /// new endpoint (new incarnation: its connections move, docs/semantics.md).
    addresses: Vec<Option<std::net::IpAddr>>,
    /// Slots given to an endpoint since the last [`SlotMap::take_fresh`].
    fresh: Vec<u16>,
    /// Service numbers by service identity ([`ServiceIdentity`]): see
    /// [`SlotMap::service_number`].
    services: std::collections::HashMap<ServiceIdentity, u16>,
    /// The last service number handed out (the next search starts after it).
    last_service: u16,
}

/// What identifies a service for its connection-table number: (VIP, port, protocol
/// number). A service keeps its number while these stay (a rename or any other edit keeps
/// it); a service whose VIP, port or protocol changes is a new service.
pub type ServiceIdentity = (std::net::IpAddr, u16, u8);

fn keys(cfg: &Config) -> Vec<(EndpointKey, std::net::IpAddr)> {
    let mut out = Vec::new();
    for s in &cfg.services {
        service_keys(s, &mut out);
    }
    out
}

/// The keys and addresses of one service's endpoints, in config order, appended to `out`.
fn service_keys(s: &Service, out: &mut Vec<(EndpointKey, std::net::IpAddr)>) {
    for b in &s.backends {
        for m in b.members() {
            out.push(((s.name.clone(), b.name.clone(), m.name), m.address));
        }
    }
}

/// What a live edit from `old` to `new` changes for the slots: the names of the services
/// of `old` that are removed or differ (their keys may go), and the services of `new`
/// that are added or differ (their keys may come), in config order. Services equal in both
/// (by name) keep every key and address.
pub struct SlotDelta<'a> {
    gone: Vec<&'a Service>,
    came: Vec<&'a Service>,
}

impl<'a> SlotDelta<'a> {
    /// Compares `old` and `new` service by service (by name): O(services) comparisons,
    /// no allocation per endpoint.
    pub fn new(old: &'a Config, new: &'a Config) -> SlotDelta<'a> {
        let by_name = |c: &'a Config| c.services.iter().map(|s| (s.name.as_str(), s)).collect::<std::collections::HashMap<&str, &Service>>();
        let (o, n) = (by_name(old), by_name(new));
        let gone = old.services.iter().filter(|s| n.get(s.name.as_str()).is_none_or(|x| *x != *s)).collect();
        let came = new.services.iter().filter(|s| o.get(s.name.as_str()).is_none_or(|x| *x != *s)).collect();
        SlotDelta { gone, came }
    }

    /// The delta of `old` to `new` when the names of the services that differ are known
    /// (`changed`, from [`SlotDelta::names`] of the same two configs): no comparison.
    pub fn of_names(old: &'a Config, new: &'a Config, changed: &std::collections::HashSet<String>) -> SlotDelta<'a> {
        let gone = old.services.iter().filter(|s| changed.contains(&s.name)).collect();
        let came = new.services.iter().filter(|s| changed.contains(&s.name)).collect();
        SlotDelta { gone, came }
    }

    /// The names of the services that changed (removed, added or different; a service
    /// that differs is named twice).
    pub fn names(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.gone.iter().chain(&self.came).map(|s| s.name.as_str())
    }

    /// Whether no service changed.
    pub fn is_empty(&self) -> bool {
        self.gone.is_empty() && self.came.is_empty()
    }
}

impl SlotMap {
    /// Assigns slots to every endpoint of `cfg`, keeping the slots of endpoints that are
    /// still configured and freeing the others. Errors when more than [`MAX_BACKEND_SLOTS`].
    pub fn sync(&mut self, cfg: &Config) -> Result<(), String> {
        self.sync_services(cfg)?;
        let all = keys(cfg);
        let wanted: std::collections::HashSet<&EndpointKey> = all.iter().map(|(k, _)| k).collect();
        // free removed
        let removed: Vec<EndpointKey> = self.index.keys().filter(|k| !wanted.contains(*k)).cloned().collect();
        for k in removed {
            if let Some(slot) = self.index.remove(&k) {
                self.owners[usize::from(slot)] = None;
            }
        }
        self.assign(all)
    }

    /// Gives each key of `all` (in order) its slot: kept, with a new incarnation when its
    /// address changed, or the first free one.
    fn assign(&mut self, all: Vec<(EndpointKey, std::net::IpAddr)>) -> Result<(), String> {
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

    /// [`SlotMap::sync`] to `new` for a map synced to `old`, touching only the services
    /// that `delta` (from `old` to `new`) names: the same slots, incarnations and fresh
    /// slots as `sync(new)`, in O(endpoints of the changed services) (a live edit of one
    /// backend among 20,000 endpoints). Checked before anything changes: on an error
    /// (more than [`MAX_BACKEND_SLOTS`] endpoints, too many services) the map is as it was.
    pub fn sync_delta(&mut self, new: &Config, delta: &SlotDelta<'_>) -> Result<(), String> {
        self.check_delta(new, delta)?;
        let (removed, added) = self.plan_delta(delta);
        self.sync_services(new)?;
        for k in removed {
            if let Some(slot) = self.index.remove(&k) {
                self.owners[usize::from(slot)] = None;
            }
        }
        self.assign(added)
    }

    /// [`SlotMap::sync_delta`]'s check alone, without changing the map: whether the slots
    /// can take the edit.
    pub fn check_delta(&self, new: &Config, delta: &SlotDelta<'_>) -> Result<(), String> {
        let (removed, added) = self.plan_delta(delta);
        let free = self.owners.iter().filter(|o| o.is_none()).count() + removed.len();
        let needed = added.iter().filter(|(k, _)| !self.index.contains_key(k)).count();
        if needed > free + MAX_BACKEND_SLOTS.saturating_sub(self.owners.len()) {
            return Err(format!("more than {MAX_BACKEND_SLOTS} endpoints in all services"));
        }
        if new.services.len() >= usize::from(u16::MAX) {
            return Err(format!("{} services: at most 65,534", new.services.len()));
        }
        Ok(())
    }

    /// The keys `delta` removes (held now, not wanted after) and the keys of the services
    /// it brings, in config order.
    #[allow(clippy::type_complexity)]
    fn plan_delta(&self, delta: &SlotDelta<'_>) -> (Vec<EndpointKey>, Vec<(EndpointKey, std::net::IpAddr)>) {
        let mut added = Vec::new();
        for s in &delta.came {
            service_keys(s, &mut added);
        }
        let wanted: std::collections::HashSet<&EndpointKey> = added.iter().map(|(k, _)| k).collect();
        let mut old = Vec::new();
        for s in &delta.gone {
            service_keys(s, &mut old);
        }
        let removed = old.into_iter().map(|(k, _)| k).filter(|k| !wanted.contains(k) && self.index.contains_key(k)).collect();
        (removed, added)
    }

    /// Slot of an endpoint (for a single-endpoint backend: `endpoint` = the backend's name).
    pub fn slot(&self, service: &str, backend: &str, endpoint: &str) -> Option<u16> {
        self.index.get(key(&(service, backend, endpoint))).copied()
    }

    /// Every (endpoint, slot) held, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&EndpointKey, u16)> + '_ {
        self.index.iter().map(|(k, v)| (k, *v))
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

    /// Gives every service of `cfg` a number ([`SlotMap::service_number`]): a service that
    /// stays keeps its number; the numbers of removed services are freed; a new service
    /// takes the first free number after the last one handed out (wrapping), so a freed
    /// number is reused only after every other number has been handed out since.
    fn sync_services(&mut self, cfg: &Config) -> Result<(), String> {
        // service indices are u16 with u16::MAX meaning none (`snapshot::ServiceNumbers`)
        if cfg.services.len() >= usize::from(u16::MAX) {
            return Err(format!("{} services: at most 65,534", cfg.services.len()));
        }
        let wanted: std::collections::HashSet<ServiceIdentity> = cfg.services.iter().map(identity).collect();
        self.services.retain(|k, _| wanted.contains(k));
        let mut used: std::collections::HashSet<u16> = self.services.values().copied().collect();
        for s in &cfg.services {
            let id = identity(s);
            if self.services.contains_key(&id) {
                continue;
            }
            let mut n = self.last_service;
            let free = (0..=u16::MAX).find_map(|_| {
                n = n.wrapping_add(1);
                (!used.contains(&n)).then_some(n)
            });
            let Some(n) = free else { return Err("more than 65,536 services".to_string()) };
            used.insert(n);
            self.last_service = n;
            self.services.insert(id, n);
        }
        Ok(())
    }

    /// The connection-table number of the service with this identity ([`ServiceIdentity`]),
    /// if it is configured (assigned by [`SlotMap::sync`]). It stays the same across edits
    /// and recompilations while the service exists, unlike the service's index in a
    /// snapshot, which shifts when a service before it is added or removed; connection
    /// entries are keyed by it (`fastpath::conntrack`). A number freed by a removed service
    /// may eventually be reused; an entry of the removed service then still routes no flow of
    /// the new one, because an entry's endpoint slot and incarnation must name a backend of
    /// the packet's service (`fastpath::worker::keeps_backend`).
    pub fn service_number(&self, id: &ServiceIdentity) -> Option<u16> {
        self.services.get(id).copied()
    }
}

/// The [`ServiceIdentity`] of a configured service.
pub fn identity(s: &spillway_shared::config::Service) -> ServiceIdentity {
    (s.vip, s.port, s.protocol.number())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map keyed by owned (service, backend, endpoint) finds every entry by its borrowed
    /// parts, and no entry whose parts differ though their concatenation is the same
    /// (the `Borrow` contract: the borrowed key hashes and compares as the owned one).
    #[test]
    fn borrowed_endpoint_key_finds_what_the_owned_key_does() {
        let owned: Vec<EndpointKey> = [("ab", "c", "d"), ("a", "bc", "d"), ("a", "b", "cd"), ("", "", ""), ("web", "g1", "e0")]
            .iter()
            .map(|(s, b, e)| (s.to_string(), b.to_string(), e.to_string()))
            .collect();
        let map: std::collections::HashMap<EndpointKey, usize> = owned.iter().cloned().enumerate().map(|(i, k)| (k, i)).collect();
        for (i, (s, b, e)) in owned.iter().enumerate() {
            assert_eq!(map.get(key(&(s.as_str(), b.as_str(), e.as_str()))), Some(&i), "{s}/{b}/{e}");
        }
        assert_eq!(map.get(key(&("abc", "", "d"))), None);
        assert_eq!(map.get(key(&("web", "g1", "e1"))), None);
    }

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

    fn services(list: &[(&str, &str, u16)]) -> Config {
        let mut t = String::new();
        for (name, vip, port) in list {
            t += &format!("[[services]]\nname = \"{name}\"\nvip = \"{vip}\"\nport = {port}\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.1.1\"\nmac = \"02:00:00:00:0b:01\"\n");
        }
        Config::from_toml(&t).unwrap()
    }

    /// A service keeps its number across unrelated edits: a service added before it (which
    /// shifts its index), a backend added, a rename; a removed service's number is not
    /// handed out again while other numbers are free.
    #[test]
    fn service_numbers_are_stable_across_edits_and_not_reused_soon() {
        let mut m = SlotMap::default();
        m.sync(&services(&[("web", "10.0.0.100", 80), ("dns", "10.0.0.100", 53)])).unwrap();
        let num = |m: &SlotMap, vip: &str, port: u16| m.service_number(&(vip.parse().unwrap(), port, 6));
        let (web, dns) = (num(&m, "10.0.0.100", 80).unwrap(), num(&m, "10.0.0.100", 53).unwrap());
        assert_ne!(web, dns);
        // a service added before both, another backend for web, dns renamed
        let mut cfg = services(&[("new", "10.0.0.101", 80), ("web", "10.0.0.100", 80), ("domain", "10.0.0.100", 53)]);
        let mut b2 = cfg.services[1].backends[0].clone();
        b2.name = "b2".into();
        cfg.services[1].backends.push(b2);
        m.sync(&cfg).unwrap();
        assert_eq!((num(&m, "10.0.0.100", 80), num(&m, "10.0.0.100", 53)), (Some(web), Some(dns)));
        let new = num(&m, "10.0.0.101", 80).unwrap();
        assert!(![web, dns].contains(&new));
        // removing web frees its number; services added after it get fresh ones
        m.sync(&services(&[("new", "10.0.0.101", 80), ("domain", "10.0.0.100", 53)])).unwrap();
        assert_eq!(num(&m, "10.0.0.100", 80), None);
        for i in 0..100u16 {
            m.sync(&services(&[("new", "10.0.0.101", 80), ("domain", "10.0.0.100", 53), ("x", "10.0.0.102", 1000 + i)])).unwrap();
            let x = num(&m, "10.0.0.102", 1000 + i).unwrap();
            assert!(![web, dns, new].contains(&x), "number {x} reused after {i} services");
        }
        // web back: a new service, with a new number
        m.sync(&cfg).unwrap();
        assert!(num(&m, "10.0.0.100", 80).is_some_and(|n| n != web));
        // a snapshot names each service by its number, and maps numbers back
        let snap = crate::control::compile(&cfg, &m, crate::control::CompileInput { health: &crate::control::HealthView::new(), states: &mut Default::default(), now_sec: 0.0, generation: 1, port_addrs: vec![0] });
        for (i, s) in snap.services.iter().enumerate() {
            assert_eq!(snap.service_by_number(s.id).map(|(j, _)| usize::from(j)), Some(i));
        }
    }
}

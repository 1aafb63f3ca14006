//! What an edit would do, before it is made: the answer to
//! [`crate::proto::Request::DryRun`] (`spillwayctl ... --dry-run`).
//!
//! The daemon plans the edit exactly as it would apply it (same validation, same refusals),
//! then compiles the routing snapshot of the running config and of the edited one from the
//! same health and load, and compares them. Nothing is published and no file is written.
//!
//! - *Moved share* of a (service, client zone class): the fraction of the Maglev table's
//!   slots whose backend differs between the two tables (a slot that drops on one side
//!   counts as moved). New connections hash uniformly onto slots
//!   ([`crate::maglev::MaglevTable::lookup`]), so this is the share of new connections of
//!   that class that would go to another backend than today.
//! - *Shares*: each backend's long-run share of new connections, from the pipeline's final
//!   weights ([`crate::pipeline::Decision::weights`]), before → after.
//! - *Re-picked connections*: tracked connections on an endpoint that would no longer keep
//!   them under the persistence rules of the edited snapshot (removed, a new incarnation,
//!   unhealthy without persistence, evicted or draining after a pool switch); the worker's
//!   rule is `keeps_backend` (docs/semantics.md "Existing connections").
//! - *Stage changes*: pipeline stages whose rule or output set differs (`zonal_affinity:
//!   |I|/|C| = 2/3 ... result I` → `... 1/3 < 0.6: result A`).

use serde::{Deserialize, Deserializer, Serialize};

thread_local! {
    static DEPTH: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// Decodes the request inside [`crate::proto::Request::DryRun`], refusing one that is
/// itself a dry run: each nesting is one byte of postcard, so a 1 MiB frame of nested dry
/// runs would otherwise recurse a million times and overflow the decoding thread's stack.
/// Errors: "a dry run cannot contain another dry run".
pub fn one_level<'de, D: Deserializer<'de>>(d: D) -> Result<Box<crate::proto::Request>, D::Error> {
    if DEPTH.with(|c| c.get()) > 0 {
        return Err(serde::de::Error::custom("a dry run cannot contain another dry run"));
    }
    DEPTH.with(|c| c.set(1));
    let r = crate::proto::Request::deserialize(d);
    DEPTH.with(|c| c.set(0));
    r.map(Box::new)
}

/// The whole answer of a dry run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DryRunReport {
    /// The config generation the edit was planned against (unchanged by a dry run).
    pub config_generation: u64,
    /// The config diff, one line per change (the lines a real edit answers with);
    /// `no change` when the edit changes nothing.
    pub changes: Vec<String>,
    /// One entry per service of either config whose routing or connections change, config
    /// order (the edited config's, then removed services).
    pub services: Vec<DryRunService>,
    /// Other effects in words (a VIP withdrawn from announcement, ...).
    pub notes: Vec<String>,
}

/// Effect on one service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DryRunService {
    /// Service name.
    pub service: String,
    /// `added`, `removed` or `changed`.
    pub what: String,
    /// Per client zone class whose table or decision changes.
    pub classes: Vec<DryRunClass>,
    /// Endpoints whose tracked connections would be re-picked, with their counts.
    pub repicked: Vec<Repick>,
}

/// Effect on one client zone class of a service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DryRunClass {
    /// Class name as in `snapshot show` (a zone name, or `(not zonal)`).
    pub class: String,
    /// Fraction (0.0–1.0) of the new-connection hash space whose backend changes.
    pub moved_share: f64,
    /// Backends with a share before or after, config order of the edited service.
    pub shares: Vec<ShareChange>,
    /// Pipeline stages whose outcome changes, in pipeline order.
    pub stages: Vec<StageChange>,
}

/// One backend's share of new connections (0.0–1.0) before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareChange {
    /// Backend name.
    pub backend: String,
    /// Share before the edit.
    pub before: f64,
    /// Share after the edit.
    pub after: f64,
}

/// A pipeline stage whose rule or output differs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageChange {
    /// Stage name (`availability`, `tiers`, `zonal_affinity`, ...).
    pub stage: String,
    /// Rule and output set before (`(stage absent)` when it did not run).
    pub before: String,
    /// Rule and output set after.
    pub after: String,
}

/// Tracked connections of one endpoint that the edit would move.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repick {
    /// Backend name.
    pub backend: String,
    /// Endpoint name (the backend's name for a one-address backend).
    pub endpoint: String,
    /// Why (`backend removed`, `unhealthy and NEVER_PERSIST`, `drains for 300 s after the
    /// failover`, ...).
    pub reason: String,
    /// Tracked connections on the endpoint now, summed over workers; `None` when the
    /// workers did not answer in time.
    pub connections: Option<u64>,
}

#[cfg(test)]
mod tests {
    use crate::proto::{decode_request, encode_request, Request, PROTOCOL_VERSION};

    #[test]
    fn a_dry_run_decodes_one_level_only_and_deep_nesting_is_refused_without_recursion() {
        let one = Request::DryRun(Box::new(Request::BackendRemove { service: "web".into(), name: "b1".into(), if_generation: None }));
        assert_eq!(decode_request(&encode_request(&one)).unwrap(), one);
        let two = Request::DryRun(Box::new(one.clone()));
        assert!(decode_request(&encode_request(&two)).is_err());
        // a frame of a million nested DryRun tags: an error, not a stack overflow
        let tag = encode_request(&one)[postcard::to_stdvec(&PROTOCOL_VERSION).unwrap().len()];
        let mut body = postcard::to_stdvec(&PROTOCOL_VERSION).unwrap();
        body.extend(std::iter::repeat_n(tag, 1 << 20));
        assert!(decode_request(&body).is_err());
        // and decoding works again afterwards on the same thread
        assert_eq!(decode_request(&encode_request(&one)).unwrap(), one);
    }
}

//! The edit transaction behind every live edit ([`Daemon::mutate`]): plan the edit under
//! the control mutex (generation check, validation, restart-only sections), write the
//! config file back without it ([`super::persist`]), then apply the diff under it again.
//! Kept apart from `edits.rs`, which turns each request into a change of the config: this
//! file is the locking and the order of those steps, and their failure cases.

use super::edits::{daemon_checks, describe_changes};
use crate::control::slots::SlotDelta;
use crate::daemon::{ControlState, Daemon};
use spillway_shared::config::Config;
use spillway_shared::proto::{Applied, Response};

/// Whether a service's connection-tracking entries are *session entries* (spec/backend-
/// selection.md "Connection tracking"; the worker's `tracking_key`): `PER_SESSION` with a
/// reduced affinity keys on the client address completed with the service's VIP, port and
/// protocol (the same key for `CLIENT_IP_PROTO`, `CLIENT_IP` and `CLIENT_IP_NO_DESTINATION`);
/// anything else keys on the 5-tuple. A live edit may not switch between the two:
/// established connections would miss their entries.
fn tracking_key_form(s: &spillway_shared::config::Service) -> bool {
    use spillway_shared::config::{SessionAffinity as A, TrackingMode};
    s.tracking_mode == TrackingMode::PER_SESSION && !matches!(s.session_affinity, A::NONE | A::CLIENT_IP_PORT_PROTO)
}

/// Refuses a live edit of service `old` into `new` that changes the connection-tracking key
/// ([`tracking_key_form`]): established connections would miss their entries. The error says
/// how to make the change instead (docs/semantics.md "Changing the tracking key").
pub fn check_tracking_key(old: &spillway_shared::config::Service, new: &spillway_shared::config::Service) -> Result<(), String> {
    if tracking_key_form(old) == tracking_key_form(new) {
        return Ok(());
    }
    Err(format!(
        "service {}: tracking_mode {:?} -> {:?} with session_affinity {:?} -> {:?} cannot change while the daemon runs: it changes the connection-tracking key, so the next packet of most established connections would miss its entry and be balanced anew (about (N-1)/N of them onto another backend). Edit the file and restart, or add a service with the new setting on another VIP or port and move clients to it (docs/semantics.md \"Changing the tracking key\")",
        new.name, old.tracking_mode, new.tracking_mode, old.session_affinity, new.session_affinity
    ))
}

/// Checks `if_generation`, edits a copy of the running config with `f` and validates it;
/// `Ok(Err(..))` when it changes nothing. Errors: a stale generation, `f`'s error, a
/// validation error, or a change that needs a restart.
///
/// `keep_old`: whether the plan keeps a copy of the running config ([`Planned::old`]), which
/// only the write-back to a config file reads.
fn plan(st: &ControlState, if_generation: Option<u64>, keep_old: bool, f: impl FnOnce(&mut Config) -> Result<(), String>) -> Result<Result<Planned, Applied>, String> {
    if let Some(want) = if_generation {
        if want != st.config_generation {
            return Err(stale(st.config_generation, want));
        }
    }
    let mut cand = st.cfg.clone();
    f(&mut cand)?;
    // The services the edit changes (compared once; every later step reads this), and
    // the running config passed the same rules: services it holds unchanged are not
    // checked again on their own (Config::validate_edit).
    let changed: std::collections::HashSet<String> = SlotDelta::new(&st.cfg, &cand).names().map(str::to_string).collect();
    cand.validate_edit(&st.cfg, &changed).map_err(|e| e.to_string())?;
    daemon_checks(&cand)?;
    if cand.dataplane != st.cfg.dataplane {
        return Err("[dataplane] cannot change while the daemon runs (EAL, workers, socket); edit the file and restart".into());
    }
    if cand.ports != st.cfg.ports {
        return Err("[[ports]] cannot change while the daemon runs; edit the file and restart".into());
    }
    if cand.conntrack != st.cfg.conntrack {
        return Err("[conntrack] cannot change while the daemon runs (tables are sized at start); edit the file and restart".into());
    }
    // The peer list is a set: a reorder is no change.
    let peers_sorted = |c: &Option<spillway_shared::config::sync::SyncConfig>| c.clone().map(|mut s| {
        s.peers.sort();
        s
    });
    if peers_sorted(&cand.sync) != peers_sorted(&st.cfg.sync) {
        return Err("[sync] cannot change while the daemon runs (socket, key and peers are set up at start); edit the file and restart".into());
    }
    if cand.metrics != st.cfg.metrics || cand.announce != st.cfg.announce {
        return Err("[metrics] and [announce] cannot change while the daemon runs (listener and interface are set up at start); edit the file and restart".into());
    }
    // A daemon started without IPv6 services has 1,024-entry IPv6 tables (main.rs sizes
    // them from capacity_per_worker only when the file has an IPv6 service). One that
    // started with them may drop its last IPv6 service and add one back.
    let has_v6 = |c: &Config| c.services.iter().any(|s| s.vip.is_ipv6());
    if has_v6(&cand) && !has_v6(&st.cfg) && !st.ipv6_tables_sized {
        return Err("the first IPv6 service cannot be added while the daemon runs (IPv6 connection tables are sized at start from [conntrack] capacity_per_worker, and this daemon started without IPv6 services); add it to the file and restart".into());
    }
    if cand.neighbors != st.cfg.neighbors {
        return Err("[neighbors] cannot change while the daemon runs (resolver timers are set at start); edit the file and restart".into());
    }
    let running: std::collections::HashMap<&str, &spillway_shared::config::Service> = st.cfg.services.iter().map(|s| (s.name.as_str(), s)).collect();
    for new in &cand.services {
        if let Some(old) = running.get(new.name.as_str()) {
            check_tracking_key(old, new)?;
        }
    }
    drop(running);
    let changes = describe_changes(&st.cfg, &cand);
    if changes.is_empty() {
        return Ok(Err(Applied { generation: st.config_generation, snapshot_generation: st.generation, changes: vec!["no change".into()] }));
    }
    // Refused now, before the file is written, if the backend slots cannot take it.
    st.slots.check_delta(&cand, &SlotDelta::of_names(&st.cfg, &cand, &changed))?;
    let old = if keep_old { st.cfg.clone() } else { Config::default() };
    Ok(Ok(Planned { old, cand, changes, changed, next_gen: st.config_generation + 1 }))
}

/// The refusal of `--if-generation want` when the config generation is `cur`: an older
/// `want` means another edit was applied since it was read; a newer one was never this
/// daemon's (a typo, or read from another daemon or before a restart from an older file),
/// and nobody changed anything (QA: `--if-generation 18446744073709551615` was told
/// "someone else changed it").
pub(super) fn stale(cur: u64, want: u64) -> String {
    if want > cur {
        format!("config generation is {cur}, not {want}: {want} is ahead of the daemon's current generation (nothing changed; was it read from another daemon, or mistyped?); re-read it (`spillwayctl config show` names it) and retry")
    } else {
        format!("config generation is {cur}, not {want}: someone else changed it; re-read and retry")
    }
}

/// A validated edit, waiting for its write-back ([`Daemon::mutate`]).
struct Planned {
    /// The running config when the edit was planned (only with a config file to write
    /// back to, else the default config: see [`plan`]).
    old: Config,
    /// The config after the edit.
    cand: Config,
    /// What changes, one line each.
    changes: Vec<String>,
    /// The names of the services that differ between the running config and `cand`
    /// (removed, added or changed).
    changed: std::collections::HashSet<String>,
    /// The config generation the edit gets.
    next_gen: u64,
}

impl Daemon {
    /// Runs one mutation: checks `if_generation`, edits a copy of the config with `f`,
    /// validates it (the same rules as the file, plus [`daemon_checks`]), refuses changes
    /// that need a restart, writes the config file atomically, applies the diff (slots,
    /// health and connections of unchanged backends kept), republishes and answers with the
    /// new config generation.
    ///
    /// Mutations are serialised by [`Daemon::edit_lock`]. The control mutex is held while
    /// the edit is planned and while it is applied, but not while the file is written and
    /// fsynced: a slow disk delays only other edits, not the control loop, the fleet thread
    /// (systemd watchdog) or readers. Only mutations change the config and its generation,
    /// so both are the same after the write as when the edit was planned.
    pub fn mutate(&self, if_generation: Option<u64>, f: impl FnOnce(&mut Config) -> Result<(), String>) -> Response {
        self.mutate_with(if_generation, None, false, f)
    }

    /// [`Daemon::mutate`], or with `dry_run` its dry run: planned and refused alike, then
    /// answered with what it would change ([`super::dryrun`]); nothing is written or
    /// published.
    pub fn mutate_as(&self, dry_run: bool, if_generation: Option<u64>, f: impl FnOnce(&mut Config) -> Result<(), String>) -> Response {
        self.mutate_with(if_generation, None, dry_run, f)
    }

    /// [`Daemon::mutate`]; `replacement` is the complete file text of a `config apply`,
    /// which may replace a config file that is missing or does not parse
    /// ([`super::persist::write_back`]). `dry_run`: answer the plan's effect instead
    /// ([`super::dryrun`]).
    pub(super) fn mutate_with(&self, if_generation: Option<u64>, replacement: Option<&str>, dry_run: bool, f: impl FnOnce(&mut Config) -> Result<(), String>) -> Response {
        let _edit = self.edit_lock.lock().unwrap_or_else(|e| e.into_inner());
        let planned = {
            let st = self.control.lock().unwrap_or_else(|e| e.into_inner());
            match plan(&st, if_generation, self.config_path.is_some(), f) {
                Ok(Ok(p)) if dry_run => {
                    // Refused as the edit would be, by the config file's state: read and
                    // rendered without the control mutex, as the edit's write-back is (the
                    // edit lock keeps other edits out meanwhile).
                    drop(st);
                    if let Some(path) = &self.config_path {
                        if let Err(e) = super::persist::planned_text(path, &p.old, &p.cand, p.next_gen, replacement) {
                            return cannot_write(path, &e, true);
                        }
                    }
                    let st = self.control.lock().unwrap_or_else(|e| e.into_inner());
                    let prepared = super::dryrun::prepare(self, &st, &p.cand, p.changes);
                    drop(st);
                    return super::dryrun::finish(self, prepared);
                }
                Ok(Err(mut a)) if dry_run => {
                    // what the edit itself would say or do about the file
                    // ([`Daemon::restore_file`]), read without the control mutex
                    let running = st.cfg.clone();
                    drop(st);
                    match (&self.config_path, replacement) {
                        (Some(path), None) => a.changes.extend(super::persist::file_problem(path, &running).map(|p| format!("warning: {p}"))),
                        (Some(path), Some(_)) => match super::persist::restore_due(path) {
                            Ok(true) => a.changes = vec![format!("no change; {} is missing or does not parse and would be written anew from the applied file", path.display())],
                            Ok(false) => {}
                            Err(e) => return cannot_write(path, &e, false),
                        },
                        (None, _) => {}
                    }
                    return Response::DryRun(spillway_shared::dryrun::DryRunReport { config_generation: a.generation, changes: a.changes, services: Vec::new(), notes: Vec::new() });
                }
                Ok(Ok(p)) => p,
                Ok(Err(a)) => {
                    let running = st.cfg.clone();
                    drop(st);
                    return self.restore_file(a, replacement, running);
                }
                Err(message) => return Response::Error { message },
            }
        };
        let mut warnings = Vec::new();
        if let Some(path) = &self.config_path {
            match super::persist::write_back(path, &planned.old, &planned.cand, planned.next_gen, replacement) {
                Ok(w) => {
                    if !w.layout_kept {
                        tracing::warn!(path = %w.path.display(), "live edit written in canonical form: the file's comments and layout were not kept");
                    }
                    if let Some(e) = w.not_durable {
                        // The rename is the commit point: the file holds the edit, so it is
                        // applied; only its survival of a power failure is in doubt.
                        tracing::warn!(path = %w.path.display(), error = %e, "config written, but its directory could not be fsynced");
                        warnings.push(format!("warning: {} holds the edit, but its directory could not be fsynced ({e}): the edit may not survive a power failure", w.path.display()));
                    }
                }
                Err(e) => return cannot_write(path, &e, true),
            }
        }
        let mut st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        match self.apply_planned(&mut st, planned) {
            Ok(mut a) => {
                a.changes.extend(warnings);
                Response::Applied(a)
            }
            Err(message) => Response::Error { message },
        }
    }

    /// Answers an edit that changes nothing (`running`: the running config). For a `config
    /// apply` (`replacement`: its text), first writes the config file anew from the applied
    /// text if the file is missing or does not parse ([`super::persist::restore`]), so that
    /// the way out the refusals of a broken file give also works when the running config is
    /// unchanged. Any other such edit writes nothing, and its answer warns when the file
    /// would refuse the next edit that changes something ([`super::persist::file_problem`]).
    fn restore_file(&self, mut a: Applied, replacement: Option<&str>, running: Config) -> Response {
        let Some(path) = &self.config_path else { return Response::Applied(a) };
        let Some(text) = replacement else {
            if let Some(p) = super::persist::file_problem(path, &running) {
                a.changes.push(format!("warning: {p}"));
            }
            return Response::Applied(a);
        };
        match super::persist::restore(path, &running, a.generation, text) {
            Ok(None) => Response::Applied(a),
            Ok(Some(w)) => {
                tracing::warn!(path = %w.path.display(), "config file written anew from the applied file (it was missing or did not parse)");
                a.changes = vec![format!("no change; {} was missing or did not parse and is written anew from the applied file", w.path.display())];
                if let Some(e) = w.not_durable {
                    a.changes.push(format!("warning: {} could not have its directory fsynced ({e})", w.path.display()));
                }
                Response::Applied(a)
            }
            Err(e) => cannot_write(path, &e, false),
        }
    }

    /// Applies an edit [`plan`]ned under [`Daemon::edit_lock`] (held), after its write-back.
    /// Proportional to what the edit changed: the slots, the health view and the load
    /// baselines are updated for the services that differ ([`SlotDelta`]), and only they
    /// are recompiled (a change of structure recompiles all).
    fn apply_planned(&self, st: &mut ControlState, planned: Planned) -> Result<Applied, String> {
        let Planned { old: planned_old, cand, changes, changed, next_gen } = planned;
        let written_from_another = self.config_path.is_some() && st.cfg != planned_old;
        if st.config_generation + 1 != next_gen || written_from_another {
            // Cannot happen while every mutation goes through `mutate` (edit_lock).
            return Err(format!("the config changed while the edit was written (config generation {}); re-read and retry", st.config_generation));
        }
        drop(planned_old);
        // Slots are synced for the services that changed (checked first: on an error the
        // map is unchanged); fresh slots wait for the next publication's baselines.
        st.slots.sync_delta(&cand, &SlotDelta::of_names(&st.cfg, &cand, &changed))?;
        // Health after the edit, for the services it changed: endpoints that stay keep
        // their state, new or readdressed ones start as their health check says, a removed
        // check leaves static healthy endpoints, removed endpoints are forgotten
        // (`health::after_edit`, which dry runs use too).
        let old = std::mem::replace(&mut st.cfg, cand);
        let cfg = &st.cfg;
        let initial = crate::health::after_edit(&old, cfg, &changed, &mut st.health);
        let new_by_name: std::collections::HashMap<&str, &spillway_shared::config::Service> =
            cfg.services.iter().filter(|s| changed.contains(&s.name)).map(|s| (s.name.as_str(), s)).collect();
        let present = |(s, b, e): &crate::control::EndpointKey| {
            !changed.contains(s)
                || new_by_name.get(s.as_str()).and_then(|ns| ns.backends.iter().find(|x| &x.name == b)).is_some_and(|nb| nb.members().iter().any(|m| &m.name == e))
        };
        st.last_new.retain(|k, _| present(k));
        drop(new_by_name);
        st.states.retain(|s, _| !changed.contains(s) || cfg.service(s).is_some());
        st.pools.retain(|s, _| !changed.contains(s) || cfg.service(s).is_some());
        st.config_generation = next_gen;
        self.update_health_checker(st, initial);
        // Only the services the edit changed are recompiled (and any a health event
        // marked since the last publication); a change of structure recompiles all.
        st.dirty.edit_of(&old, &st.cfg, &changed);
        let snapshot_generation = self.republish_dirty(st);
        // The replaced config is freed off the caller's path.
        super::persist::free_elsewhere(old);
        for c in &changes {
            tracing::info!(config_generation = next_gen, "config change: {c}");
        }
        Ok(Applied { generation: next_gen, snapshot_generation, changes })
    }

    /// Hands the new targets to the health checker at a new target-set generation
    /// (starting one when the first health check appears) and reconciles the health view
    /// with it; health events of older generations are dropped from then on
    /// ([`crate::health::sync_after_edit`]).
    ///
    /// `initial` holds the endpoints of the services the edit changed; a checker started
    /// now starts every target, so then every checked endpoint's state is added from the
    /// health view.
    fn update_health_checker(&self, st: &mut ControlState, mut initial: std::collections::HashMap<crate::control::EndpointKey, bool>) {
        let tx = self.health_events.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut ch = self.checker.lock().unwrap_or_else(|e| e.into_inner());
        if ch.is_none() && tx.is_some() {
            for s in st.cfg.services.iter().filter(|s| s.health_check.is_some()) {
                for b in &s.backends {
                    for m in b.members() {
                        let key = (s.name.clone(), b.name.clone(), m.name);
                        let healthy = st.health.get(&key).map(|v| v.healthy).unwrap_or(true);
                        initial.entry(key).or_insert(healthy);
                    }
                }
            }
        }
        st.health_generation += 1;
        for name in crate::health::sync_after_edit(&mut ch, tx, &st.cfg, initial, st.health_generation, &mut st.health) {
            st.dirty.service(&name);
        }
    }
}

/// The refusal of an edit (`edit`: one that changes the config, which is then not applied)
/// or of a no-change `config apply` whose file could not be written at `path`: the same
/// words for the edit and its dry run.
fn cannot_write(path: &std::path::Path, e: &std::io::Error, edit: bool) -> Response {
    let applied = if edit { "; the edit was not applied" } else { "" };
    Response::Error { message: format!("cannot write {}: {e}{applied}", path.display()) }
}

//! Where the tracked connections of an endpoint that turns unhealthy (for the worker's
//! persistence rule) would go, flow by flow: a child of [`super`].
//!
//! Whether such a connection leaves its endpoint depends on its client's zone class (a
//! connection stays on an unhealthy endpoint as the last resort when its client class's
//! table has no healthy endpoint, or no table), and where it goes on its selection hash:
//! both are asked of the worker's own rules (`keeps_backend` and `new_pick` in
//! dataplane/src/fastpath/worker.rs, what its `select` uses). A connection-table entry
//! holds the client address and port and the service's number, the VIP, port and protocol
//! are the service's: so each listed entry is followed into the edited snapshot exactly as
//! the worker will, without sampling. The workers list at most [`crate::control::MAX_SHOW_PER_WORKER`] entries each
//! per endpoint; beyond that the answer says how many were examined.

use super::Side;
use crate::control::snapshot::Snapshot;
use crate::control::FlowReply;
use crate::fastpath::worker::{keeps_backend, new_pick, Family};
use spillway_shared::flow::FlowKeyOf;
use spillway_shared::martian::is_martian_source;

/// The reason [`super::leaves`] gives for an endpoint the edited snapshot marks unhealthy
/// while the service does not persist connections on unhealthy backends.
pub(super) const UNHEALTHY: &str = "unhealthy, and the service does not persist connections on unhealthy backends";

/// The reason for an endpoint that was already [`UNHEALTHY`] before the edit and stays so:
/// the connections still on it are those of client classes that keep it as their last
/// resort, and the edit may give such a class a healthy backend.
pub(super) const ALREADY: &str = "already unhealthy without persistence; its last-resort connections";

/// What is needed to follow one endpoint's tracked connections into the edited snapshot
/// (the endpoint keeps its slot and incarnation there).
pub(super) struct Follow {
    /// The service's index in the edited snapshot (`u16::MAX` when the edit removes it).
    si: u16,
    /// The service's index in the running snapshot: for an endpoint already unhealthy
    /// before the edit, only the connections the worker keeps on it today (its last-resort
    /// ones) are the edit's doing; the others leave at their next packet anyway.
    si_before: u16,
    /// The edit removes the endpoint, gives it a new address, evicts or drains its
    /// connections (the reason [`super::leaves`] gives): its last-resort connections are
    /// re-picked, or stay until the drain ends ([`follow_gone`]).
    gone: bool,
    /// The endpoint's slot and incarnation.
    slot: u16,
    incarnation: u16,
    /// Slots of the other endpoints of its backend (in the edited config).
    siblings: Vec<u16>,
    /// The backend's name.
    backend: String,
    /// The endpoint was already unhealthy without persistence before the edit
    /// ([`ALREADY`]): listed only when some of its connections leave.
    already: bool,
}

impl Follow {
    /// This follow, for an endpoint already unhealthy before the edit ([`ALREADY`]).
    pub(super) fn already(self) -> Follow {
        Follow { already: true, ..self }
    }
    /// Whether the endpoint was already unhealthy before the edit.
    pub(super) fn is_already(&self) -> bool {
        self.already
    }
}

/// The [`Follow`] of endpoint `slot` (`incarnation`) of backend `backend` of service `name`,
/// or `None` when its connections cannot be followed: the service's number changes (a new
/// VIP, port or protocol: its entries no longer match the service, `address_notes` says
/// what they get) or it is not in both snapshots.
#[allow(clippy::too_many_arguments)]
pub(super) fn follow(b: &Side, before: &Snapshot, a: &Side, after: &Snapshot, name: &str, backend: &str, slot: u16, incarnation: u16) -> Option<Follow> {
    let (_, sb) = b.service_snap(before, name)?;
    let (si, sa) = a.service_snap(after, name)?;
    if sb.id != sa.id {
        return None;
    }
    let siblings = a.slots.backend_slots(name, backend).into_iter().filter(|s| *s != slot).collect();
    let (si_before, _) = b.service_snap(before, name)?;
    Some(Follow { si, si_before, gone: false, slot, incarnation, siblings, backend: backend.to_string(), already: false })
}

/// The [`Follow`] of an endpoint already unhealthy without persistence before the edit
/// that the edit takes away from its last-resort connections (removed, a new address,
/// evicted, drains, service removed); `None` when the service is not in the running
/// snapshot.
#[allow(clippy::too_many_arguments)]
pub(super) fn follow_gone(b: &Side, before: &Snapshot, a: &Side, after: &Snapshot, name: &str, backend: &str, slot: u16, incarnation: u16) -> Option<Follow> {
    let (si_before, sb) = b.service_snap(before, name)?;
    // where they go: the edited service's pick, when the service keeps its number (else
    // they match no service: dropped)
    let si = a.service_snap(after, name).filter(|(_, sa)| sa.id == sb.id).map_or(u16::MAX, |(si, _)| si);
    // every slot of the backend after the edit, this one too when another endpoint of the
    // backend takes it in the same edit (a renamed endpoint: review)
    let siblings = a.slots.backend_slots(name, backend);
    Some(Follow { si, si_before, gone: true, slot, incarnation, siblings, backend: backend.to_string(), already: true })
}

/// Whether the worker keeps the connection of client `src` on `f`'s endpoint in the
/// running snapshot `before` (asked before any drain deadline): for an endpoint already
/// unhealthy without persistence, the connections of a client class that keeps it as its
/// last resort.
fn kept_before<A: Family>(before: &Snapshot, f: &Follow, src: A) -> bool {
    let Some(ss) = before.services.get(usize::from(f.si_before)) else { return false };
    let draining = before.backends.get(usize::from(f.slot)).and_then(|b| b.draining_until_ms);
    keeps_backend(before, ss, f.si_before, f.slot, f.incarnation, src, draining.map_or(0, |d| d.wrapping_sub(1)))
}

/// The classes of the service whose clients keep an unhealthy endpoint as the last resort
/// in `snap` (their table has no healthy endpoint, or there is no table), as a clause for
/// the reason when the flows are not followed (`; clients of class z2 keep it (...)`), or
/// an empty string.
pub(super) fn kept_classes(snap: &Snapshot, f: &Follow) -> String {
    match last_resort_classes(snap, f.si).as_slice() {
        [] => String::new(),
        [one] => format!("; clients of class {one} keep it (their class has no healthy backend: the last resort)"),
        many => format!("; clients of classes {} keep it (their class has no healthy backend: the last resort)", many.join(", ")),
    }
}

/// The client classes of service `si` in `snap` whose clients keep an unhealthy endpoint
/// as the last resort (their table has no healthy endpoint, or there is none), by name.
fn last_resort_classes(snap: &Snapshot, si: u16) -> Vec<&str> {
    let Some(ss) = snap.services.get(usize::from(si)) else { return Vec::new() };
    ss.tables.iter().enumerate().filter(|(_, t)| t.as_ref().is_none_or(|t| t.all_unhealthy)).filter_map(|(ci, _)| snap.class_names.get(ci).map(String::as_str)).collect()
}

/// For an endpoint already unhealthy without persistence that the edit leaves so
/// ([`ALREADY`]): whether none of its last-resort connections can leave, every class that
/// keeps it as the last resort before the edit still doing so after. Answers without the
/// workers (review: without their answer, every dry run listed such an endpoint as "may
/// leave", even for an edit of another service).
pub(super) fn last_resort_kept(before: &Snapshot, after: &Snapshot, f: &Follow) -> bool {
    let now = last_resort_classes(after, f.si);
    !f.gone && last_resort_classes(before, f.si_before).iter().all(|c| now.contains(c))
}

/// What the worker does with one tracked connection at its next packet.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fate {
    /// Kept on its endpoint (the last resort of its class).
    Stays,
    /// Kept until the endpoint's drain deadline.
    Drains,
    /// Re-picked onto its own endpoint: it survives.
    Same,
    /// Re-picked onto another endpoint of its backend.
    Sibling,
    /// Re-picked onto another backend.
    Other,
    /// Dropped: no pick (a martian source, an empty table).
    Dropped,
}

/// The worker's decision for the connection of client `src`:`sport` on `f`'s endpoint in
/// `snap`: the worker's own rules, `keeps_backend` (asked before any drain deadline: a
/// drain reads as [`Fate::Drains`]), then `new_pick`.
fn fate<A: Family>(snap: &Snapshot, f: &Follow, src: A, sport: u16) -> Fate {
    let Some(ss) = snap.services.get(usize::from(f.si)) else { return Fate::Dropped };
    // asked at a time before its drain deadline, if it has one: a drain reads as Drains
    let draining = snap.backends.get(usize::from(f.slot)).and_then(|b| b.draining_until_ms);
    if keeps_backend(snap, ss, f.si, f.slot, f.incarnation, src, draining.map_or(0, |d| d.wrapping_sub(1))) {
        return if draining.is_some() { Fate::Drains } else { Fate::Stays };
    }
    if is_martian_source(src, |a| A::is_ours(snap, a)) {
        return Fate::Dropped;
    }
    let key = FlowKeyOf { src, dst: A::vip(ss), sport, dport: ss.port, proto: ss.proto };
    match new_pick(snap, ss, &key) {
        None => Fate::Dropped,
        // (a removed endpoint's slot may be another endpoint's after the same edit)
        Some(s) if s == f.slot && !f.gone => Fate::Same,
        Some(s) if f.siblings.contains(&s) => Fate::Sibling,
        Some(_) => Fate::Other,
    }
}

/// `k` connections and what happens to them: `None` for none, `1 {one}`, `k {many}`.
fn counted(k: usize, one: &str, many: &str) -> Option<String> {
    match k {
        0 => None,
        1 => Some(format!("1 {one}")),
        k => Some(format!("{k} {many}")),
    }
}

/// The breakdown of the workers' listed entries (`replies`, of `total` tracked
/// connections): `6 move to another backend, 31 stay (...)`, and how many of them leave
/// their endpoint (move, or are dropped); `None` when none was listed.
pub(super) fn breakdown(before: &Snapshot, snap: &Snapshot, f: &Follow, endpoint: &str, replies: &[FlowReply], total: u64) -> Option<(String, usize)> {
    let mut fates: Vec<Fate> = Vec::new();
    // of an already unhealthy endpoint: connections it does not keep today (they leave at
    // their next packet, edit or not)
    let mut anyway = 0usize;
    fn tally<A: Family>(before: &Snapshot, snap: &Snapshot, f: &Follow, src: A, sport: u16, fates: &mut Vec<Fate>, anyway: &mut usize) {
        match f.already && !kept_before(before, f, src) {
            true => *anyway += 1,
            false => fates.push(fate(snap, f, src, sport)),
        }
    }
    for r in replies {
        r.entries.iter().for_each(|(e, _)| tally(before, snap, f, e.src, e.sport, &mut fates, &mut anyway));
        r.entries6.iter().for_each(|(e, _)| tally(before, snap, f, e.src, e.sport, &mut fates, &mut anyway));
    }
    if fates.is_empty() {
        return None;
    }
    let n = |x: Fate| fates.iter().filter(|f| **f == x).count();
    // (fate, words for one connection, words for several)
    let parts: Vec<String> = [
        (Fate::Other, "moves to another backend".to_string(), "move to another backend".to_string()),
        (Fate::Sibling, format!("moves to another endpoint of {}", f.backend), format!("move to another endpoint of {}", f.backend)),
        (Fate::Dropped, "is dropped (no backend is picked for it)".to_string(), "are dropped (no backend is picked for them)".to_string()),
        (Fate::Same, format!("is re-picked onto {endpoint} again (it stays)"), format!("are re-picked onto {endpoint} again (they stay)")),
        (Fate::Stays, "stays (its client class has no healthy backend: the last resort)".to_string(), "stay (their client class has no healthy backend: the last resort)".to_string()),
        (Fate::Drains, "stays until its drain ends (its client class has no healthy backend)".to_string(), "stay until its drain ends (their client class has no healthy backend)".to_string()),
    ]
    .into_iter()
    .filter_map(|(x, one, many)| counted(n(x), &one, &many))
    .collect();
    // (a drain the edit starts ends their stay too)
    let leaving = n(Fate::Other) + n(Fate::Sibling) + n(Fate::Dropped) + n(Fate::Drains) * usize::from(f.gone);
    let examined = (fates.len() + anyway) as u64;
    let mut text = if examined < total {
        format!("of {examined} examined (the workers list at most {} each), {}", crate::control::MAX_SHOW_PER_WORKER, parts.join(", "))
    } else {
        parts.join(", ")
    };
    if anyway > 0 {
        text.push_str(&format!(" ({anyway} other{} of clients with a healthy backend leave at {} next packet, edit or not)", if anyway == 1 { "" } else { "s" }, if anyway == 1 { "its" } else { "their" }));
    }
    Some((text, leaving))
}

#[cfg(test)]
mod tests {
    /// One connection reads in the singular ("1 stays", not "1 stay"), none is left out.
    #[test]
    fn counts_agree_with_their_verbs() {
        assert_eq!(super::counted(0, "stays", "stay"), None);
        assert_eq!(super::counted(1, "stays", "stay").as_deref(), Some("1 stays"));
        assert_eq!(super::counted(31, "stays", "stay").as_deref(), Some("31 stay"));
    }
}

//! Dry runs of edits around an endpoint that is already unhealthy without persistence
//! (review of e720d6e): only its last-resort connections are the edit's doing, an edit that
//! removes it says so, and a service listed only for it does not read as one without
//! backends. Each prediction is checked against the edit applied, packet by packet.

use super::{ack, b3_unhealthy_with_37, dry_served, fields, stay, Flows};
use crate::daemon::Daemon;
use crate::fastpath::port::PacketBuf;
use crate::fastpath::worker::{Verdict, Worker};
use spillway_shared::dryrun::DryRunReport;
use spillway_shared::proto::{Request, Response};
use std::sync::{Arc, Mutex};

/// `NEVER_PERSIST` from the start and b3 (z2's only backend) unhealthy: b3 is already
/// unhealthy without persistence. It holds 6 idle connections of z1 clients (they leave at
/// their next packet, edit or not) and 31 of z2 clients (z2's last resort). Returns the
/// daemon, the worker and the 37 flows (z1's first).
fn already() -> (Daemon, Arc<Mutex<Worker>>, Flows) {
    let cfg = stay().replace("zonal_affinity = \"STAY_WITHIN_ZONE\"", "zonal_affinity = \"STAY_WITHIN_ZONE\"\nconnection_persistence_on_unhealthy_backends = \"NEVER_PERSIST\"");
    b3_unhealthy_with_37(&cfg)
}

/// The next packet of each flow: (verdict, whether it went to b3).
fn send(d: &Daemon, worker: &Arc<Mutex<Worker>>, flows: &[([u8; 4], u16)]) -> Vec<(Verdict, bool)> {
    flows
        .iter()
        .map(|(src, sport)| {
            let mut b = ack(*src, *sport);
            let v = d.shared.with_snapshot(|s| worker.lock().unwrap().process(&mut b, 0, s, d.now_ms())).unwrap();
            (v, b.data()[0..6] == [2, 0, 0, 0, 0x0b, 3])
        })
        .collect()
}

fn listed(rep: &DryRunReport) -> Vec<(String, String, Option<u64>)> {
    rep.services.iter().flat_map(|s| &s.repicked).map(|r| (r.backend.clone(), r.reason.clone(), r.connections)).collect()
}

/// An edit of another backend lists nothing for b3 (its 6 z1 connections leave at their
/// next packet without the edit too); `backend remove b3` says its 31 last-resort
/// connections move, and applied, exactly those 31 are forwarded elsewhere.
#[test]
fn only_last_resort_connections_are_the_edits_doing_and_a_removal_says_so() {
    let (d, worker, flows) = already();
    let weight = Request::BackendSet { service: "web".into(), name: "b1".into(), fields: fields(&[("weight", "5")]), if_generation: None };
    let remove = Request::BackendRemove { service: "web".into(), name: "b3".into(), if_generation: None };
    let reps = dry_served(&d, &worker, &[&weight, &remove]);
    assert_eq!(listed(&reps[0]), [], "{:#?}", reps[0]);
    assert_eq!(
        listed(&reps[1]),
        [(
            "b3".to_string(),
            "removed, and it was already unhealthy without persistence; its last-resort connections: 31 move to another backend (6 others of clients with a healthy backend leave at their next packet, edit or not)".to_string(),
            Some(37)
        )]
    );
    // without an edit: the 6 z1 connections leave b3, the 31 z2 ones stay
    let now = send(&d, &worker, &flows);
    assert_eq!(now.iter().map(|x| x.1).collect::<Vec<_>>(), (0..37).map(|i| i >= 6).collect::<Vec<_>>());
    // applied: the 31 go to another backend
    assert!(matches!(crate::ctl::server::Handler::handle(&d, remove), Response::Applied(_)));
    assert_eq!(send(&d, &worker, &flows[6..]), vec![(Verdict::Forward, false); 31]);
}

/// An edit that changes nothing for the service's routing (an idle timeout) does not list
/// it at all: listed only for b3, whose last-resort connections all stay, it read as a
/// service without backends ("no backends before or after").
#[test]
fn a_service_listed_only_for_an_unaffected_endpoint_is_not_listed() {
    let (d, worker, _) = already();
    let idle = Request::ServiceSet { name: "web".into(), fields: fields(&[("idle_timeout_sec", "1200")]), if_generation: None };
    let reps = dry_served(&d, &worker, &[&idle]);
    assert!(reps[0].services.is_empty(), "{:#?}", reps[0]);
}

/// Without the workers' answer, b3 is listed ("may leave, not counted") only for an edit
/// that gives a class keeping it as the last resort a healthy backend: an edit of another
/// backend's weight leaves z2 without one, so nothing can leave (review: every dry run
/// listed it).
#[test]
fn unanswered_an_endpoint_is_listed_only_when_its_last_resort_can_go() {
    let (d, _worker, _) = already(); // nobody serves the mailbox
    let weight = Request::BackendSet { service: "web".into(), name: "b1".into(), fields: fields(&[("weight", "5")]), if_generation: None };
    assert_eq!(listed(&super::dry(&d, &weight)), []);
    let b4 = Request::BackendAdd { service: "web".into(), name: "b4".into(), fields: fields(&[("address", "10.0.2.4"), ("mac", "02:00:00:00:0b:04"), ("zone", "z2")]), if_generation: None };
    let rep = super::dry(&d, &b4);
    assert_eq!(
        listed(&rep).into_iter().filter(|(b, _, _)| b == "b3").collect::<Vec<_>>(),
        [("b3".to_string(), "already unhealthy without persistence; its last-resort connections may leave (not counted)".to_string(), None)]
    );
}

//! Dry runs of a service whose connection-table entries are sessions (`PER_SESSION` with a
//! reduced session affinity: keyed on the client address and the service,
//! `worker::tracking_key`): a new connection of a client holding a session takes the
//! session's backend, so the moved shares are not what its clients get. Checked against the
//! edit applied, connection by connection, on a real worker.

use super::{dry_served, fields, stay};
use crate::daemon::Daemon;
use crate::fastpath::port::PacketBuf;
use crate::fastpath::worker::{PortInfo, Verdict, Worker};
use spillway_shared::config::Config;
use spillway_shared::proto::{Request, Response};
use std::sync::{Arc, Mutex};

/// Clients of z1 (b1 and b2) that open a session before the edit.
const CLIENTS: u8 = 40;

/// A SYN from `src`:`sport` to 10.0.0.100:80 through the worker; the backend it went to
/// (the last octet of the `stay` backends' MACs: 1, 2 or 3).
fn connect(d: &Daemon, worker: &Arc<Mutex<Worker>>, src: [u8; 4], sport: u16) -> u8 {
    let mut b = crate::fastpath::tests::syn(80);
    let f = b.data_mut();
    f[26..30].copy_from_slice(&src);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    let v = d.shared.with_snapshot(|s| worker.lock().unwrap().process(&mut b, 0, s, d.now_ms())).unwrap();
    assert_eq!(v, Verdict::Forward);
    let mac = &b.data()[0..6];
    assert_eq!(mac[..5], [2, 0, 0, 0, 0x0b], "to a backend: {mac:?}");
    mac[5]
}

/// `session_affinity CLIENT_IP_PROTO -> CLIENT_IP` under `PER_SESSION` keeps the key
/// (client address and service): the dry run moves about half of z1's new connections
/// (another hash), but the clients holding a session keep its backend for their new
/// connections when the edit is applied, and the dry run says so with their count (it
/// did not). A change of the key's form is refused in the dry run as the edit is.
#[test]
fn session_entries_keep_their_clients_and_the_dry_run_says_so() {
    let cfg = stay().replace("zonal_affinity = \"STAY_WITHIN_ZONE\"", "zonal_affinity = \"STAY_WITHIN_ZONE\"\ntracking_mode = \"PER_SESSION\"\nsession_affinity = \"CLIENT_IP_PROTO\"");
    let d = Daemon::new(Config::from_toml(&cfg).unwrap(), 1, vec![0], Box::new(|_| Default::default())).unwrap();
    let port = PortInfo { mac: [2, 0, 0, 0, 0, 1], forward_to: 0, addr: 0 };
    let worker = Arc::new(Mutex::new(Worker::new(0, 4096, 3, Default::default(), d.shared.stats[0].clone(), vec![port])));
    let clients: Vec<[u8; 4]> = (0..CLIENTS).map(|i| [10, 1, 0, 10 + i]).collect();
    let first: Vec<u8> = clients.iter().map(|c| connect(&d, &worker, *c, 40000)).collect();

    let edit = Request::ServiceSet { name: "web".into(), fields: fields(&[("session_affinity", "CLIENT_IP")]), if_generation: None };
    let rep = dry_served(&d, &worker, &[&edit]).remove(0);
    let z1 = rep.services.iter().flat_map(|s| &s.classes).find(|c| c.class == "z1").unwrap_or_else(|| panic!("{rep:#?}"));
    assert!(z1.moved_share > 0.3, "another hash: about half of z1's slots change owner: {z1:#?}");
    let note = rep.notes.iter().find(|n| n.contains("PER_SESSION")).unwrap_or_else(|| panic!("no note on the sessions: {rep:#?}"));
    assert!(note.contains("session_affinity CLIENT_IP_PROTO -> CLIENT_IP") && note.contains(&format!("the {CLIENTS} tracked sessions keep their sessions' backends")), "{note}");

    // applied: a new connection (another client port) of every client with a session
    assert!(matches!(crate::ctl::server::Handler::handle(&d, edit), Response::Applied(_)));
    let again: Vec<u8> = clients.iter().map(|c| connect(&d, &worker, *c, 40001)).collect();
    assert_eq!(again, first, "every client with a session keeps its backend");
    // clients without a session do move (the shares are theirs)
    let fresh: Vec<[u8; 4]> = (0..CLIENTS).map(|i| [10, 1, 1, 10 + i]).collect();
    let picks = |w: &Arc<Mutex<Worker>>, d: &Daemon| -> Vec<u8> { fresh.iter().map(|c| connect(d, w, *c, 40000)).collect() };
    let after = picks(&worker, &d);
    let d0 = Daemon::new(Config::from_toml(&cfg).unwrap(), 1, vec![0], Box::new(|_| Default::default())).unwrap();
    let w0 = Arc::new(Mutex::new(Worker::new(0, 4096, 3, Default::default(), d0.shared.stats[0].clone(), vec![port])));
    let before = picks(&w0, &d0);
    assert!(before.iter().zip(&after).any(|(x, y)| x != y), "fresh clients hash anew");

    // a change of the key's form: refused in the dry run, as the edit is
    let form = Request::ServiceSet { name: "web".into(), fields: fields(&[("tracking_mode", "PER_CONNECTION")]), if_generation: None };
    match crate::ctl::server::Handler::handle(&d, Request::DryRun(Box::new(form))) {
        Response::Error { message } => assert!(message.contains("changes the connection-tracking key"), "{message}"),
        r => panic!("{r:?}"),
    }
}

//! Reads of a name the daemon does not have answer with the names it has, as the edits do
//! (`service remove nope`: `no service named nope (have: web, dns)`), and a daemon with no
//! services says so in `explain` and `vip show` (fresh-user QA: `service show nope` and
//! `backend show web nope` named nothing to pick from; `explain` answered "the config has 0
//! services; choose one with --vip ()").

mod common;

use common::{null_example, Daemon};

#[test]
fn unknown_names_list_the_known_ones() {
    let d = Daemon::start("unknown-names", &null_example());
    let err = d.expect(&["service", "show", "nope"], 1);
    assert!(err.contains("no service named nope (have: web, dns)"), "{err}");
    let err = d.expect(&["backend", "list", "nope"], 1);
    assert!(err.contains("no service named nope (have: web, dns)"), "{err}");
    let err = d.expect(&["backend", "show", "web", "nope"], 1);
    assert!(err.contains("service web has no backend nope (have: b1, b2, b3, b4)"), "{err}");
}

#[test]
fn a_daemon_without_services_says_so() {
    let cfg = null_example();
    let cfg = &cfg[..cfg.find("[[services]]").expect("null.toml has services")];
    let d = Daemon::start("no-services", cfg);
    let err = d.expect(&["explain", "--client", "10.1.0.10"], 1);
    assert!(err.contains("the config has no services: nothing to explain"), "{err}");
    let err = d.expect(&["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100:80/tcp"], 1);
    assert!(err.contains("the config has no services: nothing to explain"), "{err}");
    let out = d.ok(&["vip", "show"]);
    assert!(out.contains("(no VIP: the config has no services"), "{out}");
}

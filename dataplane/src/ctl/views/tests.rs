//! The backend rows of `status` (and `backend list`, the metrics): drain and admin state.

use crate::daemon::Daemon;
use spillway_shared::config::Config;
use spillway_shared::proto::{BackendStatus, Request, Response};

/// Service `web`: one-address backend b1, group g of endpoints e1 and e2 (no health check:
/// every endpoint healthy).
const CONFIG: &str = r#"
[[ports]]
name = "p0"
device = "net_null0"
address = "10.0.0.2"
[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
[[services.backends]]
name = "b1"
address = "10.0.1.1"
mac = "02:00:00:00:0b:01"
[[services.backends]]
name = "g"
[[services.backends.endpoints]]
name = "e1"
address = "10.0.2.1"
mac = "02:00:00:00:0c:01"
[[services.backends.endpoints]]
name = "e2"
address = "10.0.2.2"
mac = "02:00:00:00:0c:02"
"#;

fn daemon() -> Daemon {
    Daemon::new(Config::from_toml(CONFIG).unwrap(), 1, vec![0], Box::new(|_| Default::default())).unwrap()
}

fn row(d: &Daemon, backend: &str) -> BackendStatus {
    d.status().backends.into_iter().find(|b| b.backend == backend).unwrap()
}

fn applied(d: &Daemon, req: Request) {
    let r = d.edit_request(req);
    assert!(matches!(r, Response::Applied(_)), "{r:?}");
}

/// The metric line of `name` for backend `backend` (its value).
fn metric(d: &Daemon, name: &str, backend: &str) -> f64 {
    let text = crate::metrics::render(d);
    let prefix = format!("spillway_{name}{{");
    text.lines().find(|l| l.starts_with(&prefix) && l.contains(&format!("backend=\"{backend}\""))).unwrap_or_else(|| panic!("no {name} of {backend}:\n{text}")).rsplit(' ').next().unwrap().parse().unwrap()
}

/// A backend whose capacity the operator set to zero takes no new connections: `status`
/// says drained, and so does `spillway_backend_drained` (fresh-user QA: `capacity_scaler=0`
/// showed healthy, drained false, and no metric said so).
#[test]
fn a_backend_with_zero_capacity_is_drained() {
    let d = daemon();
    assert!(!row(&d, "b1").drained);
    assert_eq!(metric(&d, "backend_drained", "b1"), 0.0);
    let set = |f: &str, v: &str| Request::BackendSet { service: "web".into(), name: "b1".into(), fields: vec![(f.into(), v.into())], if_generation: None };
    applied(&d, set("capacity_scaler", "0"));
    let b1 = row(&d, "b1");
    assert!(b1.drained && b1.enabled && b1.healthy, "{b1:?}");
    assert_eq!(metric(&d, "backend_drained", "b1"), 1.0);
    applied(&d, set("capacity_scaler", "1.0"));
    applied(&d, set("capacity_cps", "0"));
    assert!(row(&d, "b1").drained);
    assert!(!row(&d, "g").drained);
}

/// A group whose endpoints are all disabled is disabled, as a disabled one-address backend
/// is, and its health is its endpoints' own (fresh-user QA: "UNHEALTHY 0/0" and
/// `spillway_backend_healthy` 0 for two healthy endpoints).
#[test]
fn a_group_with_every_endpoint_disabled_is_disabled_not_unhealthy() {
    let d = daemon();
    let off = |e: &str| Request::EndpointSet { service: "web".into(), backend: "g".into(), name: e.into(), fields: vec![("enabled".into(), "false".into())], if_generation: None };
    applied(&d, off("e1"));
    let g = row(&d, "g");
    assert!(g.enabled && g.healthy && (g.endpoints, g.healthy_endpoints) == (1, 1), "{g:?}");
    applied(&d, off("e2"));
    let g = row(&d, "g");
    assert!(!g.enabled && g.healthy, "{g:?}");
    assert_eq!((metric(&d, "backend_enabled", "g"), metric(&d, "backend_healthy", "g")), (0.0, 1.0));
}

//! One-service reads of `spillwayctl`: `service show NAME` and `backend list|show SERVICE`
//! fetch that service's config and its backends' state only ([`Request::ServiceShow`]),
//! whatever the size of the rest of the config.

use crate::client::{self, fail, json, unexpected};
use spillway_shared::proto::{Request, Response};
use std::fmt::Write;
use std::path::Path;

/// One service's config and its backends' state ([`Request::ServiceShow`]): only that
/// service travels. Exit code 1 for an unknown service (the daemon's message), 2 when the
/// exchange fails.
pub(crate) fn fetch_service(socket: &Path, name: &str) -> Result<(u64, spillway_shared::config::Service, Vec<spillway_shared::proto::BackendStatus>), i32> {
    match client::request(socket, &Request::ServiceShow { name: name.to_string() }) {
        Ok(Response::Service { generation, toml, backends }) => {
            #[derive(serde::Deserialize)]
            struct One {
                services: Vec<spillway_shared::config::Service>,
            }
            match toml::from_str::<One>(&toml).map(|o| o.services.into_iter().next()) {
                Ok(Some(s)) => Ok((generation, s, backends)),
                Ok(None) => Err(unexpected(&Response::Service { generation, toml, backends })),
                Err(e) => Err(client::error_out("spillwayctl", "protocol", 2, &format!("the daemon's service {name} does not parse: {e}"))),
            }
        }
        Ok(r) => Err(unexpected(&r)),
        Err(client::ClientError::Refused(m)) if m.starts_with("no service named") => Err(client::error_out("spillwayctl", "refused", 1, &m)),
        Err(e) => Err(fail(e)),
    }
}

/// `backend list SERVICE` (`name` absent) and `backend show SERVICE NAME`: a table of the
/// backends with their state and counters; `--json` gives config and state per backend.
pub(crate) fn backend_read(socket: &Path, service: &str, name: Option<&String>, as_json: bool) -> i32 {
    let (gen, svc, status) = match fetch_service(socket, service) {
        Ok(x) => x,
        Err(c) => return c,
    };
    let st = |b: &str| status.iter().find(|x| x.backend == b).cloned();
    let list: Vec<_> = svc.backends.iter().filter(|b| name.is_none_or(|n| &b.name == n)).collect();
    if list.is_empty() {
        if let Some(n) = name {
            let have: Vec<&str> = svc.backends.iter().map(|b| b.name.as_str()).collect();
            return client::error_out("spillwayctl", "refused", 1, &format!("service {service} has no backend {n} (have: {})", have.join(", ")));
        }
    }
    if as_json {
        let rows: Vec<_> = list.iter().map(|b| serde_json::json!({ "config": b, "state": st(&b.name) })).collect();
        return json(&serde_json::json!({ "generation": gen, "service": service, "backends": rows }));
    }
    use crate::table::{Align::*, Table};
    let mut t = Table::new(&[
        ("backend", 12, Left), ("address", 16, Left), ("mac", 19, Left), ("zone", 6, Left), ("weight", 6, Right), ("prio", 4, Right),
        ("failover", 9, Left), ("state", 9, Left), ("new_conns", 10, Right), ("packets", 12, Right),
    ]);
    for b in &list {
        let s = st(&b.name);
        // the daemon's admin state: also false for a group whose endpoints are all disabled
        let enabled = b.enabled && s.as_ref().is_none_or(|s| s.enabled);
        let state = match (enabled, s.as_ref().is_none_or(|s| s.healthy), s.as_ref().is_some_and(|s| s.drained)) {
            (false, _, _) => "disabled",
            (true, _, true) => "DRAINED",
            (true, true, false) => "healthy",
            (true, false, false) => "UNHEALTHY",
        };
        let mac = b.mac.map(|m| m.to_string()).unwrap_or_default();
        // a group: its endpoint count (healthy/enabled) instead of one address
        let address = match &s {
            Some(s) if b.is_group() => format!("{}/{} endpoints", s.healthy_endpoints, s.endpoints),
            _ => b.address.to_string(),
        };
        t.row(vec![
            b.name.clone(), address, mac, b.zone.clone(), b.weight.to_string(), b.priority.to_string(), b.failover.to_string(), state.into(),
            s.as_ref().map_or(0, |s| s.new_connections).to_string(), s.as_ref().map_or(0, |s| s.packets).to_string(),
        ]);
    }
    let mut o = t.render("");
    if name.is_some() {
        let wrap = serde_json::json!({ "backends": list });
        let _ = write!(o, "\n{}", toml::to_string_pretty(&wrap).unwrap_or_default());
    }
    print!("{o}");
    0
}

//! `spillwayctl vip show|drain|undrain`: VIP readiness and operator drain (//! docs/bgp.md). `drain` withdraws the VIP's announcement (BIRD stops exporting it) while
//! the host keeps serving the flows that still arrive; `undrain` announces it again once
//! it is ready. The drain is held in the daemon's memory: a restart announces again.

use crate::client;
use clap::Subcommand;
use spillway_shared::proto::{Request, Response, VipRow};
use std::net::IpAddr;
use std::path::Path;

/// `vip ...`
#[derive(Subcommand, Debug)]
pub enum VipCmd {
    /// Readiness and announcement of every VIP.
    Show {
        /// Machine-readable JSON.
        #[arg(long)]
        json: bool,
    },
    /// Withdraw the VIP's announcement; existing flows keep being served.
    Drain {
        /// A configured VIP (IPv4 or IPv6).
        #[arg(value_name = "VIP", value_parser = parse_vip)]
        vip: IpAddr,
        /// Machine-readable JSON.
        #[arg(long)]
        json: bool,
        /// Change nothing: say what the drain would do.
        #[arg(long)]
        dry_run: bool,
    },
    /// Announce the VIP again (when ready).
    Undrain {
        /// A configured VIP (IPv4 or IPv6).
        #[arg(value_name = "VIP", value_parser = parse_vip)]
        vip: IpAddr,
        /// Machine-readable JSON.
        #[arg(long)]
        json: bool,
        /// Change nothing: say what the undrain would do.
        #[arg(long)]
        dry_run: bool,
    },
}

/// `VIP`: an IPv4 or IPv6 address.
fn parse_vip(s: &str) -> Result<IpAddr, String> {
    s.parse().map_err(|_| format!("VIP = '{s}': must be an IPv4 or IPv6 address like 192.0.2.10 or fd00::100"))
}

/// Runs a `vip` command; returns the exit code (0 ok, 1 refused, 2 no daemon).
pub fn run(socket: &Path, cmd: &VipCmd) -> i32 {
    let (req, json) = match cmd {
        VipCmd::Show { json } => (Request::VipShow, *json),
        VipCmd::Drain { vip, json, dry_run: true } => return crate::dryrun::request(socket, Request::VipDrain { vip: *vip }, *json),
        VipCmd::Undrain { vip, json, dry_run: true } => return crate::dryrun::request(socket, Request::VipUndrain { vip: *vip }, *json),
        VipCmd::Drain { vip, json, .. } => (Request::VipDrain { vip: *vip }, *json),
        VipCmd::Undrain { vip, json, .. } => (Request::VipUndrain { vip: *vip }, *json),
    };
    match client::request(socket, &req) {
        Ok(Response::Vips(rows)) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&rows).unwrap_or_default());
            } else {
                print!("{}", table(&rows));
            }
            0
        }
        Ok(r) => client::unexpected(&r),
        Err(e) => crate::client::fail_as(e, json),
    }
}

/// The text table of `vip show`.
pub fn table(rows: &[VipRow]) -> String {
    use crate::table::{Align::*, Table};
    let mut t = Table::new(&[("VIP", 16, Left), ("READY", 6, Left), ("DRAINED", 8, Left), ("ANNOUNCED", 10, Left), ("SERVICES / WHY NOT READY", 0, Free)]);
    for r in rows {
        let yn = |b: bool| if b { "yes" } else { "no" }.to_string();
        let mut tail = r.services.join(",");
        if !r.not_ready_because.is_empty() {
            tail = format!("{tail}: {}", r.not_ready_because.join("; "));
        }
        t.row(vec![r.vip.clone(), yn(r.ready), yn(r.drained), yn(r.announced), tail]);
    }
    let mut o = t.render("");
    if rows.is_empty() {
        // also the answer of a daemon with no services: not "yet" forever (fresh-user QA)
        o.push_str("(no VIP: the config has no services, or the daemon has not evaluated its VIPs yet)\n");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vip_argument_errors_name_the_value() {
        assert_eq!(parse_vip("10.0.0.1").unwrap(), IpAddr::from([10, 0, 0, 1]));
        assert_eq!(parse_vip("fd00::100").unwrap(), "fd00::100".parse::<IpAddr>().unwrap());
        let e = parse_vip("10.0.0.256").unwrap_err();
        assert!(e.contains("'10.0.0.256'") && e.contains("IPv4"), "{e}");
    }

    #[test]
    fn table_shows_why() {
        let rows = vec![VipRow {
            vip: "10.0.0.100".into(),
            services: vec!["web".into()],
            ready: false,
            drained: true,
            announced: false,
            not_ready_because: vec!["drained by the operator".into()],
        }];
        let t = table(&rows);
        assert!(t.lines().nth(1).unwrap().starts_with("10.0.0.100       no     yes      no         web: drained by the operator"), "{t}");
    }

    /// No rows: a daemon with no services answers so too, so the text does not promise
    /// VIPs that will never come ("no VIP evaluated yet", fresh-user QA).
    #[test]
    fn no_rows_do_not_promise_vips() {
        let t = table(&[]);
        assert!(t.ends_with("(no VIP: the config has no services, or the daemon has not evaluated its VIPs yet)\n"), "{t}");
    }
}

//! What the daemon prints on stdout: the `--check` report and the final counters at exit.

use super::preflight::Preflight;
use spillway_shared::config::Config;
use spillway_shared::proto::StatusReport;

/// `--check`: prints [`check`] on stdout. A reader that went away (`spillway --check |
/// head`) ends the process quietly by SIGPIPE, as `spillwayctl` does (exit status 141 in a
/// shell); any other write failure is an error.
pub fn check_to_stdout(pre: &Preflight) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    check(&mut out, &pre.path, &pre.cfg, &pre.warnings, &pre.avail).or_else(|e| stdout_failed(&e))
}

/// What `--check` prints after the checks passed: warnings, then what was checked and
/// what was not. `avail`: the host's usable cores.
pub fn check(out: &mut impl std::io::Write, path: &str, cfg: &Config, warnings: &[String], avail: &[usize]) -> std::io::Result<()> {
    for w in warnings {
        writeln!(out, "{path}: warning: {w}")?;
    }
    if let Some(sc) = &cfg.sync {
        if let Err(e) = sc.listen_addr().map_err(|e| e.to_string()).and_then(|a| std::net::UdpSocket::bind(a).map_err(|e| e.to_string())) {
            writeln!(out, "{path}: warning: sync.listen = {}: cannot bind now ({e}): another daemon holds it, or the address is not on this host", sc.listen)?;
        }
    }
    let workers = usize::from(cfg.dataplane.workers);
    if cfg.dataplane.worker_cores.is_empty() && workers >= avail.len().max(1) {
        writeln!(out, "{path}: warning: {workers} workers on {} usable cores: workers share cores with each other or the control thread", avail.len())?;
    }
    let count = |n: usize, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
    writeln!(out, "{path}: configuration OK ({}, {})", count(cfg.services.len(), "service"), count(cfg.ports.len(), "port"))?;
    writeln!(out, "  checked: syntax, every range and cross-reference, backend MACs/addresses, port device arguments (key=value, iface= etc. a driver needs), that the kernel interfaces af_packet/af_xdp/pcap devices name exist, socket_group, worker_cores on this host, the [sync] key file (mode, length) and whether sync.listen can be bound now")?;
    writeln!(out, "  not checked without starting DPDK: that the devices exist and start (beyond those kernel interfaces), that they take the port MTU (RX scatter or mbufs sized for it), hugepage memory for the mbuf pools, queue and descriptor counts the NIC supports, whether the control socket can be bound (only its path is checked)")?;
    out.flush()
}

/// A failed write of one-shot output to stdout. When its reader went away (`spillway
/// --check | head`) the process ends quietly the way `spillwayctl` does, by SIGPIPE
/// (exit status 141 in a shell); any other failure is an error.
fn stdout_failed(e: &std::io::Error) -> Result<(), String> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        // SAFETY: signal(2) and raise(3) with valid arguments: SIGPIPE's default action
        // (end the process) restored, then raised; nothing runs after it but the exit.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
        }
        std::process::exit(141);
    }
    Err(format!("cannot write to stdout: {e}"))
}

/// The final counters on stdout after the workers stopped: totals, drops by reason,
/// backends, ports, then the whole report as one `final_status_json {...}` line (tests
/// read it).
pub fn final_counters(r: &StatusReport) {
    use std::fmt::Write as _;
    // One write, errors ignored: stdout may be a closed terminal (SIGHUP is ignored, so the
    // daemon outlives it) and `println!` would panic, which aborts before the ports stop.
    let (t, mut o) = (&r.total, String::new());
    let _ = writeln!(o, "spillway: final counters after {:.1} s\n  rx {}  tx {}  forwarded {}  new_connections {}  arp_replies {}  dropped {}", r.uptime_sec, t.rx, t.tx, t.forwarded, t.new_connections, t.arp_replies, t.dropped());
    for (name, n) in t.drops.iter().filter(|d| d.1 > 0) {
        let _ = writeln!(o, "  drop {name}: {n}");
    }
    for b in &r.backends {
        let _ = writeln!(o, "  backend {}/{}: new_connections {} packets {}", b.service, b.backend, b.new_connections, b.packets);
    }
    for p in &r.ports {
        let _ = writeln!(o, "  port {}: ipackets {} opackets {} imissed {} mbufs_in_use {}", p.name, p.ipackets, p.opackets, p.imissed, p.mbufs_in_use);
    }
    if let Ok(j) = serde_json::to_string(r) {
        let _ = writeln!(o, "final_status_json {j}");
    }
    let _ = std::io::Write::write_all(&mut std::io::stdout(), o.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_report_counts_and_warns_about_shared_cores() {
        let cfg = Config::from_toml("[dataplane]\nworkers = 2\n[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\n").unwrap();
        let mut out = Vec::new();
        check(&mut out, "x.toml", &cfg, &["w1".to_string()], &[0, 1]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[..3], ["x.toml: warning: w1", "x.toml: warning: 2 workers on 2 usable cores: workers share cores with each other or the control thread", "x.toml: configuration OK (0 services, 1 port)"]);
        assert!(lines[3].starts_with("  checked: ") && lines[4].starts_with("  not checked without starting DPDK: "), "{text}");
    }
}

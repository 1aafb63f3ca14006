//! `spillwayctl top`: a live view of the daemon, refreshed every `--interval` seconds (like
//! `ipvsadm --rate` or `top`): per service and backend new connections/s, packets/s,
//! bits/s and health; per worker the share of busy polls (polls that received packets)
//! and received packets/s; per port received/sent packets/s and `imissed`/s (frames the
//! NIC dropped for want of descriptors: a port counter, DPDK has no per-queue one); drops/s
//! by reason. Drops are counted per worker and reason, not per backend: most drops happen
//! before a backend is chosen (docs/semantics.md "Drop reasons").
//!
//! Rates are differences of two `status` reads divided by the daemon's own uptime
//! difference. Keys: `q`/Esc/Ctrl-C quit, `s` next sort key, `r` reverse, `/` filter (type,
//! Enter), `c` clear the filter. `--once` prints one sample as text (`--json`: as JSON)
//! and exits.

use crate::client;
use clap::{Args, ValueEnum};
use serde::Serialize;
use spillway_shared::proto::{Request, Response, StatusReport};
use std::fmt::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// `top` options.
#[derive(Args, Debug, Clone)]
pub struct TopArgs {
    /// Print one sample (two reads `--interval` apart) and exit.
    #[arg(long)]
    pub once: bool,
    /// One sample as JSON (implies --once).
    #[arg(long)]
    pub json: bool,
    /// Seconds between refreshes (0.2 to 60).
    #[arg(long, default_value_t = 1.0, value_parser = parse_interval)]
    pub interval: f64,
    /// Sort backends by this key (descending; `name` ascending).
    #[arg(long, value_enum, default_value_t = SortKey::Conns)]
    pub sort: SortKey,
    /// Only backends whose `service/backend` contains TEXT.
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.2..=60.0).contains(&v) => Ok(v),
        _ => Err(format!("--interval {s}: must be a number of seconds in [0.2, 60]")),
    }
}

/// Sort keys of the backend table.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SortKey {
    /// New connections per second.
    Conns,
    /// Packets per second.
    Pps,
    /// Bits per second.
    Bps,
    /// Service/backend name.
    Name,
}

impl SortKey {
    fn next(self) -> SortKey {
        match self {
            SortKey::Conns => SortKey::Pps,
            SortKey::Pps => SortKey::Bps,
            SortKey::Bps => SortKey::Name,
            SortKey::Name => SortKey::Conns,
        }
    }
    fn label(self) -> &'static str {
        match self {
            SortKey::Conns => "conns/s",
            SortKey::Pps => "pkts/s",
            SortKey::Bps => "bits/s",
            SortKey::Name => "name",
        }
    }
}

/// One backend's rates.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BackendRate {
    /// Service name.
    pub service: String,
    /// Backend name.
    pub backend: String,
    /// `healthy`, `UNHEALTHY` (`h/n` endpoints for a group), `disabled` or `DRAINED`.
    pub health: String,
    /// New connections per second.
    pub new_conns_per_sec: f64,
    /// Packets forwarded to it per second.
    pub packets_per_sec: f64,
    /// Bits forwarded to it per second (frames as received, before encapsulation).
    pub bits_per_sec: f64,
}

/// One service's rates: the sums of its backends' (all of them, whatever the filter).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServiceRate {
    /// Service name.
    pub service: String,
    /// Backends of the service.
    pub backends: usize,
    /// Of those, backends that take new connections: enabled, not drained, healthy (a
    /// group: enough of its endpoints healthy).
    pub healthy_backends: usize,
    /// New connections per second.
    pub new_conns_per_sec: f64,
    /// Packets forwarded per second.
    pub packets_per_sec: f64,
    /// Bits forwarded per second (frames as received, before encapsulation).
    pub bits_per_sec: f64,
}

/// One worker's load.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WorkerRate {
    /// Worker index.
    pub worker: usize,
    /// Share of polls that received packets (0.0–1.0).
    pub busy_share: f64,
    /// Frames received per second.
    pub rx_per_sec: f64,
    /// Frames dropped per second (all reasons).
    pub drops_per_sec: f64,
}

/// One port's rates.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PortRate {
    /// Port name.
    pub port: String,
    /// Packets received per second.
    pub rx_per_sec: f64,
    /// Packets sent per second.
    pub tx_per_sec: f64,
    /// Frames the NIC dropped for want of RX descriptors, per second.
    pub imissed_per_sec: f64,
    /// RX mbuf allocation failures per second.
    pub rx_nombuf_per_sec: f64,
}

/// One sample: rates over `interval_sec`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Sample {
    /// Seconds between the two reads (the daemon's uptime difference).
    pub interval_sec: f64,
    /// Snapshot generation at the second read.
    pub snapshot_generation: u64,
    /// Backends, sorted by the sort key, filtered.
    pub backends: Vec<BackendRate>,
    /// Services with at least one backend that passes the filter (all without one), each
    /// with the sums of all its backends (unfiltered).
    pub services: Vec<ServiceRate>,
    /// Workers.
    pub workers: Vec<WorkerRate>,
    /// Ports.
    pub ports: Vec<PortRate>,
    /// Drops per second by reason, reasons with a non-zero rate, largest first.
    pub drops_per_sec: Vec<(String, f64)>,
}

fn rate(a: u64, b: u64, dt: f64) -> f64 {
    b.saturating_sub(a) as f64 / dt
}

/// The rates between two status reads; `sort` and `filter` order and select backends.
pub fn sample(prev: &StatusReport, cur: &StatusReport, sort: SortKey, reverse: bool, filter: &str) -> Sample {
    let dt = (cur.uptime_sec - prev.uptime_sec).max(1e-3);
    let mut backends: Vec<BackendRate> = cur
        .backends
        .iter()
        .map(|b| {
            let p = prev.backends.iter().find(|x| x.service == b.service && x.backend == b.backend);
            let (n0, p0, y0) = p.map_or((b.new_connections, b.packets, b.bytes), |p| (p.new_connections, p.packets, p.bytes));
            let health = if !b.enabled {
                "disabled".to_string()
            } else if b.drained {
                "DRAINED".to_string()
            } else if b.members.len() > 1 {
                let h = format!("{}/{}", b.healthy_endpoints, b.endpoints);
                if b.healthy { h } else { format!("UNHEALTHY {h}") }
            } else if b.healthy {
                "healthy".to_string()
            } else {
                "UNHEALTHY".to_string()
            };
            BackendRate {
                service: b.service.clone(),
                backend: b.backend.clone(),
                health,
                new_conns_per_sec: rate(n0, b.new_connections, dt),
                packets_per_sec: rate(p0, b.packets, dt),
                bits_per_sec: rate(y0, b.bytes, dt) * 8.0,
            }
        })
        .collect();
    let mut services: Vec<ServiceRate> = Vec::new();
    // (`backends` is still in `cur.backends`' order: it is filtered and sorted below)
    for (st, b) in cur.backends.iter().zip(&backends) {
        let i = match services.iter().position(|s| s.service == b.service) {
            Some(i) => i,
            None => {
                services.push(ServiceRate { service: b.service.clone(), backends: 0, healthy_backends: 0, new_conns_per_sec: 0.0, packets_per_sec: 0.0, bits_per_sec: 0.0 });
                services.len() - 1
            }
        };
        let s = &mut services[i];
        s.backends += 1;
        s.healthy_backends += usize::from(st.enabled && !st.drained && st.healthy);
        s.new_conns_per_sec += b.new_conns_per_sec;
        s.packets_per_sec += b.packets_per_sec;
        s.bits_per_sec += b.bits_per_sec;
    }
    backends.retain(|b| format!("{}/{}", b.service, b.backend).contains(filter));
    // A service's `(all)` row only with a backend of it shown (fresh-user QA: `--filter zzz`
    // still listed every service); its sums stay over all its backends.
    services.retain(|s| backends.iter().any(|b| b.service == s.service));
    let key = |b: &BackendRate| match sort {
        SortKey::Conns => b.new_conns_per_sec,
        SortKey::Pps => b.packets_per_sec,
        SortKey::Bps => b.bits_per_sec,
        SortKey::Name => 0.0,
    };
    backends.sort_by(|x, y| {
        let o = if sort == SortKey::Name {
            (&x.service, &x.backend).cmp(&(&y.service, &y.backend))
        } else {
            key(y).total_cmp(&key(x)).then((&x.service, &x.backend).cmp(&(&y.service, &y.backend)))
        };
        if reverse { o.reverse() } else { o }
    });
    let workers = cur
        .workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let p = prev.workers.get(i).cloned().unwrap_or_else(|| w.clone());
            let polls = w.polls.saturating_sub(p.polls);
            let idle = w.idle_polls.saturating_sub(p.idle_polls).min(polls);
            WorkerRate {
                worker: i,
                busy_share: if polls == 0 { 0.0 } else { (polls - idle) as f64 / polls as f64 },
                rx_per_sec: rate(p.rx, w.rx, dt),
                drops_per_sec: rate(p.dropped(), w.dropped(), dt),
            }
        })
        .collect();
    let ports = cur
        .ports
        .iter()
        .map(|q| {
            let p = prev.ports.iter().find(|x| x.name == q.name).unwrap_or(q);
            PortRate {
                port: q.name.clone(),
                rx_per_sec: rate(p.ipackets, q.ipackets, dt),
                tx_per_sec: rate(p.opackets, q.opackets, dt),
                imissed_per_sec: rate(p.imissed, q.imissed, dt),
                rx_nombuf_per_sec: rate(p.rx_nombuf, q.rx_nombuf, dt),
            }
        })
        .collect();
    let mut drops: Vec<(String, f64)> = cur
        .total
        .drops
        .iter()
        .map(|(k, v)| (k.clone(), rate(prev.total.drops.iter().find(|d| &d.0 == k).map_or(*v, |d| d.1), *v, dt)))
        .filter(|d| d.1 > 0.0)
        .collect();
    drops.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    Sample { interval_sec: dt, snapshot_generation: cur.generation, backends, services, workers, ports, drops_per_sec: drops }
}

/// A rate with an SI suffix (`1.2k`, `3.4M`, `5.6G`).
pub fn si(v: f64) -> String {
    let (d, s) = if v >= 1e9 { (1e9, "G") } else if v >= 1e6 { (1e6, "M") } else if v >= 1e3 { (1e3, "k") } else { (1.0, "") };
    if s.is_empty() { format!("{v:.0}") } else { format!("{:.1}{s}", v / d) }
}

/// The text of a sample (the `--once` output and the body of the live view).
pub fn render(s: &Sample, sort: SortKey, reverse: bool, filter: &str) -> String {
    let mut o = String::new();
    let flt = if filter.is_empty() { String::new() } else { format!(", filter \"{filter}\"") };
    let _ = writeln!(o, "spillway top: rates over {:.1} s, snapshot generation {}, sorted by {}{}{flt}", s.interval_sec, s.snapshot_generation, sort.label(), if reverse { " (reversed)" } else { "" });
    // columns as wide as their widest name (63-character names keep the rates in line)
    use crate::table::{Align::*, Table};
    let mut t = Table::new(&[("SERVICE", 14, Left), ("BACKEND", 14, Left), ("HEALTH", 16, Left), ("CONNS/S", 9, Right), ("PKTS/S", 9, Right), ("BITS/S", 9, Right)]);
    for b in &s.backends {
        t.row(vec![b.service.clone(), b.backend.clone(), b.health.clone(), si(b.new_conns_per_sec), si(b.packets_per_sec), si(b.bits_per_sec)]);
    }
    for v in &s.services {
        // what it counts: backends taking new connections (enabled, not drained, healthy)
        let health = format!("{}/{} serving", v.healthy_backends, v.backends);
        t.row(vec![v.service.clone(), "(all)".into(), health, si(v.new_conns_per_sec), si(v.packets_per_sec), si(v.bits_per_sec)]);
    }
    o += &t.render("");
    let _ = writeln!(o, "{:<8} {:>6} {:>9} {:>9}", "WORKER", "BUSY", "RX/S", "DROPS/S");
    for w in &s.workers {
        let _ = writeln!(o, "{:<8} {:>5.1}% {:>9} {:>9}", w.worker, w.busy_share * 100.0, si(w.rx_per_sec), si(w.drops_per_sec));
    }
    let _ = writeln!(o, "{:<10} {:>9} {:>9} {:>10} {:>12}", "PORT", "RX/S", "TX/S", "IMISSED/S", "RX_NOMBUF/S");
    for p in &s.ports {
        let _ = writeln!(o, "{:<10} {:>9} {:>9} {:>10} {:>12}", p.port, si(p.rx_per_sec), si(p.tx_per_sec), si(p.imissed_per_sec), si(p.rx_nombuf_per_sec));
    }
    if s.drops_per_sec.is_empty() {
        let _ = writeln!(o, "DROPS/S  none");
    } else {
        let _ = writeln!(o, "DROPS/S  {}", s.drops_per_sec.iter().map(|(k, v)| format!("{k} {}", si(*v))).collect::<Vec<_>>().join(", "));
    }
    o
}

fn status(socket: &Path) -> Result<StatusReport, i32> {
    match client::request(socket, &Request::Status) {
        Ok(Response::Status(s)) => Ok(s),
        Ok(r) => Err(client::unexpected(&r)),
        Err(e) => Err(client::fail(e)),
    }
}

/// Runs `top`; returns the exit code (0, or 2 when the daemon cannot be reached).
pub fn run(socket: &Path, args: &TopArgs) -> i32 {
    let interval = Duration::from_secs_f64(args.interval);
    let filter = args.filter.clone().unwrap_or_default();
    let mut prev = match status(socket) {
        Ok(s) => s,
        Err(c) => return c,
    };
    if args.once || args.json {
        std::thread::sleep(interval);
        let cur = match status(socket) {
            Ok(s) => s,
            Err(c) => return c,
        };
        let s = sample(&prev, &cur, args.sort, false, &filter);
        if args.json {
            println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default());
        } else {
            print!("{}", render(&s, args.sort, false, &filter));
        }
        return 0;
    }
    {
        use std::io::IsTerminal;
        if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
            eprintln!("spillwayctl top: the live view needs a terminal (stdin and stdout); from a script, cron or a pipe use `top --once` (one sample as text) or `top --once --json`");
            return 2;
        }
    }
    let mut ui = Ui { sort: args.sort, reverse: false, filter, editing: None, text: "waiting for the first sample...".into() };
    let mut terminal = ratatui::init();
    let mut next = Instant::now() + interval;
    let code = loop {
        if terminal.draw(|f| ui.draw(f)).is_err() {
            break 2;
        }
        let wait = next.saturating_duration_since(Instant::now());
        match crossterm::event::poll(wait) {
            Ok(true) => {
                if let Ok(crossterm::event::Event::Key(k)) = crossterm::event::read() {
                    if k.kind == crossterm::event::KeyEventKind::Press && ui.key_event(k) {
                        break 0;
                    }
                }
                continue;
            }
            Ok(false) => {}
            Err(_) => break 2,
        }
        next = Instant::now() + interval;
        match client::request(socket, &Request::Status) {
            Ok(Response::Status(cur)) => {
                ui.text = render(&sample(&prev, &cur, ui.sort, ui.reverse, &ui.filter), ui.sort, ui.reverse, &ui.filter);
                prev = cur;
            }
            Ok(r) => ui.text = format!("unexpected response from the daemon: {r:?}"),
            Err(e) => ui.text = format!("spillwayctl: {e} (retrying every {:.1} s)", args.interval),
        }
    };
    ratatui::restore();
    code
}

/// State of the live view.
struct Ui {
    sort: SortKey,
    reverse: bool,
    filter: String,
    /// The filter being typed after `/`.
    editing: Option<String>,
    text: String,
}

impl Ui {
    /// Handles a key press with its modifiers; returns whether to quit. Ctrl-C quits, also
    /// while a filter is typed: in the raw mode of the live view it arrives as a key, not as
    /// SIGINT (fresh-user QA: it cleared the filter, or typed `c` into it, and top went on).
    fn key_event(&mut self, k: crossterm::event::KeyEvent) -> bool {
        use crossterm::event::{KeyCode as K, KeyModifiers as M};
        if k.modifiers.contains(M::CONTROL) {
            return matches!(k.code, K::Char('c') | K::Char('C') | K::Char('d'));
        }
        self.key(k.code)
    }

    /// Handles a key; returns whether to quit.
    fn key(&mut self, code: crossterm::event::KeyCode) -> bool {
        use crossterm::event::KeyCode as K;
        if let Some(e) = &mut self.editing {
            match code {
                K::Enter => {
                    self.filter = std::mem::take(e);
                    self.editing = None;
                }
                K::Esc => self.editing = None,
                K::Backspace => {
                    e.pop();
                }
                K::Char(c) => e.push(c),
                _ => {}
            }
            return false;
        }
        match code {
            K::Char('q') | K::Esc => return true,
            K::Char('s') => self.sort = self.sort.next(),
            K::Char('r') => self.reverse = !self.reverse,
            K::Char('/') => self.editing = Some(String::new()),
            K::Char('c') => self.filter.clear(),
            _ => {}
        }
        false
    }

    fn draw(&self, f: &mut ratatui::Frame) {
        use ratatui::layout::{Constraint, Layout};
        use ratatui::style::{Modifier, Style};
        use ratatui::widgets::Paragraph;
        let [body, help] = Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(f.area());
        f.render_widget(Paragraph::new(self.text.as_str()), body);
        let line = match &self.editing {
            Some(e) => format!("filter: {e}_   (Enter apply, Esc cancel)"),
            None => format!("q quit  s sort ({})  r reverse  / filter  c clear filter", self.sort.label()),
        };
        f.render_widget(Paragraph::new(line).style(Style::default().add_modifier(Modifier::REVERSED)), help);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_shared::proto::{BackendStatus, Counters, PortStatus};

    fn report(t: f64, conns: &[(&str, u64, u64, u64)], polls: u64, idle: u64, imissed: u64, drops: u64) -> StatusReport {
        StatusReport {
            uptime_sec: t,
            backends: conns
                .iter()
                .map(|(b, n, p, y)| BackendStatus { service: "web".into(), backend: b.to_string(), healthy: true, enabled: true, new_connections: *n, packets: *p, bytes: *y, ..Default::default() })
                .collect(),
            workers: vec![Counters { polls, idle_polls: idle, rx: polls * 3, drops: vec![("not_for_vip".into(), drops)], ..Default::default() }],
            total: Counters { drops: vec![("not_for_vip".into(), drops)], ..Default::default() },
            ports: vec![PortStatus { name: "p0".into(), imissed, ..Default::default() }],
            ..Default::default()
        }
    }

    #[test]
    fn rates_are_differences_over_the_daemon_clock() {
        let a = report(10.0, &[("b1", 100, 1000, 64_000), ("b2", 5, 50, 0)], 1000, 900, 7, 10);
        let b = report(12.0, &[("b1", 300, 3000, 64_000 + 250_000), ("b2", 5, 50, 0)], 3000, 1900, 27, 30);
        let s = sample(&a, &b, SortKey::Conns, false, "");
        assert_eq!(s.interval_sec, 2.0);
        assert_eq!(s.backends[0].backend, "b1");
        assert_eq!((s.backends[0].new_conns_per_sec, s.backends[0].packets_per_sec, s.backends[0].bits_per_sec), (100.0, 1000.0, 1_000_000.0));
        assert_eq!(s.services[0].new_conns_per_sec, 100.0);
        assert_eq!((s.services[0].service.as_str(), s.services[0].backends, s.services[0].healthy_backends), ("web", 2, 2));
        let json = serde_json::to_value(&s.services[0]).unwrap();
        assert!(json.get("backend").is_none() && json["healthy_backends"] == 2, "{json}");
        assert!(render(&s, SortKey::Conns, false, "").contains("2/2 serving"));
        // 2000 polls, 1000 idle: half busy
        assert_eq!(s.workers[0].busy_share, 0.5);
        assert_eq!(s.ports[0].imissed_per_sec, 10.0);
        assert_eq!(s.drops_per_sec, vec![("not_for_vip".to_string(), 10.0)]);
        let s = sample(&a, &b, SortKey::Conns, true, "");
        assert_eq!(s.backends[0].backend, "b2", "reversed");
        let s = sample(&a, &b, SortKey::Name, false, "b2");
        assert_eq!(s.backends.iter().map(|b| b.backend.as_str()).collect::<Vec<_>>(), vec!["b2"], "filtered");
        let t = render(&s, SortKey::Name, false, "b2");
        assert!(t.contains("filter \"b2\"") && t.contains("not_for_vip 10"), "{t}");
        // the service row of a matching backend still sums all the service's backends
        assert_eq!((s.services.len(), s.services[0].backends, s.services[0].new_conns_per_sec), (1, 2, 100.0));
        // a filter no backend matches shows no service row either
        let s = sample(&a, &b, SortKey::Name, false, "zzz");
        assert!(s.backends.is_empty() && s.services.is_empty(), "{s:?}");
        assert!(!render(&s, SortKey::Name, false, "zzz").contains("(all)"));
        // of two services, only the one with a matching backend
        let dns = BackendStatus { service: "dns".into(), backend: "d1".into(), healthy: true, enabled: true, ..Default::default() };
        let (mut a2, mut b2) = (a.clone(), b.clone());
        a2.backends.push(dns.clone());
        b2.backends.push(dns);
        let names = |f: &str| sample(&a2, &b2, SortKey::Name, false, f).services.iter().map(|s| s.service.clone()).collect::<Vec<_>>();
        assert_eq!((names(""), names("web/"), names("d1")), (vec!["web".to_string(), "dns".into()], vec!["web".into()], vec!["dns".into()]));
    }

    /// A 63-character service or backend name widens its column: every rate still starts
    /// under its header (fresh-user QA: long names pushed the rates out of line), and
    /// short names keep the usual layout.
    #[test]
    fn long_names_keep_the_rates_in_line() {
        let long = "a-backend-with-a-long-name-abcdefghijklmnopqrstuvwxyz0123456789";
        let a = report(10.0, &[(long, 0, 0, 0), ("b2", 0, 0, 0)], 10, 0, 0, 0);
        let b = report(11.0, &[(long, 7, 0, 0), ("b2", 0, 0, 0)], 20, 0, 0, 0);
        let t = render(&sample(&a, &b, SortKey::Conns, false, ""), SortKey::Conns, false, "");
        let lines: Vec<&str> = t.lines().skip(1).take(4).collect();
        let end = lines[0].find("CONNS/S").unwrap() + "CONNS/S".len();
        for l in &lines[1..] {
            assert_eq!(l.len(), lines[0].len(), "{t}");
            assert!(l[..end].ends_with(|c: char| c.is_ascii_digit()), "CONNS/S not under its header:\n{t}");
        }
        let short = render(&sample(&report(10.0, &[("b2", 0, 0, 0)], 10, 0, 0, 0), &report(11.0, &[("b2", 0, 0, 0)], 20, 0, 0, 0), SortKey::Conns, false, ""), SortKey::Conns, false, "");
        assert!(short.contains("\nSERVICE        BACKEND        HEALTH             CONNS/S    PKTS/S    BITS/S\nweb            b2             healthy                  0         0         0\n"), "{short}");
    }

    #[test]
    fn a_counter_that_restarts_is_no_negative_rate() {
        let a = report(10.0, &[("b1", 100, 1000, 0)], 10, 0, 0, 0);
        let b = report(11.0, &[("b1", 3, 10, 0)], 20, 0, 0, 0);
        assert_eq!(sample(&a, &b, SortKey::Conns, false, "").backends[0].new_conns_per_sec, 0.0);
    }

    /// Ctrl-C (and Ctrl-D) quit, also while a filter is typed; they neither clear the filter
    /// nor type into it, and another control key does nothing.
    #[test]
    fn ctrl_c_quits() {
        use crossterm::event::{KeyCode as K, KeyEvent, KeyModifiers as M};
        let mut ui = Ui { sort: SortKey::Conns, reverse: false, filter: "web".into(), editing: None, text: String::new() };
        assert!(!ui.key_event(KeyEvent::new(K::Char('l'), M::CONTROL)));
        assert_eq!(ui.filter, "web", "a control key is no command");
        assert!(ui.key_event(KeyEvent::new(K::Char('c'), M::CONTROL)));
        assert_eq!(ui.filter, "web");
        ui.editing = Some("b".into());
        assert!(ui.key_event(KeyEvent::new(K::Char('c'), M::CONTROL)));
        assert_eq!(ui.editing.as_deref(), Some("b"));
        assert!(ui.key_event(KeyEvent::new(K::Char('d'), M::CONTROL)));
        assert!(!ui.key_event(KeyEvent::new(K::Char('c'), M::NONE)), "a plain c clears the filter");
    }

    #[test]
    fn keys_sort_reverse_filter_and_quit() {
        use crossterm::event::KeyCode as K;
        let mut ui = Ui { sort: SortKey::Conns, reverse: false, filter: String::new(), editing: None, text: String::new() };
        assert!(!ui.key(K::Char('s')));
        assert_eq!(ui.sort, SortKey::Pps);
        ui.key(K::Char('r'));
        assert!(ui.reverse);
        for k in [K::Char('/'), K::Char('b'), K::Char('x'), K::Backspace, K::Char('1'), K::Enter] {
            assert!(!ui.key(k));
        }
        assert_eq!(ui.filter, "b1");
        ui.key(K::Char('c'));
        assert_eq!(ui.filter, "");
        assert!(ui.key(K::Char('q')));
    }
}

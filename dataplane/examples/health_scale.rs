//! Health checker scale bench: N targets (default 10,000) at a 1 s interval against local
//! listeners on 127.0.0.1, for a given time (default 20 s). Prints the probe rate achieved
//! and the checker thread's CPU use.
//!
//! `cargo run --release -p spillway-dataplane --example health_scale -- [tcp|udp|http] [targets] [secs] [listeners]`

use spillway_dataplane::health::{HealthCheck, HealthCheckKind, HealthChecker, Target};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, UdpSocket};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn v4(a: SocketAddr) -> SocketAddrV4 {
    match a {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(_) => unreachable!(),
    }
}

/// Non-blocking TCP listeners served by one thread: accept, (answer HTTP,) close.
fn tcp_listeners(n: usize, http: bool) -> Vec<SocketAddrV4> {
    let ls: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let addrs = ls.iter().map(|l| v4(l.local_addr().unwrap())).collect();
    for l in &ls {
        l.set_nonblocking(true).unwrap();
    }
    std::thread::spawn(move || loop {
        let mut any = false;
        for l in &ls {
            loop {
                match l.accept() {
                    Ok((mut c, _)) => {
                        any = true;
                        if http {
                            c.set_nonblocking(false).unwrap();
                            c.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
                            let mut b = [0u8; 512];
                            let _ = c.read(&mut b);
                            let _ = c.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => break,
                }
            }
        }
        if !any {
            std::thread::sleep(Duration::from_micros(500));
        }
    });
    addrs
}

/// UDP echo sockets, one blocking thread each.
fn udp_echo(n: usize) -> Vec<SocketAddrV4> {
    (0..n)
        .map(|_| {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            let a = v4(s.local_addr().unwrap());
            std::thread::spawn(move || {
                let mut b = [0u8; 1500];
                while let Ok((len, from)) = s.recv_from(&mut b) {
                    let _ = s.send_to(&b[..len], from);
                }
            });
            a
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = args.first().map(String::as_str).unwrap_or("tcp").to_owned();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let secs: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20.0);
    let nl: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(20);
    let nofile = spillway_dataplane::health::raise_nofile_limit().expect("RLIMIT_NOFILE");

    let (k, addrs) = match kind.as_str() {
        "tcp" => (HealthCheckKind::Tcp, tcp_listeners(nl, false)),
        "http" => (HealthCheckKind::Http, tcp_listeners(nl, true)),
        "udp" => (HealthCheckKind::Udp, udp_echo(nl)),
        other => panic!("kind must be tcp, udp or http, not {other}"),
    };
    let check = HealthCheck {
        kind: k,
        check_interval_sec: 1.0,
        timeout_sec: 1.0,
        udp_request: (k == HealthCheckKind::Udp).then(|| "ping".into()),
        udp_expect: (k == HealthCheckKind::Udp).then(|| "ping".into()),
        ..HealthCheck::default()
    };
    let targets: Vec<Target> = (0..n)
        .map(|i| Target {
            service: format!("svc{}", i / 100),
            backend: format!("be{i}"),
            endpoint: format!("be{i}"),
            addr: addrs[i % addrs.len()].into(),
            check: check.clone(),
        })
        .collect();
    println!("health_scale: kind={kind} targets={n} interval=1s listeners={nl} duration={secs}s RLIMIT_NOFILE={nofile}");

    let (tx, rx) = mpsc::channel();
    let c = HealthChecker::start(targets, tx).expect("start");
    // Warm-up: first probes are spread over one interval.
    std::thread::sleep(Duration::from_secs(2));
    let probes = |c: &HealthChecker| {
        let s = c.snapshot();
        (s.iter().map(|t| t.probes_sent).sum::<u64>(), s.iter().map(|t| t.probes_failed).sum::<u64>(), s)
    };
    let (p0, f0, _) = probes(&c);
    let cpu0 = c.cpu_time().unwrap_or_default();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (p1, f1, snap) = probes(&c);
    let cpu1 = c.cpu_time().unwrap_or_default();
    let el = t0.elapsed().as_secs_f64();
    let rate = (p1 - p0) as f64 / el;
    let cpu = (cpu1 - cpu0).as_secs_f64();
    let healthy = snap.iter().filter(|s| s.healthy).count();
    let mut rtts: Vec<f64> = snap.iter().filter_map(|s| s.rtt_ewma_ms).collect();
    rtts.sort_by(f64::total_cmp);
    let pct = |q: f64| rtts.get(((rtts.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(f64::NAN);
    let events: Vec<_> = rx.try_iter().collect();
    println!(
        "probes: {} in {el:.1} s = {rate:.0} probes/s (ideal {n}/s, {:.1} %); failed {}",
        p1 - p0,
        100.0 * rate / n as f64,
        f1 - f0
    );
    println!(
        "checker thread CPU: {cpu:.2} s over {el:.1} s = {:.1} % of one core ({:.2} us/probe)",
        100.0 * cpu / el,
        1e6 * cpu / (p1 - p0).max(1) as f64
    );
    println!(
        "healthy {healthy}/{n}; state-change events {}; RTT EWMA ms p50 {:.3} p99 {:.3} max {:.3}",
        events.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    c.stop();
}

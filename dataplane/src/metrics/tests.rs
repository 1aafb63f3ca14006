//! Tests of the metrics endpoint (`metrics.rs`, `metrics/http.rs`).
use super::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use std::sync::Arc;

fn get(addr: SocketAddr, request: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    s
}

#[test]
fn serves_metrics_and_refuses_the_rest() {
    let l = bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let t = std::thread::spawn(move || serve(l, &s2, || "spillway_x 1\n# EOF\n".to_string()));
    let r = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains("Content-Type: application/openmetrics-text"), "{r}");
    assert!(r.ends_with("\r\n\r\nspillway_x 1\n# EOF\n"), "{r}");
    // One request per connection.
    assert!(r.contains("\r\nConnection: close\r\n") && r.contains("\r\nContent-Length: 19\r\n"), "{r}");
    let r = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
    assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
    assert!(r.ends_with("\r\n\r\nspillway_x 1\n"), "{r}");
    assert!(get(addr, "GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    let r = get(addr, "POST /metrics HTTP/1.1\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 405") && r.contains("\r\nAllow: GET, HEAD\r\n"), "{r}");
    // HEAD: GET's status and headers (its Content-Length), no content (RFC 9110 §9.3.2).
    let r = get(addr, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.contains("Content-Length: 13\r\n") && r.ends_with("\r\n\r\n"), "{r}");
    assert!(get(addr, "HEAD /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(get(addr, "\x01\x02 garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
    // Request heads are bounded: over 8 KiB, or over 32 header fields, get 431.
    let r = get(addr, &format!("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n", "a".repeat(9000)));
    assert!(r.starts_with("HTTP/1.1 431"), "{r}");
    let r = get(addr, &format!("GET /metrics HTTP/1.1\r\n{}\r\n", "X-A: b\r\n".repeat(33)));
    assert!(r.starts_with("HTTP/1.1 431"), "{r}");
    // A client that sends half a request and goes away does not stop the server.
    drop(TcpStream::connect(addr).unwrap());
    // hyper answers an HTTP/1.0 request in HTTP/1.0 (the hand-written server said 1.1).
    assert!(get(addr, "GET /metrics?x=1 HTTP/1.0\r\n\r\n").starts_with("HTTP/1.0 200"));
    stop.store(true, Ordering::SeqCst);
    assert_eq!(t.join().unwrap(), Served::default(), "nothing refused, closed to make room or timed out");
}

#[test]
fn prometheus_text_names_counters_by_their_samples() {
    let om = "# HELP spillway_drops Frames dropped.\n# TYPE spillway_drops counter\nspillway_drops_total{reason=\"x\"} 3\n# HELP spillway_up Up.\n# TYPE spillway_up gauge\n# UNIT spillway_up seconds\nspillway_up 1.0\n# EOF\n";
    assert_eq!(
        to_prometheus_text(om),
        "# HELP spillway_drops_total Frames dropped.\n# TYPE spillway_drops_total counter\nspillway_drops_total{reason=\"x\"} 3\n# HELP spillway_up Up.\n# TYPE spillway_up gauge\nspillway_up 1.0\n"
    );
}

fn daemon() -> crate::daemon::Daemon {
    let text = r#"
[[ports]]
name = "p0"
device = "net_null0"
address = "10.0.0.1"
[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
[[services.backends]]
name = "g1"
[[services.backends.endpoints]]
name = "e1"
address = "10.0.0.11"
mac = "02:00:00:00:00:11"
[[services.backends.endpoints]]
name = "e2"
address = "10.0.0.12"
mac = "02:00:00:00:00:12"
[[services.backends]]
name = "b2"
address = "10.0.0.13"
"#;
    let cfg = spillway_shared::config::Config::from_toml(text).unwrap();
    cfg.validate().unwrap();
    crate::daemon::Daemon::new(cfg, 2, vec![0x0a00_0001], Box::new(|_| Default::default())).unwrap()
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The slots of `web`'s endpoints e1 and e2 in [`daemon`].
fn slots_e1_e2(d: &crate::daemon::Daemon) -> (u16, u16) {
    let st = d.control.lock().unwrap();
    (st.slots.slot("web", "g1", "e1").unwrap(), st.slots.slot("web", "g1", "e2").unwrap())
}

/// Bytes per endpoint, backend and service are the per-worker slot counters summed;
/// an endpoint without a resolved next hop shows as not resolved and not healthy.
#[test]
fn bytes_and_next_hops_per_endpoint() {
    let d = daemon();
    let (s1, s2) = slots_e1_e2(&d);
    crate::fastpath::stats::bump(&d.shared.stats[0].backend_bytes[usize::from(s1)], 1000);
    crate::fastpath::stats::bump(&d.shared.stats[1].backend_bytes[usize::from(s1)], 500);
    crate::fastpath::stats::bump(&d.shared.stats[1].backend_bytes[usize::from(s2)], 60);
    let t = render(&d);
    let ep = |e: &str, a: &str| format!("{{service=\"web\",backend=\"g1\",endpoint=\"{e}\",address=\"{a}\"}}");
    assert_eq!(sample(&t, &format!("spillway_endpoint_bytes_total{}", ep("e1", "10.0.0.11"))), Some(1500.0), "{t}");
    assert_eq!(sample(&t, &format!("spillway_endpoint_bytes_total{}", ep("e2", "10.0.0.12"))), Some(60.0));
    assert_eq!(sample(&t, "spillway_backend_bytes_total{service=\"web\",backend=\"g1\",address=\"\"}"), Some(1560.0));
    assert_eq!(sample(&t, "spillway_service_bytes_total{service=\"web\"}"), Some(1560.0));
    let b2 = "{service=\"web\",backend=\"b2\",endpoint=\"b2\",address=\"10.0.0.13\"}";
    assert_eq!(sample(&t, &format!("spillway_endpoint_next_hop_resolved{b2}")), Some(0.0), "b2 has no mac and no ARP reply yet");
    assert_eq!(sample(&t, &format!("spillway_endpoint_healthy{b2}")), Some(1.0), "pending its first reply: still eligible");
    assert_eq!(sample(&t, &format!("spillway_endpoint_next_hop_resolved{}", ep("e1", "10.0.0.11"))), Some(1.0));
    assert_eq!(sample(&t, "spillway_neighbor_resolved{address=\"10.0.0.13\"}"), Some(0.0));
    assert_eq!(sample(&t, "spillway_neighbor_requests_total"), Some(0.0));
    promtool_accepts(&to_prometheus_text(&t));
}

/// A scrape reads no connection table: the occupancy comes from the counters the
/// workers mirror, and no request is posted to a worker's mailbox (the only way the
/// control side gets a table read). The daemon here has no worker threads at all, so
/// a scrape that asked them would wait out the flows timeout and show no occupancy.
#[test]
fn a_scrape_reads_occupancy_counters_and_asks_no_worker() {
    let d = daemon();
    let set = |w: usize, j: usize, n: u64| d.shared.stats[w].ct_entries[j].store(n, Ordering::Relaxed);
    set(0, 0, 5); // IPv4 syn_only
    set(0, 1, 700); // IPv4 established
    set(1, 5, 3); // IPv6 closing
    d.shared.stats[0].ct_relocated.store(42, Ordering::Relaxed);
    let started = std::time::Instant::now();
    let t = render(&d);
    assert!(started.elapsed() < crate::ctl::views::FLOWS_TIMEOUT, "the scrape waited for a worker");
    assert!(d.shared.mailboxes.iter().all(|m| m.posted() == 0), "a scrape posted a table request");
    assert_eq!(sample(&t, "spillway_conntrack_entries{worker=\"0\"}"), Some(705.0), "{t}");
    assert_eq!(sample(&t, "spillway_conntrack_entries{worker=\"1\"}"), Some(3.0));
    assert_eq!(sample(&t, "spillway_conntrack_relocations_total{worker=\"0\"}"), Some(42.0));
    assert_eq!(sample(&t, "spillway_conntrack_entries_by_state{worker=\"0\",family=\"ipv4\",state=\"established\"}"), Some(700.0));
    assert_eq!(sample(&t, "spillway_conntrack_entries_by_state{worker=\"1\",family=\"ipv6\",state=\"closing\"}"), Some(3.0));
    // `flows count` without a filter reads the same counters.
    match d.flows(spillway_shared::proto::FlowOp::Count, &spillway_shared::proto::FlowFilter::All) {
        spillway_shared::proto::Response::Flows(r) => assert_eq!((r.per_worker, r.total), (vec![705, 3], 708)),
        other => panic!("{other:?}"),
    }
    assert!(d.shared.mailboxes.iter().all(|m| m.posted() == 0), "flows count posted a table request");
    promtool_accepts(&to_prometheus_text(&t));
}

/// The probe RTT histogram is encoded with cumulative buckets, `_sum` and `_count`.
#[test]
fn rtt_histograms_encode_cumulative_buckets() {
    let mut h = crate::health::RttHistogram::default();
    for sec in [0.0004, 0.002, 0.002, 9.0] {
        h.observe(sec);
    }
    let mut b = Builder { reg: Registry::with_prefix("spillway") };
    let l = labels(&[("service", "web"), ("backend", "b1"), ("endpoint", "b1")]);
    b.histogram("endpoint_probe_rtt_seconds", "RTT", vec![(l, h.sum_sec, h.count(), h.buckets())]);
    let mut t = String::new();
    encode(&mut t, &b.reg).unwrap();
    let s = |le: &str| sample(&t, &format!("spillway_endpoint_probe_rtt_seconds_bucket{{le=\"{le}\",service=\"web\",backend=\"b1\",endpoint=\"b1\"}}"));
    assert_eq!(s("0.0005"), Some(1.0), "{t}");
    assert_eq!(s("0.001"), Some(1.0));
    assert_eq!(s("0.0025"), Some(3.0));
    assert_eq!(s("5.0"), Some(3.0));
    assert_eq!(s("+Inf"), Some(4.0));
    assert_eq!(sample(&t, "spillway_endpoint_probe_rtt_seconds_count{service=\"web\",backend=\"b1\",endpoint=\"b1\"}"), Some(4.0));
    assert!(t.contains("# TYPE spillway_endpoint_probe_rtt_seconds histogram"), "{t}");
    promtool_accepts(&to_prometheus_text(&t));
}

/// `promtool check metrics` (Debian `prometheus`) accepts `text`; skipped without it.
fn promtool_accepts(text: &str) {
    use std::process::{Command, Stdio};
    match Command::new("promtool").args(["check", "metrics"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn() {
        Ok(mut c) => {
            c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
            let o = c.wait_with_output().unwrap();
            let msg = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            // Lint warnings (e.g. naming advice) print but exit 0; errors fail.
            assert!(o.status.success(), "promtool check metrics: {msg}\n{text}");
        }
        Err(e) => eprintln!("SKIP promtool check metrics: {e}"),
    }
}

/// Link state and the device's extended statistics: per-queue packets as their own
/// series, the rest by the driver's name; a port whose driver cannot tell its link has
/// no `port_link_up` series.
#[test]
fn link_and_xstats_per_port_and_queue() {
    let cfg = spillway_shared::config::Config::from_toml("[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\n[[ports]]\nname = \"p1\"\ndevice = \"net_null1\"\n").unwrap();
    let stats = Box::new(|i: usize| spillway_shared::proto::PortStatus {
        name: format!("p{i}"),
        link_up: (i == 0).then_some(false),
        link_speed_mbps: 10_000,
        xstats: vec![("rx_q0_packets".into(), 5), ("rx_q1_packets".into(), 7), ("tx_q0_packets".into(), 9), ("rx_missed_errors".into(), 3), ("rx_mbuf_allocation_errors".into(), 1)],
        ..Default::default()
    });
    let d = crate::daemon::Daemon::new(cfg, 2, vec![0, 0], stats).unwrap();
    let t = render(&d);
    assert_eq!(sample(&t, "spillway_port_link_up{port=\"p0\"}"), Some(0.0), "{t}");
    assert!(!t.contains("spillway_port_link_up{port=\"p1\"}"), "p1's driver cannot tell");
    assert_eq!(sample(&t, "spillway_port_link_speed_mbps{port=\"p1\"}"), Some(10_000.0));
    assert_eq!(sample(&t, "spillway_port_queue_rx_packets_total{port=\"p0\",queue=\"1\"}"), Some(7.0));
    assert_eq!(sample(&t, "spillway_port_queue_tx_packets_total{port=\"p1\",queue=\"0\"}"), Some(9.0));
    assert_eq!(sample(&t, "spillway_port_xstat_total{port=\"p0\",name=\"rx_missed_errors\"}"), Some(3.0));
    assert!(!t.contains("name=\"rx_q0_packets\""), "per-queue packets only as their own series");
    promtool_accepts(&to_prometheus_text(&t));
}

/// Link changes, queues, RSS key, RETA and sync placement per port.
#[test]
fn rss_and_link_changes_per_port() {
    let cfg = spillway_shared::config::Config::from_toml("[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\n").unwrap();
    let stats = Box::new(|_: usize| spillway_shared::proto::PortStatus {
        name: "p0".into(),
        link_up: Some(true),
        link_changes: 2,
        rss: spillway_shared::proto::PortRss {
            rx_queues: 2,
            hash_types: vec!["ipv4".into(), "ipv4-tcp".into()],
            key_source: "driver default".into(),
            key: "ab".repeat(40),
            reta: vec![0; 128],
            sync_placement: "broadcast".into(),
            sync_placement_why: "x".into(),
        },
        ..Default::default()
    });
    let d = crate::daemon::Daemon::new(cfg, 2, vec![0], stats).unwrap();
    let t = render(&d);
    assert_eq!(sample(&t, "spillway_port_link_changes_total{port=\"p0\"}"), Some(2.0), "{t}");
    assert_eq!(sample(&t, "spillway_port_rx_queues{port=\"p0\"}"), Some(2.0));
    assert_eq!(sample(&t, "spillway_port_rss_reta_size{port=\"p0\"}"), Some(128.0));
    assert_eq!(sample(&t, "spillway_port_rss_key_bytes{port=\"p0\"}"), Some(40.0));
    assert_eq!(
        sample(&t, "spillway_port_rss_info{port=\"p0\",hash_types=\"ipv4,ipv4-tcp\",key_source=\"driver default\",sync_placement=\"broadcast\"}"),
        Some(1.0),
        "{t}"
    );
    promtool_accepts(&to_prometheus_text(&t));
}

#[test]
fn xstat_names_operators_watch() {
    use crate::dpdk::xstat_wanted;
    for n in ["rx_q0_packets", "tx_q15_packets", "rx_missed_errors", "rx_mbuf_allocation_errors", "tx_errors", "rx_nombuf"] {
        assert!(xstat_wanted(n), "{n}");
    }
    for n in ["rx_good_packets", "rx_q0_bytes", "rx_size_64_packets"] {
        assert!(!xstat_wanted(n), "{n}");
    }
}

#[test]
fn bind_error_names_the_field() {
    let l = bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let e = bind(l.local_addr().unwrap()).unwrap_err();
    assert!(e.starts_with("metrics.listen = \"127.0.0.1:"), "{e}");
}


/// Starts [`serve`] on a free port with a fixed body; returns its address, stop flag and
/// thread.
fn start() -> (SocketAddr, Arc<AtomicBool>, std::thread::JoinHandle<Served>) {
    let l = bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    (addr, stop, std::thread::spawn(move || serve(l, &s2, || "spillway_x 1\n# EOF\n".to_string())))
}

/// A client that sends its request one byte at a time, every `gap`, until the server
/// closes the connection or it has sent `request`; returns when it ended.
fn dribble(addr: SocketAddr, request: &'static str, gap: Duration) -> std::thread::JoinHandle<std::time::Instant> {
    let c = TcpStream::connect(addr).unwrap();
    std::thread::spawn(move || {
        let mut c = c;
        for b in request.as_bytes() {
            if c.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(gap);
        }
        std::time::Instant::now()
    })
}

/// One slow or idle client cannot delay another's scrape: with a client dribbling a
/// byte every 200 ms and four half-open `GET /metr` connections open, a scrape is
/// answered at once; and the slow ones are cut [`REQUEST_DEADLINE`] after accept, however
/// they trickle.
#[test]
fn slow_and_idle_clients_do_not_delay_a_scrape() {
    let (addr, stop, t) = start();
    let opened = std::time::Instant::now();
    let slow = dribble(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", Duration::from_millis(200));
    let mut idle: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(b"GET /metr").unwrap();
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200)); // the server has accepted them all
    let started = std::time::Instant::now();
    let r = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let took = started.elapsed();
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("spillway_x 1\n"), "{r}");
    assert!(took < Duration::from_secs(1), "the scrape waited {took:?} behind slow clients");
    // The idle ones are closed by the deadline: a read sees the end (no answer).
    for c in &mut idle {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut s = Vec::new();
        c.read_to_end(&mut s).unwrap();
        assert!(s.is_empty(), "{}", String::from_utf8_lossy(&s));
    }
    let cut = opened.elapsed();
    assert!(cut >= REQUEST_DEADLINE - Duration::from_millis(300) && cut < REQUEST_DEADLINE + Duration::from_secs(1), "idle connections cut after {cut:?}");
    // The dribbler (36 bytes, 7.2 s at its pace) is cut at the deadline too.
    let ended = slow.join().unwrap() - opened;
    assert!(ended < REQUEST_DEADLINE + Duration::from_secs(1), "the dribbling client kept its connection {ended:?}");
    stop.store(true, Ordering::SeqCst);
    assert_eq!(t.join().unwrap(), Served { timed_out: 5, ..Served::default() }, "the four idle clients and the dribbler timed out");
}

/// Slowloris: a client sending its request head one byte a second is closed
/// [`REQUEST_DEADLINE`] after accept, unanswered, and counted as timed out; meanwhile a
/// scrape is answered at once.
#[test]
fn a_client_sending_a_byte_a_second_is_cut_at_the_request_deadline() {
    let (addr, stop, t) = start();
    let mut slow = TcpStream::connect(addr).unwrap();
    let opened = std::time::Instant::now();
    let slowloris = std::thread::spawn(move || {
        let mut got = Vec::new();
        for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n\r\n" {
            if slow.write_all(&[*b]).is_err() {
                break;
            }
            // wait a second for the server's end of stream, then the next byte
            slow.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            match slow.read_to_end(&mut got) {
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
                _ => break,
            }
        }
        (opened.elapsed(), got)
    });
    std::thread::sleep(Duration::from_millis(500));
    let r = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    let (cut, got) = slowloris.join().unwrap();
    assert!(got.is_empty(), "the slow client got an answer: {}", String::from_utf8_lossy(&got));
    assert!(cut >= REQUEST_DEADLINE - Duration::from_millis(300) && cut < REQUEST_DEADLINE + Duration::from_secs(1), "the slow client was cut after {cut:?}");
    stop.store(true, Ordering::SeqCst);
    assert_eq!(t.join().unwrap(), Served { timed_out: 1, ..Served::default() });
}

/// A client that sends its request and then takes none of the answer (64 MiB, more than
/// the socket buffers hold) is closed once the answer has stalled for
/// [`REQUEST_DEADLINE`], long before [`ANSWER_DEADLINE`]: read fast 3 s later, the
/// connection ends before the answer is whole (without the stall limit, the fast read
/// would get all of it).
#[test]
fn an_answer_stalled_for_the_request_deadline_is_cut() {
    let (addr, stop, t) = start_with(|| "x".repeat(BIG));
    let mut c = send(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    // the stall counts from the answer being ready: rendering 64 MiB on a loaded host can
    // take a second or two, so the fast read comes 3 s past the stall limit (still well
    // before the answer deadline)
    let wait = REQUEST_DEADLINE + Duration::from_secs(3);
    assert!(wait < ANSWER_DEADLINE);
    std::thread::sleep(wait);
    let got = answer_of(&mut c).len();
    assert!(got < BIG, "the whole answer ({got} bytes) was sent after a {wait:?} stall");
    stop.store(true, Ordering::SeqCst);
    assert_eq!(t.join().unwrap(), Served { timed_out: 1, ..Served::default() });
}

/// Size of the answer of the tests of slow readers, bytes: more than the socket buffers
/// hold.
const BIG: usize = 64 << 20;

/// A client that takes its answer steadily but too slowly to finish it (16 KiB every 50
/// ms, so it never stalls [`REQUEST_DEADLINE`]) is cut at [`ANSWER_DEADLINE`]: read
/// fast after that, the connection ends before the 64 MiB answer is whole (without the
/// deadline, the fast read would get all of it).
#[test]
fn a_trickling_reader_is_cut_at_the_answer_deadline() {
    let (addr, stop, t) = start_with(|| "x".repeat(BIG));
    let mut c = send(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let opened = std::time::Instant::now();
    // the first bytes come once the 64 MiB answer is rendered (a second or two on a loaded
    // host); after that every read is answered at once
    c.set_read_timeout(Some(Duration::from_secs(REQUEST_DEADLINE.as_secs().max(1) + 1))).unwrap();
    let (mut got, mut buf) = (0usize, vec![0u8; 16 << 10]);
    while opened.elapsed() < ANSWER_DEADLINE + Duration::from_secs(1) {
        match c.read(&mut buf) {
            // the end may come within the second after the deadline (small socket buffers)
            Ok(0) if opened.elapsed() >= ANSWER_DEADLINE - Duration::from_millis(300) => break,
            Ok(0) => panic!("closed after {:?}, before the answer deadline", opened.elapsed()),
            Ok(n) => got += n,
            Err(e) => panic!("{e} after {:?}", opened.elapsed()),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest); // a reset after the buffered bytes is an end too
    got += rest.len();
    assert!(got < BIG, "the whole answer ({got} bytes) was sent to a client reading for {:?}", opened.elapsed());
    stop.store(true, Ordering::SeqCst);
    assert_eq!(t.join().unwrap(), Served { timed_out: 1, ..Served::default() }, "the trickling reader timed out");
}

/// Starts [`serve`] on a free port with `body`; returns its address, stop flag and thread.
fn start_with(body: impl Fn() -> String + Send + Sync + 'static) -> (SocketAddr, Arc<AtomicBool>, std::thread::JoinHandle<Served>) {
    let l = bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    (addr, stop, std::thread::spawn(move || serve(l, &s2, body)))
}

/// Connects and sends `request`, without reading the answer.
fn send(addr: SocketAddr, request: &str) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    c
}

/// Everything `c` receives until the server closes it (at most 10 s); a reset after
/// what arrived is no failure.
fn answer_of(c: &mut TcpStream) -> String {
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = Vec::new();
    let _ = c.read_to_end(&mut r);
    String::from_utf8_lossy(&r).into_owned()
}

/// Whether the server has closed `c` (a read sees the end of the stream), waiting at most
/// `wait`; false when nothing arrived by then. Panics when `c` gets an answer.
fn closed_by_server(c: &mut TcpStream, wait: Duration) -> bool {
    c.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 64];
    match c.read(&mut b) {
        Ok(0) => true,
        Ok(n) => panic!("an answer on an idle connection: {}", String::from_utf8_lossy(&b[..n])),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => false,
        Err(e) => panic!("{e}"),
    }
}

/// With [`MAX_CONNECTIONS`] connections open that sent nothing, a scrape is answered at
/// once: the connection that has waited longest for its request head is closed to make
/// room (well before [`REQUEST_DEADLINE`]); the others stay open.
#[test]
fn idle_connections_make_room_for_a_scrape() {
    let (addr, stop, t) = start();
    let opened = std::time::Instant::now();
    let mut idle = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        idle.push(TcpStream::connect(addr).unwrap());
        std::thread::sleep(Duration::from_millis(5)); // accepted in this order
    }
    std::thread::sleep(Duration::from_millis(300)); // all accepted
    let started = std::time::Instant::now();
    let r = answer_of(&mut send(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
    let took = started.elapsed();
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("spillway_x 1\n"), "{r}");
    assert!(took < Duration::from_secs(1), "the scrape took {took:?} with idle connections open");
    // The oldest was closed to make room, the others not (yet: the deadline closes them).
    assert!(closed_by_server(&mut idle[0], Duration::from_secs(1)), "the oldest idle connection is still open");
    assert!(opened.elapsed() < REQUEST_DEADLINE, "closed by the deadline, not to make room: {:?}", opened.elapsed());
    for (i, c) in idle.iter_mut().enumerate().skip(1) {
        assert!(!closed_by_server(c, Duration::from_millis(1)), "idle connection {i} closed too");
    }
    stop.store(true, Ordering::SeqCst);
    let served = t.join().unwrap();
    assert_eq!((served.closed_for_room, served.refused), (1, 0), "{served:?}");
}

/// QA's attack: 40 clients that connect, send nothing and reconnect as soon as they are
/// closed. Every scrape meanwhile is answered `200` (before, the idle connections held
/// every slot and scrapes got `503`).
#[test]
fn reconnecting_idle_clients_do_not_lock_out_scrapes() {
    let (addr, stop, t) = start();
    let attacking = Arc::new(AtomicBool::new(true));
    let attackers: Vec<_> = (0..40)
        .map(|_| {
            let attacking = attacking.clone();
            std::thread::spawn(move || {
                let mut connections = 0u32;
                while attacking.load(Ordering::SeqCst) {
                    if let Ok(mut c) = connect_from([127, 0, 0, 2], addr) {
                        connections += 1;
                        // Hold it until the server closes it (or a while), then again.
                        c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                        let _ = c.read_to_end(&mut Vec::new());
                    }
                }
                connections
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300)); // the slots are taken
    let until = std::time::Instant::now() + Duration::from_secs(2);
    let mut scrapes = 0;
    while std::time::Instant::now() < until || scrapes < 10 {
        let r = answer_of(&mut send(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("spillway_x 1\n"), "scrape {scrapes} under the attack: {r:?}");
        // a slow scraper from another address (its request 200 ms after connecting) is not
        // the one closed: the flood's address holds the most slots (fresh-user QA)
        let mut slow = TcpStream::connect(addr).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let r = answer_of(&mut slow);
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "slow scrape {scrapes} under the attack: {r:?}");
        scrapes += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    attacking.store(false, Ordering::SeqCst);
    let connections: u32 = attackers.into_iter().map(|a| a.join().unwrap()).sum();
    assert!(connections > 40 * 2, "the attack did not reconnect: {connections} connections");
    stop.store(true, Ordering::SeqCst);
    let served = t.join().unwrap();
    assert!(served.closed_for_room > 0 && served.refused == 0, "{served:?}");
}

/// The connection closed to make room comes from the address with the most connections
/// waiting for their request head, not the most slots: a host with ten scrapes being
/// answered and one connection not yet sent keeps it, a flood of five idle connections
/// from another host loses one (review: the answering ones counted too).
#[test]
fn answering_scrapes_do_not_make_their_host_the_flood() {
    let (addr, stop, t, release) = start_gated();
    // the longest waiting of all: the scraping host's own, not yet sent
    let mut pending = connect_from([127, 0, 0, 1], addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let request = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut scrapes: Vec<TcpStream> = (0..10)
        .map(|_| {
            let mut c = connect_from([127, 0, 0, 1], addr).unwrap();
            c.write_all(request.as_bytes()).unwrap();
            c
        })
        .collect();
    let mut flood: Vec<TcpStream> = (0..MAX_CONNECTIONS - 11).map(|_| connect_from([127, 0, 0, 2], addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(400)); // all accepted, the scrapes' heads read
    let _new = connect_from([127, 0, 0, 3], addr).unwrap();
    assert!(closed_by_server(&mut flood[0], Duration::from_secs(1)), "the flood's oldest connection was not closed to make room");
    assert!(!closed_by_server(&mut pending, Duration::from_millis(300)), "the scraping host's pending connection was closed instead");
    release.store(true, Ordering::SeqCst);
    pending.write_all(request.as_bytes()).unwrap();
    for c in scrapes.iter_mut().chain([&mut pending]) {
        let r = answer_of(c);
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    }
    stop.store(true, Ordering::SeqCst);
    let served = t.join().unwrap();
    assert_eq!((served.closed_for_room, served.refused), (1, 0), "{served:?}");
}

/// A TCP connection to `addr` from local address `ip` (any port): the loopback has all of
/// 127/8, so a test can be two hosts.
fn connect_from(ip: [u8; 4], addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.bind(&SocketAddr::from((ip, 0)).into())?;
    s.connect(&addr.into())?;
    Ok(s.into())
}

/// [`start_with`] a body whose renders wait (at most 30 s) until the returned flag is set:
/// requests admitted meanwhile stay answering, holding their slots.
fn start_gated() -> (SocketAddr, Arc<AtomicBool>, std::thread::JoinHandle<Served>, Arc<AtomicBool>) {
    let release = Arc::new(AtomicBool::new(false));
    let r2 = release.clone();
    let (addr, stop, t) = start_with(move || {
        let until = std::time::Instant::now() + Duration::from_secs(30);
        while !r2.load(Ordering::SeqCst) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        "spillway_x 1\n# EOF\n".to_string()
    });
    (addr, stop, t, release)
}

/// A connection is answered `503` at once only when every slot is answering a request: with
/// one idle connection and `MAX_CONNECTIONS - 1` requests waiting for a render, one more
/// request takes the idle one's place; with all [`MAX_CONNECTIONS`] waiting, the next is
/// refused. Every request admitted is answered. A stop ends the server promptly even with
/// connections open.
#[test]
fn busy_slots_get_503_and_stop_is_prompt() {
    // Renders wait for `release`: the requests queue on the one-render lock, busy.
    let (addr, stop, t, release) = start_gated();
    let request = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut idle = TcpStream::connect(addr).unwrap();
    std::thread::sleep(Duration::from_millis(100)); // accepted first
    let mut busy: Vec<TcpStream> = (1..MAX_CONNECTIONS).map(|_| send(addr, request)).collect();
    std::thread::sleep(Duration::from_millis(500)); // all accepted, their heads read
    busy.push(send(addr, request));
    assert!(closed_by_server(&mut idle, Duration::from_secs(1)), "the idle connection was not closed to make room");
    std::thread::sleep(Duration::from_millis(300));
    let started = std::time::Instant::now();
    let r = answer_of(&mut send(addr, request));
    assert!(r.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{r}");
    assert!(started.elapsed() < Duration::from_secs(1), "the 503 waited {:?}", started.elapsed());
    release.store(true, Ordering::SeqCst);
    for (i, c) in busy.iter_mut().enumerate() {
        let r = answer_of(c);
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("spillway_x 1\n"), "request {i}: {r:?}");
    }
    // The slots are free again.
    assert!(answer_of(&mut send(addr, request)).starts_with("HTTP/1.1 200 OK\r\n"));
    let _open: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let stopping = std::time::Instant::now();
    stop.store(true, Ordering::SeqCst);
    let served = t.join().unwrap();
    assert!(stopping.elapsed() < Duration::from_secs(1), "stop took {:?} with connections open", stopping.elapsed());
    // Connection limit reached: counted (and logged).
    assert_eq!((served.refused, served.closed_for_room), (1, 1), "{served:?}");
}

/// Concurrent scrapes within the cache's lifetime render the exposition once and share it
/// (the same allocation); once it is older, the next scrape renders it again.
#[test]
fn concurrent_scrapes_share_one_rendering() {
    let renders = std::sync::atomic::AtomicUsize::new(0);
    let render = || {
        let n = renders.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        format!("# TYPE spillway_x counter\nspillway_x_total {n}\n# EOF\n")
    };
    let cache = BodyCache::new(Duration::from_secs(3600));
    let barrier = std::sync::Barrier::new(8);
    let bodies: Vec<Arc<str>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|i| {
                let (cache, barrier, render) = (&cache, &barrier, &render);
                s.spawn(move || {
                    barrier.wait();
                    cache.get(i % 2 == 0, render)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(renders.load(std::sync::atomic::Ordering::SeqCst), 1, "eight concurrent scrapes, one rendering");
    let om: Vec<&Arc<str>> = bodies.iter().step_by(2).collect();
    assert!(om.iter().all(|b| Arc::ptr_eq(b, om[0])), "every OpenMetrics scraper got the same body");
    assert!(bodies.iter().skip(1).step_by(2).all(|b| Arc::ptr_eq(b, &bodies[1]) && !b.contains("# EOF")), "the text format converted once");
    // an expired body is rendered again, and the old one is not kept
    let short = BodyCache::new(Duration::ZERO);
    let a = short.get(true, &render);
    let b = short.get(true, &render);
    assert!(!Arc::ptr_eq(&a, &b));
    assert_eq!(renders.load(std::sync::atomic::Ordering::SeqCst), 3);
}

/// Per-endpoint series follow `metrics.per_endpoint`: on by default for a small config,
/// off when set false (per-backend and per-service series stay), and off by default above
/// the auto limit of endpoints.
#[test]
fn per_endpoint_series_follow_the_switch() {
    let d = daemon();
    let on = render(&d);
    assert!(on.lines().any(|l| l.starts_with("spillway_endpoint_packets_total{")), "small config: on by default");
    d.control.lock().unwrap().cfg.metrics = Some(spillway_shared::config::fleet::MetricsConfig { listen: "127.0.0.1:0".into(), per_endpoint: Some(false) });
    let off = render(&d);
    assert!(!off.lines().any(|l| l.starts_with("spillway_endpoint_") || l.starts_with("spillway_health_probe")), "switched off");
    assert!(off.lines().any(|l| l.starts_with("spillway_backend_packets_total{")) && off.lines().any(|l| l.starts_with("spillway_service_packets_total{")));
    let auto = spillway_shared::config::fleet::MetricsConfig { listen: "127.0.0.1:0".into(), per_endpoint: None };
    let limit = spillway_shared::config::fleet::PER_ENDPOINT_SERIES_AUTO_LIMIT;
    assert!(auto.per_endpoint_series(limit) && !auto.per_endpoint_series(limit + 1));
    assert!(spillway_shared::config::fleet::MetricsConfig { per_endpoint: Some(true), ..auto }.per_endpoint_series(20_000));
}

/// Without per-endpoint series a scrape builds no endpoint rows, and every other series
/// is what the scrape with them shows: the backend rows of `status_with(false)` are
/// `status()`'s without their members (sums over every endpoint, health, a group whose
/// endpoints are all disabled shown disabled and healthy by its endpoints).
#[test]
fn a_scrape_without_endpoint_rows_keeps_every_other_series() {
    let d = daemon();
    let (s1, s2) = slots_e1_e2(&d);
    crate::fastpath::stats::bump(&d.shared.stats[0].backend_bytes[usize::from(s1)], 1000);
    crate::fastpath::stats::bump(&d.shared.stats[1].backend_bytes[usize::from(s2)], 60);
    for e in &mut d.control.lock().unwrap().cfg.services[0].backends[0].endpoints {
        e.enabled = false;
    }
    let full = d.status();
    let rows = d.status_with(false);
    assert!(full.backends.iter().all(|b| !b.members.is_empty()) && rows.backends.iter().all(|b| b.members.is_empty()));
    let without_members = |b: &spillway_shared::proto::BackendStatus| spillway_shared::proto::BackendStatus { members: Vec::new(), ..b.clone() };
    assert_eq!(rows.backends, full.backends.iter().map(without_members).collect::<Vec<_>>());
    assert_eq!(rows.backends[0].bytes, 1060);
    assert!(!rows.backends[0].enabled && rows.backends[0].healthy, "all endpoints disabled: disabled, healthy by its endpoints");
    let on = render(&d);
    d.control.lock().unwrap().cfg.metrics = Some(spillway_shared::config::fleet::MetricsConfig { listen: "127.0.0.1:0".into(), per_endpoint: Some(false) });
    let off = render(&d);
    let kept = |t: &str| t.lines().filter(|l| !l.contains("spillway_endpoint_") && !l.contains("spillway_health_probe") && !l.contains("uptime_seconds")).map(str::to_string).collect::<Vec<_>>();
    assert_eq!(kept(&on), kept(&off));
}

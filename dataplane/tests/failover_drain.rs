//! Connection draining on failover/failback marks only the pool that is no longer eligible
//! (spec/backend-selection.md "Connection draining on failover/failback"): a connection the
//! failover-threshold stage sends to failover backends without a pool switch stays tracked
//! on its backend, even after an earlier failover and failback left a drain deadline behind.

use spillway_dataplane::daemon::Daemon;
use spillway_dataplane::fastpath::conntrack::Timeouts;
use spillway_dataplane::fastpath::port::MemBuf;
use spillway_dataplane::fastpath::stats::WorkerStats;
use spillway_dataplane::fastpath::worker::{PortInfo, Verdict, Worker};
use spillway_shared::config::Config;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

fn config() -> Config {
    let mut t = String::from(
        "[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress = \"10.0.0.2\"\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\nfailover_health_threshold = 70\n\n[[services.backends]]\nname = \"p\"\n",
    );
    for k in 1..=4 {
        t += &format!("[[services.backends.endpoints]]\nname = \"e{k}\"\naddress = \"10.0.1.{k}\"\nmac = \"02:00:00:00:01:{k:02x}\"\n");
    }
    t += "[[services.backends]]\nname = \"f\"\nfailover = true\naddress = \"10.0.2.1\"\nmac = \"02:00:00:00:02:01\"\n";
    Config::from_toml(&t).unwrap()
}

fn tcp(flags_syn: bool) -> MemBuf {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0x10, 5], [2, 0, 0, 0, 0, 1]).ipv4([10, 1, 0, 7], [10, 0, 0, 100], 64);
    let mut out = Vec::new();
    if flags_syn {
        b.tcp(40000, 80, 1000, 8192).syn().write(&mut out, &[]).unwrap();
    } else {
        b.tcp(40000, 80, 1001, 8192).ack(1).write(&mut out, b"x").unwrap();
    }
    MemBuf::new(&out)
}

#[test]
fn a_threshold_failover_after_a_failback_is_not_re_picked_per_packet() {
    let d = Daemon::new(config(), 1, vec![0], Box::new(|_| Default::default())).unwrap();
    let set = |e: &str, up: bool| d.set_endpoint_health("web", "p", e, up, None);
    // every primary endpoint down: failover; back up: failback (a drain deadline remains)
    for e in ["e1", "e2", "e3", "e4"] {
        set(e, false);
    }
    for e in ["e1", "e2", "e3", "e4"] {
        set(e, true);
    }
    // 2 of 4 down: 50 % < 70 %, the threshold stage sends new connections to `f`
    set("e1", false);
    set("e2", false);
    let stats = Arc::new(WorkerStats::default());
    let mut w = Worker::new(0, 1024, 7, Timeouts::default(), stats.clone(), vec![PortInfo { mac: [2, 0, 0, 0, 0, 1], forward_to: 0, addr: 0x0a00_0002 }]);
    // long after the old drain deadline (connection_drain_timeout_sec)
    let now = 10_000_000;
    let verdicts: Vec<Verdict> = d
        .shared
        .with_snapshot(|s| (0..6).map(|i| w.process(&mut tcp(i == 0), 0, s, now + i)).collect())
        .unwrap();
    assert!(verdicts.iter().all(|v| *v == Verdict::Forward), "{verdicts:?}");
    assert_eq!(stats.rebalanced.load(Relaxed), 0, "the flow on the failover backend was re-picked per packet");
    assert_eq!(stats.new_connections.load(Relaxed), 1);
    let service = d.shared.with_snapshot(|s| s.services[0].id).unwrap();
    let k = spillway_dataplane::fastpath::conntrack::CtKey { src: u32::from_be_bytes([10, 1, 0, 7]), sport: 40000, service };
    assert_eq!(w.ct.peek(&k, now + 6).map(|h| h.state), Some(spillway_dataplane::fastpath::conntrack::State::Established));
}

//! DPDK errors come back as `Err` with readable text, never as a panic.
//! EAL starts once per process, so this file has exactly one test.

use spillway_dataplane::dpdk::{Eal, EthPort, Mempool};

fn args(extra: &[&str]) -> Vec<String> {
    [
        "--no-huge",
        "--no-shconf",
        "-m",
        "512",
        "--no-pci",
        "--log-level=warning",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn errors_are_results() {
    // A bad EAL argument: Err naming the call, DPDK's text and a hint.
    let e = Eal::init(&args(&["--definitely-not-an-eal-option"])).expect_err("bad EAL arg");
    let text = e.to_string();
    eprintln!("bad arg: {text}");
    assert!(text.starts_with("rte_eal_init failed"), "{text}");
    assert_eq!(e.errno, libc::EINVAL, "{text}");
    assert!(e.hint.is_some());

    // DPDK allows a retry after an argument error.
    let eal =
        Eal::init(&args(&["--vdev=net_null0"])).expect("EAL init after a bad-argument failure");

    // Second init in the same process.
    let e = Eal::init(&args(&[])).expect_err("second init");
    eprintln!("second init: {e}");
    assert!(e.to_string().contains("once per process"), "{e}");

    // A port that does not exist: Err listing the known ports.
    let e = EthPort::by_name("net_nope0").expect_err("no such port");
    let text = e.to_string();
    eprintln!("no such port: {text}");
    assert!(
        text.contains("rte_eth_dev_get_port_by_name failed"),
        "{text}"
    );
    assert!(text.contains("net_nope0"), "{text}");
    assert!(text.contains("known ports: net_null0"), "{text}");

    // Mempool name clash and impossible cache size.
    let pool = Mempool::new("err_pool", 1023, 0, -1).expect("pool");
    let e = Mempool::new("err_pool", 1023, 0, -1).expect_err("duplicate pool");
    eprintln!("duplicate pool: {e}");
    assert_eq!(e.errno, libc::EEXIST, "{e}");
    let e = Mempool::new("err_pool2", 1023, 100_000, -1).expect_err("cache too big");
    eprintln!("cache too big: {e}");

    // Too many queues for the device.
    let mut port = EthPort::by_name("net_null0").expect("net_null0");
    let max = port.max_rx_queues().expect("dev info");
    eprintln!("net_null0 max_rx_queues = {max}");
    let e = port.configure(max.saturating_add(1).max(2), 1, 512, &pool);
    let e = if max == u16::MAX {
        port.configure(0, 1, 512, &pool)
    } else {
        e
    }
    .expect_err("too many queues");
    eprintln!("too many queues: {e}");
    assert!(
        e.to_string().contains("rte_eth_dev_configure failed"),
        "{e}"
    );

    // After the refused configure, a valid multi-queue one works: net_null supports RSS,
    // so 4 RX queues get the 5-tuple hash (masked by the device's capabilities).
    let supported = port.info().expect("info").flow_type_rss_offloads;
    let hf = spillway_dataplane::dpdk::rss_mask(spillway_dataplane::dpdk::rss_5tuple(), supported);
    eprintln!("net_null0 rss offloads {supported:#x}, requesting {hf:#x}");
    assert_ne!(hf, 0, "net_null advertises RSS hash functions");
    port.configure(4, 4, 512, &pool)
        .expect("4-queue configure with RSS");
    port.start().expect("start");
    let link = port.link().expect("link");
    eprintln!(
        "net_null0 link {link:?}, mac {:02x?}, socket {}",
        port.mac(),
        port.socket_id()
    );
    assert!(port.socket_id() >= 0, "socket falls back to a concrete id");
    assert_eq!(port.stats().expect("stats").opackets, 0);
    port.stop().expect("stop");

    drop(port);
    drop(pool);
    drop(eal);
}

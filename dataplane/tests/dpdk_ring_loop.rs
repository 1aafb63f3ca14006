//! DPDK integration test over the ring PMD (`--vdev=net_ring0` loops TX back to RX).
//! EAL starts once per process, so this file has exactly one test.

use spillway_dataplane::dpdk::{register_thread, Eal, EthPort, Mempool};
use spillway_dataplane::fastpath::port::{Burst, PacketBuf, Port, BURST};

fn eal_args() -> Vec<String> {
    [
        "--no-huge",
        "--no-shconf",
        "-m",
        "512",
        "--no-pci",
        "--log-level=warning",
        "--vdev=net_ring0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A 64-byte Ethernet/IPv4/TCP-ish frame whose bytes encode `seq`.
fn frame(seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    for (i, b) in f[14..].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_add(i as u8);
    }
    f[60..64].copy_from_slice(&seq.to_be_bytes());
    f
}

fn drain(q: &mut impl Port) -> usize {
    let mut total = 0;
    loop {
        let mut b = Burst::new();
        let n = q.rx_burst(&mut b);
        total += n;
        if n == 0 {
            return total;
        }
    }
}

#[test]
fn ring_loopback() {
    let eal = Eal::init(&eal_args()).expect("EAL init");
    assert!(eal.port_count() >= 1, "ports: {:?}", eal.port_names());

    let pool = Mempool::new("ring_loop_pool", 4095, 32, -1).expect("mempool");
    assert_eq!(pool.in_use(), 0);

    let mut port = EthPort::by_name("net_ring0").expect("port");
    assert_eq!(port.name(), "net_ring0");
    assert!(port.max_rx_queues().unwrap() >= 1);
    port.configure(1, 1, 1024, &pool).expect("configure");
    port.start().expect("start");
    let _ = port.promiscuous(true); // ring PMD may not support it; must not panic either way
    let mut q = port.queue(0);
    assert_eq!(q.mac(), port.mac());

    // 1. one burst out and back, byte for byte
    let mut tx: Burst<_> = Burst::new();
    for i in 0..BURST as u32 {
        tx.push(pool.alloc_frame(&frame(i)).expect("alloc"));
    }
    assert_eq!(pool.in_use(), BURST as u32);
    assert_eq!(q.tx_burst(&mut tx), BURST);
    assert!(tx.is_empty());
    let mut rx: Burst<_> = Burst::new();
    assert_eq!(q.rx_burst(&mut rx), BURST);
    for (i, m) in rx.iter().enumerate() {
        assert_eq!(m.data(), &frame(i as u32)[..], "frame {i}");
    }
    assert_eq!(pool.in_use(), BURST as u32);
    drop(rx);
    assert_eq!(
        pool.in_use(),
        0,
        "received mbufs return to the pool on drop"
    );

    // 2. PacketBuf semantics on an mbuf
    let mut m = pool.alloc_frame(&frame(7)).unwrap();
    let head = m.headroom();
    assert!(!m.prepend(head + 1), "prepend beyond headroom refused");
    assert_eq!(m.data().len(), 64);
    assert!(m.prepend(14));
    assert_eq!(m.data().len(), 78);
    assert_eq!(&m.data()[14..], &frame(7)[..]);
    m.data_mut()[..14].copy_from_slice(&[0xaa; 14]);
    m.truncate(100); // no-op
    assert_eq!(m.data().len(), 78);
    m.truncate(20);
    assert_eq!(m.data(), &[&[0xaa; 14][..], &frame(7)[..6]].concat()[..]);
    let tail = m.tailroom();
    assert!(!m.append(tail + 1), "append beyond tailroom refused");
    assert!(m.append(10));
    assert_eq!(m.data().len(), 30);
    drop(m);
    assert_eq!(pool.in_use(), 0);

    // 3. overflow: send more than the ring holds; the unsent tail must be freed
    let mut sent = 0usize;
    let mut offered = 0usize;
    for round in 0..48u32 {
        let mut tx: Burst<_> = Burst::new();
        for i in 0..BURST as u32 {
            tx.push(pool.alloc_frame(&frame(round * 100 + i)).unwrap());
        }
        offered += BURST;
        sent += q.tx_burst(&mut tx);
        assert!(tx.is_empty());
        // everything not sent was freed: only what sits in the ring is in use
        assert_eq!(pool.in_use() as usize, sent, "round {round}");
    }
    assert!(
        sent < offered,
        "ring should have filled up (sent {sent} of {offered})"
    );
    let stats = port.stats().unwrap();
    eprintln!("ring held {sent} of {offered} offered; stats {stats:?}");
    assert_eq!(drain(&mut q), sent);
    assert_eq!(pool.in_use(), 0, "in_use flat after overflow");

    // 4. a non-EAL thread registers and uses the pool and queue
    let pool_ref = &pool;
    std::thread::scope(|s| {
        s.spawn(move || {
            let lcore = register_thread().expect("rte_thread_register");
            assert!(lcore < 1024, "lcore id {lcore}");
            let mut q = q;
            let mut tx: Burst<_> = Burst::new();
            tx.push(pool_ref.alloc_frame(&frame(999)).unwrap());
            assert_eq!(q.tx_burst(&mut tx), 1);
            let mut rx: Burst<_> = Burst::new();
            assert_eq!(q.rx_burst(&mut rx), 1);
            assert_eq!(rx[0].data(), &frame(999)[..]);
            drop(rx);
            spillway_dataplane::dpdk::unregister_thread();
        });
    });
    assert_eq!(pool.in_use(), 0);

    port.stop().unwrap();
    drop(port);
    drop(pool);
    eal.cleanup().expect("EAL cleanup");
}

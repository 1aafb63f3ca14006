//! Work on EAL's own worker lcores (`dpdk::spawn_on_lcore`), the way workers start when
//! `dataplane.packet_capture` is on (so that no thread is registered with
//! `rte_thread_register`, which would disable multi-process). EAL starts once per
//! process, so this file has exactly one test.

use spillway_dataplane::dpdk::{lcore_id, main_lcore, spawn_on_lcore, wait_lcores, worker_lcores, Eal};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;

#[test]
fn jobs_run_on_eal_lcores_and_borrow_from_the_scope() {
    let args: Vec<String> = [
        "--no-huge",
        "--no-shconf",
        "-m",
        "256",
        "--no-pci",
        "--log-level=warning",
        // three lcores, all on CPU 0 (every host has it)
        "--lcores=0@0,1@0,2@0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let eal = Eal::init(&args).expect("EAL init");
    assert_eq!(main_lcore(), 0);
    assert_eq!(lcore_id(), 0, "the thread that ran EAL init is the main lcore");
    assert_eq!(worker_lcores(), vec![1, 2]);

    // Each job sees its own lcore id and writes into data borrowed from this frame.
    let seen = [AtomicU32::new(u32::MAX), AtomicU32::new(u32::MAX)];
    std::thread::scope(|s| {
        for (i, l) in [1u32, 2].into_iter().enumerate() {
            let seen = &seen;
            spawn_on_lcore(s, l, format!("job-{l}"), move || seen[i].store(lcore_id(), Ordering::SeqCst)).expect("launch");
        }
    });
    assert_eq!(seen[0].load(Ordering::SeqCst), 1);
    // The lcore thread carries the job's name while it runs (what `top -H` shows).
    let comm = std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        spawn_on_lcore(s, 1, "worker-0".into(), move || tx.send(std::fs::read_to_string("/proc/thread-self/comm").unwrap()).unwrap()).expect("launch");
        rx.recv().unwrap()
    });
    assert_eq!(comm.trim_end(), "worker-0");
    assert_eq!(seen[1].load(Ordering::SeqCst), 2);

    // Refusals: the main lcore, an unknown lcore, a busy lcore, a caller off the main lcore.
    std::thread::scope(|s| {
        assert!(spawn_on_lcore(s, 0, "main".into(), || ()).is_err(), "the main lcore runs no job");
        assert!(spawn_on_lcore(s, 7, "unknown".into(), || ()).is_err(), "lcore 7 is not enabled");
        let (release, wait) = mpsc::channel::<()>();
        spawn_on_lcore(s, 1, "busy".into(), move || {
            let _ = wait.recv();
        })
        .expect("launch");
        let e = spawn_on_lcore(s, 1, "again".into(), || ()).expect_err("lcore 1 is busy");
        assert!(e.to_string().contains("rte_eal_remote_launch"), "{e}");
        let off_main = s.spawn(|| (lcore_id(), spawn_on_lcore(s, 2, "off-main".into(), || ()).map(|_| ()))).join().unwrap();
        assert_eq!(off_main.0, u32::MAX, "a plain thread has no lcore id");
        let e = off_main.1.expect_err("only the main lcore launches");
        assert!(e.to_string().contains("main lcore"), "{e}");
        release.send(()).unwrap();
    });

    // A panicking job is reported through its waiter's join, and the lcore is free again.
    let joined = std::thread::scope(|s| {
        let h = spawn_on_lcore(s, 2, "panics".into(), || panic!("job panicked")).expect("launch");
        h.join()
    });
    assert!(joined.is_err(), "the panic reaches the waiter's join");
    let ran = AtomicU32::new(0);
    std::thread::scope(|s| {
        let ran = &ran;
        spawn_on_lcore(s, 2, "after".into(), move || {
            ran.fetch_add(1, Ordering::SeqCst);
        })
        .expect("lcore 2 takes work again after a panic");
    });
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    wait_lcores();
    eal.cleanup().expect("cleanup");
}

//! The metrics endpoint's HTTP side alone: `metrics::serve` with a fixed exposition of
//! SIZE MB (copied from one kept string at most once a second, the body cache's
//! interval, so the time is the server's and the kernel's, not a rendering), scraped over
//! the loopback N times by one client, then N rounds of 4 clients at once.
//!
//!     scrape_http [SIZE_MB] [N]      (defaults 20 and 30)
//!
//! Prints min / median / max milliseconds per scrape (connect to the answer's last byte).

use std::io::{Read, Write};
use std::time::Instant;

fn scrape(addr: std::net::SocketAddr) -> f64 {
    let t = Instant::now();
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text\r\n\r\n").unwrap();
    let mut body = Vec::new();
    c.read_to_end(&mut body).unwrap();
    assert!(body.starts_with(b"HTTP/1.1 200 OK\r\n"));
    t.elapsed().as_secs_f64() * 1e3
}

fn line(what: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    println!("{what}: min {:.1} ms, median {:.1} ms, max {:.1} ms ({} scrapes)", ms[0], ms[ms.len() / 2], ms[ms.len() - 1], ms.len());
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("SIZE_MB N")).collect();
    let (size, n) = (args.first().copied().unwrap_or(20) << 20, args.get(1).copied().unwrap_or(30));
    let big = "x".repeat(size);
    let listener = spillway_dataplane::metrics::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let _ = spillway_dataplane::metrics::serve(listener, &stop, || big.clone());
        });
        scrape(addr);
        line(&format!("{} MB, one scraper", size >> 20), (0..n).map(|_| scrape(addr)).collect());
        let four: Vec<f64> = (0..n).flat_map(|_| std::thread::scope(|s2| (0..4).map(|_| s2.spawn(|| scrape(addr))).collect::<Vec<_>>().into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>())).collect();
        line(&format!("{} MB, 4 scrapers at once", size >> 20), four);
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
    });
}

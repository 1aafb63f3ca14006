//! The control loop's health log lines.

use super::*;
use std::sync::{Arc, Mutex};

/// Log output of a test subscriber, kept in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One endpoint of a group failing is logged with its endpoint's name, not as its backend
/// being unhealthy (fresh-user QA: `backend unhealthy service=web backend=web-z1
/// reason=...` without the endpoint).
#[test]
fn a_failed_endpoint_is_logged_with_its_name() {
    let out = Captured::default();
    let w = out.clone();
    let sub = tracing_subscriber::fmt().with_writer(move || w.clone()).with_ansi(false).without_time().finish();
    let ev = HealthEvent { service: "web".into(), backend: "web-z1".into(), endpoint: "b1".into(), healthy: false, rtt_ms: None, reason: "connect refused".into(), generation: 0 };
    tracing::subscriber::with_default(sub, || log_unhealthy(&ev));
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("endpoint unhealthy service=web backend=web-z1 endpoint=b1 reason=connect refused"), "{text}");
}

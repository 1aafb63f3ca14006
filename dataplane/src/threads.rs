//! Which role the calling thread has: a leaf module, so that code on either side (the
//! snapshot's reclamation probe on the control side, the worker loop that sets the role)
//! can ask without importing the other.

thread_local! {
    static ON_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread runs a worker loop (`fastpath::worker::run_loop` marks it).
pub fn on_worker_thread() -> bool {
    ON_WORKER.with(|f| f.get())
}

/// Marks the calling thread as a worker (`on`) or not; the worker loop sets it at its start
/// and clears it when it ends.
pub fn set_worker_thread(on: bool) {
    ON_WORKER.with(|f| f.set(on));
}

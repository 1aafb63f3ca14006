//! [`DpdkError`]: every failed DPDK call (negative return or null pointer) as a value naming
//! the call, its errno, DPDK's text (`rte_strerror`) and a hint for known set-up mistakes.

use dpdk_sys as sys;
use std::ffi::CStr;
use std::fmt;

/// A failed DPDK call: which call, the (positive) errno, DPDK's text for it and, for common
/// set-up mistakes, a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkError {
    /// The DPDK function (or safe-layer operation) that failed.
    pub call: &'static str,
    /// Positive errno / `rte_errno` value (0 when DPDK gave none).
    pub errno: i32,
    /// DPDK's error text (`rte_strerror`) plus context.
    pub message: String,
    /// What to try, for known causes.
    pub hint: Option<String>,
}

impl fmt::Display for DpdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.call, self.message)?;
        if self.errno != 0 {
            write!(f, " (errno {})", self.errno)?;
        }
        if let Some(h) = &self.hint {
            write!(f, "; hint: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for DpdkError {}

impl DpdkError {
    /// An error for `call` with positive `errno`, text from `rte_strerror` plus `context`.
    pub(super) fn new(call: &'static str, errno: i32, context: impl Into<String>) -> Self {
        let errno = errno.abs();
        let context = context.into();
        let text = strerror(errno);
        let message = if context.is_empty() {
            text
        } else {
            format!("{context}: {text}")
        };
        DpdkError {
            call,
            errno,
            message,
            hint: None,
        }
    }

    /// An error for `call` using the calling thread's `rte_errno`.
    pub(super) fn from_rte_errno(call: &'static str, context: impl Into<String>) -> Self {
        Self::new(call, rte_errno(), context)
    }

    pub(super) fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// Result alias of this module.
pub type Result<T, E = DpdkError> = std::result::Result<T, E>;

/// DPDK's text for `errno` (`rte_strerror`, which knows DPDK's own codes too).
pub fn strerror(errno: i32) -> String {
    // SAFETY: rte_strerror accepts any int and returns a pointer to a static or per-lcore
    // NUL-terminated string (never null); we copy it out immediately.
    unsafe {
        let p = sys::rte_strerror(errno.abs());
        if p.is_null() {
            return format!("error {errno}");
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// The calling thread's `rte_errno`.
pub fn rte_errno() -> i32 {
    // SAFETY: reads a thread-local int; valid on any thread.
    unsafe { sys::spw_errno() }
}

/// Maps a DPDK int return (negative errno on failure) to a `Result`.
pub(super) fn check(call: &'static str, ret: i32, context: impl FnOnce() -> String) -> Result<i32> {
    if ret < 0 {
        Err(DpdkError::new(call, -ret, context()))
    } else {
        Ok(ret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text() {
        let e = DpdkError::new("rte_eth_dev_start", -libc::EINVAL, "port x").with_hint("h");
        let s = e.to_string();
        assert!(s.starts_with("rte_eth_dev_start failed: port x: "), "{s}");
        assert!(s.contains("Invalid argument"), "{s}");
        assert!(s.contains("hint: h"));
    }
}

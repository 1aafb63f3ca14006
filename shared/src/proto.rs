//! Control protocol (placeholder).

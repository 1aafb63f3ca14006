//! Routing pipeline (placeholder; being written).

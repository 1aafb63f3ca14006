//! DPDK safe layer (placeholder; being written).

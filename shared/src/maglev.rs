//! Weighted Maglev tables (placeholder; being written).

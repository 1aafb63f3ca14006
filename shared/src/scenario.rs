//! Scenario runner (placeholder; being written).

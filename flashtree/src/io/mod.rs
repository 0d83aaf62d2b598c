//! I/O layer (placeholder, being written).

//! The core alone (placeholder, being written).
fn main() {}

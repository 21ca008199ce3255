//! matrix-channel's benchmark report (placeholder, being written).

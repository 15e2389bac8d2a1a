//! The SSH front door.

pub mod keys;

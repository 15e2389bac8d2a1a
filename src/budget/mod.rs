//! The cost meter and budgets (issue 25): what each session, project and user has spent, kept in
//! memory from what OpenCode reports (each session's cumulative `cost` in its
//! `session.updated` events and session lists, read by the inbox's one subscription per server),
//! and the one decision whether a prompt may start work on a budget that is spent.
//!
//! The decision is taken in the pipeline's admit phase, on the canonical route (the prompt
//! routes of the route table, whatever their spelling or front door), and only for those: no
//! other request touches the meter.

pub(crate) mod meter;

/// For `benches/meter.rs` only.
#[doc(hidden)]
pub use meter::bench::per_op_nanos as meter_bench;
pub(crate) use meter::{CostSeen, Meter};

//! What the judge, and each fault's part of it, reads: the scenario's expectation and the
//! evidence of its run.

use std::time::Duration;

use serde::Serialize;

use crate::check::{Faults, Findings, Hold};
use crate::client::Primitive;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    /// No overlap of believed-held intervals, fences only increase.
    Safe,
    /// A negative control: the checker must see the double grant (or, where the clients
    /// skip the Redlock fence raise, fences going back).
    Violation,
}

/// The evidence of one run, as a fault's own checks read it.
pub struct Evidence<'a> {
    /// What the scenario expects.
    pub expect: Expect,
    /// The lease of its locks.
    pub ttl: Duration,
    /// The lock kinds it ran.
    pub primitives: &'a [Primitive],
    /// Every kind's findings, added up.
    pub total: &'a Findings,
    /// Every hold, as the checker rebuilt it from the records.
    pub holds: &'a [Hold],
    /// What the harness did when.
    pub faults: &'a Faults,
    /// The guarded counters beside the locks were read (a single lock server).
    pub guarded: bool,
}

//! How big a run is: its rounds, its lease, its binaries and its lock kinds.

use std::path::PathBuf;
use std::time::Duration;

use crate::client::Primitive;

/// How big a run is.
#[derive(Debug, Clone)]
pub struct Config {
    /// Fault rounds per scenario.
    pub rounds: u32,
    /// The lease of every lock.
    pub ttl: Duration,
    /// The `dlock` binary the CLI clients run.
    pub dlock: PathBuf,
    /// This binary (the library clients and the writer).
    pub me: PathBuf,
    /// The lock kinds to run (each scenario runs those of them it can: see
    /// [`Scenario::kinds`]).
    pub primitives: Vec<Primitive>,
    /// Keep each scenario's records (and the clients' stderr) and say where.
    pub keep: bool,
}

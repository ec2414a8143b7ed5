//! The client processes. A **library client** (`dlock-torture client`) takes the lock
//! again and again through dlock's async or blocking API until its deadline (a Redlock
//! mutex over every `--redis` master, or another kind on one deployment). A **CLI
//! client** is a loop of `dlock run LOCK -- dlock-torture writer`, run by the harness; the
//! writer is one hold's work, trusting `dlock run` to keep the lock (or to kill it).
//!
//! A hold's work: three times, check the lock is still believed held, read the unfenced
//! counter, work a few milliseconds, then write the fenced store with the hold's fence
//! and the counter with what was read plus one. A pause that lands in the work is the
//! classic stale holder: its check passed, its write comes after the lock moved on.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;

mod locker;
mod work;

pub use work::{run_library, run_writer};

/// The lock kinds the harness runs, each with the oracle of how many may hold at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Primitive {
    /// The plain mutex.
    Mutex,
    /// The FIFO fair mutex.
    Fair,
    /// The write lock of a read-write lock.
    Write,
    /// The read lock of the same read-write lock as `write`: readers share it, and
    /// none may hold it beside a writer.
    Read,
    /// The reentrant mutex: each hold takes the lock again inside itself (the same
    /// owner) and gives the inner hold back before the outer one.
    Reentrant,
    /// A semaphore of one permit.
    Sem1,
    /// A semaphore of three permits: at most three at once.
    Sem3,
    /// The Redlock mutex: granted by a majority of independent masters.
    Redlock,
    /// Leadership of an election (`campaign`/`resign`, `dlock elect`): one leader at a
    /// time, its term the fence.
    Elect,
    /// A multi-lock over two names (`Client::multi_lock`, `dlock run --also`): one
    /// holder of both at a time, its fence the first name's (on a Cluster the two names
    /// are in different slots, taken one slot at a time).
    Multi,
}

impl Primitive {
    pub const ALL: [Primitive; 10] = [
        Primitive::Mutex,
        Primitive::Fair,
        Primitive::Write,
        Primitive::Read,
        Primitive::Reentrant,
        Primitive::Sem1,
        Primitive::Sem3,
        Primitive::Redlock,
        Primitive::Elect,
        Primitive::Multi,
    ];

    /// The kinds that live on one server (or one master and its replicas).
    pub const SINGLE: [Primitive; 7] = [
        Primitive::Mutex,
        Primitive::Fair,
        Primitive::Write,
        Primitive::Sem1,
        Primitive::Sem3,
        Primitive::Elect,
        Primitive::Multi,
    ];

    /// The second name a multi-lock takes beside [`lock_name`](Self::lock_name).
    pub const MULTI_SECOND: &'static str = "torture:multi-pair";

    pub fn name(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::Fair => "fair",
            Primitive::Write => "write",
            Primitive::Read => "read",
            Primitive::Reentrant => "reentrant",
            Primitive::Sem1 => "sem1",
            Primitive::Sem3 => "sem3",
            Primitive::Redlock => "redlock",
            Primitive::Elect => "elect",
            Primitive::Multi => "multi",
        }
    }

    /// The lock it takes: the read side shares the write side's read-write lock.
    pub fn lock_name(self) -> String {
        match self {
            Primitive::Read => Primitive::Write.lock_name(),
            _ => format!("torture:{}", self.name()),
        }
    }

    /// How many may hold at once: the oracle. (Readers: any number, but none beside a
    /// writer, which the judge checks over both sides.)
    pub fn limit(self) -> usize {
        match self {
            Primitive::Sem3 => 3,
            Primitive::Read => usize::MAX,
            _ => 1,
        }
    }

    /// One holder at a time: fences order the holders, so the fenced store and the
    /// unfenced counter apply (three concurrent permit holders legitimately interleave).
    pub fn exclusive(self) -> bool {
        self.limit() == 1
    }

    /// The `dlock` subcommand its CLI clients run: `run`, or `elect` for leadership.
    pub fn cli_verb(self) -> &'static str {
        match self {
            Primitive::Elect => "elect",
            _ => "run",
        }
    }

    /// Whether `dlock run` (or `dlock elect`) clients take it too: all but the reentrant
    /// mutex, whose holds have no inside for a `dlock run` to re-enter.
    pub fn has_cli_clients(self) -> bool {
        self != Primitive::Reentrant
    }

    /// The `dlock run` (or `elect`) flags that take this kind of lock.
    pub fn cli_flags(self) -> &'static [&'static str] {
        match self {
            Primitive::Elect => &["--value", "torture"],
            Primitive::Mutex => &[],
            Primitive::Fair => &["--fair"],
            Primitive::Write => &["--write"],
            Primitive::Read => &["--read"],
            // No CLI clients: a `dlock run` hold has no inside to re-enter.
            Primitive::Reentrant => &[],
            Primitive::Sem1 => &["--permits", "1"],
            Primitive::Sem3 => &["--permits", "3"],
            // The mutex over every `--redis` master: no flag.
            Primitive::Redlock => &[],
            Primitive::Multi => &["--also", Primitive::MULTI_SECOND],
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Api {
    Async,
    Blocking,
}

/// A library client process.
#[derive(Debug, Args)]
pub struct ClientArgs {
    #[arg(long, value_enum)]
    pub api: Api,
    #[arg(long, value_enum)]
    pub primitive: Primitive,
    /// The lock server (or the proxy in front of it); for a Redlock, each of its masters
    /// (repeated).
    #[arg(long, required_unless_present_any = ["sentinel", "cluster"])]
    pub redis: Vec<String>,
    /// Or the nodes of a Redis Cluster (repeated): the seeds its slot map is learnt from.
    #[arg(long, conflicts_with_all = ["redis", "sentinel"])]
    pub cluster: Vec<String>,
    /// Or the sentinels that name the lock server (with --service).
    #[arg(long, requires = "service")]
    pub sentinel: Vec<String>,
    #[arg(long)]
    pub service: Option<String>,
    /// Replicas that must acknowledge every grant, extend and renewal.
    #[arg(long, requires = "replica_timeout_ms")]
    pub replicas: Option<u32>,
    #[arg(long)]
    pub replica_timeout_ms: Option<u64>,
    /// The store server.
    #[arg(long)]
    pub store: String,
    #[arg(long)]
    pub lock: String,
    #[arg(long)]
    pub ttl_ms: u64,
    /// One work step lasts between half of this and this (ms).
    #[arg(long)]
    pub work_ms: u64,
    /// Stop taking the lock at this CLOCK_MONOTONIC instant (ns).
    #[arg(long)]
    pub until_ns: u64,
    /// This client's name in the records.
    #[arg(long)]
    pub client: String,
    /// Rest between holds for between half of this and this (ms), beside a few ms.
    #[arg(long, default_value_t = 0)]
    pub rest_ms: u64,
    #[arg(long)]
    pub log: PathBuf,
    /// A file that exists while this client holds the lock (the harness picks its fault
    /// targets from these).
    #[arg(long)]
    pub holding: PathBuf,
    /// A Redlock takes the largest fence of a majority without raising the others to it
    /// (the library's hidden test switch): the clock offset's negative control.
    #[arg(long)]
    pub without_fence_raise: bool,
}

/// One `dlock run` hold's work.
#[derive(Debug, Args)]
pub struct WriterArgs {
    #[arg(long, value_enum)]
    pub primitive: Primitive,
    #[arg(long)]
    pub store: String,
    #[arg(long)]
    pub client: String,
    #[arg(long)]
    pub hold: u64,
    /// One work step lasts between half of this and this (ms).
    #[arg(long)]
    pub work_ms: u64,
    #[arg(long)]
    pub log: PathBuf,
    #[arg(long)]
    pub holding: PathBuf,
}

/// The data key of the guarded counter, beside each lock (`{LOCK}:data:counter`).
pub const GUARDED_COUNTER: &str = "counter";

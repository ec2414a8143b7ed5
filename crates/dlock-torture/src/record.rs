//! What the client processes record, one JSON line per event in a file of their own, on
//! `CLOCK_MONOTONIC`: the one clock every process of this machine shares, so intervals
//! from different processes compare directly.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::LazyLock;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Nanoseconds on `CLOCK_MONOTONIC`.
pub fn mono_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass and nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// One reading of both clocks, to place a std `Instant` (a guard's deadline) on
/// `CLOCK_MONOTONIC` (which is what `Instant` reads on Linux; the pair fixes the offset).
static ORIGIN: LazyLock<(Instant, u64)> = LazyLock::new(|| (Instant::now(), mono_ns()));

/// `at` in nanoseconds on `CLOCK_MONOTONIC`.
pub fn instant_ns(at: Instant) -> u64 {
    let (instant, ns) = *ORIGIN;
    if at >= instant {
        ns + (at - instant).as_nanos() as u64
    } else {
        ns.saturating_sub((instant - at).as_nanos() as u64)
    }
}

/// One recorded event. `hold` numbers a client's holds; with `client` it names one hold.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// The acquire returned: the client believes it holds from `at`.
    Begin {
        client: String,
        hold: u64,
        at: u64,
        fence: u64,
        /// The process that acts under the lock (for a `dlock run` client, the command).
        pid: u32,
    },
    /// A write to the fenced store with the hold's fence; `accepted` is the store's answer.
    Write {
        client: String,
        hold: u64,
        at: u64,
        fence: u64,
        accepted: bool,
    },
    /// A read-modify-write of the unfenced counter was completed.
    Increment { client: String, hold: u64 },
    /// A guarded read-modify-write of the counter kept beside the lock (`dlock`'s guarded
    /// writes) was applied: Redis found the hold held at the read and at the write.
    GuardedIncrement {
        client: String,
        hold: u64,
        /// The value written: two increments that wrote the same value lost one.
        value: u64,
    },
    /// Its write was refused: the hold was gone when Redis checked it (a late write).
    GuardedRefused { client: String, hold: u64 },
    /// A step of work began (still believing the lock held, for a library client): the
    /// last sign of life of a hold whose process was then killed.
    Step { client: String, hold: u64, at: u64 },
    /// A library client's call to take the lock, from `from` to `to`: granted, or it
    /// gave up (busy past its wait, Redis unreachable or refusing).
    Attempt {
        client: String,
        from: u64,
        to: u64,
        granted: bool,
    },
    /// A reentrant hold's inner hold, given back before the outer one.
    Nested {
        client: String,
        hold: u64,
        /// Granted with the outer hold's fence (false: refused, or another fence).
        same_fence: bool,
        /// After the inner hold was given back, Redis still had the outer one: `false`
        /// means the inner release freed the lock; `None` when it could not be judged.
        outer_kept: Option<bool>,
    },
    /// The belief ended at `at`: released, or the local deadline passed first.
    End {
        client: String,
        hold: u64,
        at: u64,
        /// The lost signal had fired (`Taken` or `Expired`).
        lost: bool,
    },
}

/// An append-only event file of one process.
pub struct Recorder {
    file: File,
}

impl Recorder {
    pub fn create(path: &Path) -> std::io::Result<Recorder> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Recorder { file })
    }

    /// Appends one line and flushes it to the kernel, so a `kill -9` right after loses
    /// nothing already recorded.
    pub fn record(&mut self, event: &Event) {
        let mut line = serde_json::to_vec(event).expect("events serialize");
        line.push(b'\n');
        // A full disk would make the checker blind: fail loudly.
        self.file.write_all(&line).expect("record an event");
    }
}

/// Every event recorded in `dir` (all `*.jsonl` files).
pub fn read_all(dir: &Path) -> std::io::Result<Vec<Event>> {
    let mut events = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            for line in std::fs::read_to_string(&path)?.lines() {
                // A process killed mid-write may leave a torn last line: skip it.
                if let Ok(event) = serde_json::from_str(line) {
                    events.push(event);
                }
            }
        }
    }
    Ok(events)
}

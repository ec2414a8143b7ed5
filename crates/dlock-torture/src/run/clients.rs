//! A run's client processes: the slots that keep each client kind running, the clients a
//! fault starts itself, and which of them hold a lock now.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, SystemTime};

use super::process::{interrupted, running, sleep, Live};
use crate::client::Primitive;
use crate::config::Config;
use crate::record::mono_ns;

/// How long a lock with replica acknowledgement waits for the replica.
const REPLICA_TIMEOUT: Duration = Duration::from_millis(500);

/// One scenario's run, as its clients and its fault see it.
pub struct Run<'a> {
    pub(crate) dir: &'a Path,
    /// Where the clients find the lock server: `--redis URL`, or `--sentinel URL ...
    /// --service NAME`.
    pub(crate) topology: Vec<String>,
    /// Every lock's writes wait for one replica.
    pub(crate) acknowledged: bool,
    /// The lock servers keep their data across a crash (AOF, appendfsync always).
    pub(crate) durable: bool,
    /// The library clients raise Redlock fences (false: `--without-fence-raise`).
    pub(crate) raise_fences: bool,
    /// One work step lasts between half of this and this (ms).
    pub(crate) work_ms: u64,
    pub(crate) store_url: String,
    pub(crate) ttl: Duration,
    pub(crate) until_ns: u64,
    pub(crate) config: &'a Config,
    pub(crate) live: Live,
    /// The threads of clients a fault started (see [`Run::spawn_one`]), to be waited for
    /// with the slots.
    pub(crate) extra: Mutex<Vec<thread::JoinHandle<()>>>,
    /// The processes paused so far, with when (wall clock, as the holding files' times):
    /// a hold begun before its process's pause is not killed (see [`crash_holders`]).
    pub(crate) paused: Mutex<Vec<(Vec<u32>, SystemTime)>>,
}

impl Run<'_> {
    pub(crate) fn holding_dir(&self) -> PathBuf {
        self.dir.join("holding")
    }

    /// A slot keeps one client alive until the run's end (a killed one is replaced).
    pub(crate) fn spawn_slot(
        &self,
        primitive: Primitive,
        kind: &'static str,
        slot: usize,
    ) -> thread::JoinHandle<()> {
        self.spawn_clients(
            primitive,
            (kind, slot),
            self.topology.clone(),
            self.until_ns,
            true,
        )
    }

    /// One library client (async API) of `primitive` that finds the lock server by
    /// `topology` and takes the lock until `until_ns`, named `<primitive>/<kind>-<slot>.1`;
    /// not replaced when it ends. The run waits for it as for its slots.
    pub(crate) fn spawn_one(
        &self,
        primitive: Primitive,
        (kind, slot): (&'static str, usize),
        topology: Vec<String>,
        until_ns: u64,
    ) {
        let handle = self.spawn_clients(primitive, (kind, slot), topology, until_ns, false);
        self.extra.lock().unwrap().push(handle);
    }

    /// Runs clients of `kind` (`cli` for `dlock run`, `lib-blocking` for the blocking
    /// API, anything else for the async API) one after the other until `until_ns`, each
    /// replaced when it ends if `replace`.
    fn spawn_clients(
        &self,
        primitive: Primitive,
        (kind, slot): (&'static str, usize),
        topology: Vec<String>,
        until_ns: u64,
        replace: bool,
    ) -> thread::JoinHandle<()> {
        let (dir, live) = (self.dir.to_path_buf(), self.live.clone());
        let store_url = self.store_url.clone();
        let (acknowledged, raise_fences, work_ms) =
            (self.acknowledged, self.raise_fences, self.work_ms);
        let (ttl, config) = (self.ttl, self.config.clone());
        let lock = primitive.lock_name();
        // A writer among readers rests between its holds, half a lease to a lease:
        // writers that always want the lock keep every reader waiting behind them (what
        // a writer-preferring lock does), and no writer would wait for readers.
        let rest_ms =
            match primitive == Primitive::Write && config.primitives.contains(&Primitive::Read) {
                true => ttl.as_millis() as u64,
                false => 0,
            };
        let holding_dir = self.holding_dir();
        thread::spawn(move || {
            let (mut generation, mut started) = (0u64, false);
            while mono_ns() < until_ns && interrupted().is_none() && (replace || !started) {
                generation += 1;
                let client = format!("{}/{kind}-{slot}.{generation}", primitive.name());
                let file = client.replace('/', "_");
                let log = dir.join(format!("{file}.jsonl"));
                let holding = holding_dir.join(&file);
                let mut command = if kind == "cli" {
                    let mut command = Command::new(&config.dlock);
                    command.args(&topology);
                    if acknowledged {
                        command.args(["--replicas", "1", "--replica-timeout"]);
                        command.arg(format!("{}ms", REPLICA_TIMEOUT.as_millis()));
                    }
                    command
                        .arg(primitive.cli_verb())
                        .args(["--ttl", &format!("{}ms", ttl.as_millis())])
                        .args(["--wait", &format!("{}ms", 3 * ttl.as_millis())])
                        .args(primitive.cli_flags())
                        .args(["-q", &lock, "--"])
                        .arg(&config.me)
                        .args(["writer", "--primitive", primitive.name()])
                        .args(["--store", &store_url, "--client", &client])
                        .args(["--hold", "1"])
                        .args(["--work-ms", &work_ms.to_string()])
                        .arg("--log")
                        .arg(&log)
                        .arg("--holding")
                        .arg(&holding);
                    command
                } else {
                    let mut command = Command::new(&config.me);
                    command
                        .arg("client")
                        .args([
                            "--api",
                            if kind == "lib-blocking" {
                                "blocking"
                            } else {
                                "async"
                            },
                        ])
                        .args(["--primitive", primitive.name()])
                        .args(&topology)
                        .args(["--store", &store_url, "--lock", &lock])
                        .args(["--ttl-ms", &ttl.as_millis().to_string()])
                        .args(["--work-ms", &work_ms.to_string()])
                        .args(["--until-ns", &until_ns.to_string()])
                        .args(["--client", &client])
                        .args(["--rest-ms", &rest_ms.to_string()])
                        .arg("--log")
                        .arg(&log)
                        .arg("--holding")
                        .arg(&holding);
                    if acknowledged {
                        command.args(["--replicas", "1", "--replica-timeout-ms"]);
                        command.arg(REPLICA_TIMEOUT.as_millis().to_string());
                    }
                    if !raise_fences {
                        command.arg("--without-fence-raise");
                    }
                    command
                };
                let stderr = match config.keep {
                    true => std::fs::File::create(dir.join(format!("{file}.stderr")))
                        .map_or_else(|_| Stdio::null(), Stdio::from),
                    false => Stdio::null(),
                };
                command
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(stderr);
                // SAFETY: prctl is async-signal-safe; the child dies with this slot's
                // thread, which outlives it unless the harness itself is killed.
                unsafe {
                    command.pre_exec(|| {
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                        Ok(())
                    });
                }
                let Ok(mut child) = command.spawn() else {
                    thread::sleep(Duration::from_millis(100));
                    continue;
                };
                started = true;
                live.lock().unwrap().insert(child.id());
                let spawned = mono_ns();
                let status = child.wait();
                let quick_exit = mono_ns() - spawned < 100_000_000;
                live.lock().unwrap().remove(&child.id());
                let _ = std::fs::remove_file(&holding);
                // A client that cannot run at all must not be respawned in a tight loop
                // (the judge reports a client kind that never held any lock).
                // (A real hold lasts most of a second; a busy `dlock run` waits 3 leases.)
                if quick_exit
                    || status.map_or(true, |s| s.code().is_some_and(|c| c != 0 && c != 75))
                {
                    sleep(Duration::from_millis(200));
                }
                // A `dlock run` is one hold: its rest comes between the runs.
                if kind == "cli" && rest_ms > 0 {
                    let ms = rand::Rng::random_range(&mut rand::rng(), rest_ms / 2..rest_ms);
                    sleep(Duration::from_millis(ms));
                }
            }
        })
    }

    /// The holders now, with the pids a fault targets: a library client's own pid; for a
    /// `dlock run` client the wrapper's pid and its command's (which leads its group).
    pub(crate) fn holders(&self, primitive: Primitive) -> Vec<(String, Vec<u32>)> {
        let prefix = format!("{}_", primitive.name());
        let Ok(entries) = std::fs::read_dir(self.holding_dir()) else {
            return Vec::new();
        };
        entries
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                if !name.starts_with(&prefix) {
                    return None;
                }
                let text = std::fs::read_to_string(self.holding_dir().join(&name)).ok()?;
                let pids: Vec<u32> = text
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect();
                // Only running processes: a killed client's file may linger a moment, and
                // so may a `dlock run` command's that dlock stopped on loss (its wrapper
                // has yet to reap it). Killing that wrapper would count the dead command as
                // believing until the kill (the soak found such an overlap that was none).
                let alive = !pids.is_empty() && pids.iter().all(|&pid| running(pid));
                alive.then_some((name, pids))
            })
            .collect()
    }
}

/// How long one step of a hold's work lasts at most: half the lease, so a hold (three
/// steps, 0.75 to 1.5 leases) outlasts its first lease and lives on renewals, and a fault
/// lands inside holds more often than between them.
pub(crate) fn work_ms(ttl: Duration) -> u64 {
    (ttl.as_millis() as u64 / 2).max(2)
}

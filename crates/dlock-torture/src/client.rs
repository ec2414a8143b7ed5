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
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use dlock::{LockOptions, Wait};
use rand::Rng;
use serde::Serialize;

use crate::record::{instant_ns, mono_ns, Event, Recorder};
use crate::store::Store;

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

/// A granted lock: the one guard, of the API that granted it, or a leadership.
enum Held {
    Async(tokio::runtime::Handle, dlock::AnyGuard),
    Blocking(dlock::blocking::AnyGuard),
    AsyncLeading(tokio::runtime::Handle, dlock::Leadership),
    BlockingLeading(dlock::blocking::Leadership),
}

impl Held {
    fn valid_until(&self) -> Instant {
        match self {
            Held::Async(_, guard) => guard.valid_until(),
            Held::Blocking(guard) => guard.valid_until(),
            Held::AsyncLeading(_, leading) => leading.valid_until(),
            Held::BlockingLeading(leading) => leading.valid_until(),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::Async(_, guard) => guard.lost_signal().lost().is_some(),
            Held::Blocking(guard) => guard.lost().is_some(),
            Held::AsyncLeading(_, leading) => leading.lost_signal().lost().is_some(),
            Held::BlockingLeading(leading) => leading.lost().is_some(),
        }
    }

    /// The grant's fence; a leadership's term.
    fn fence(&self) -> dlock::Result<u64> {
        match self {
            Held::Async(runtime, guard) => runtime.block_on(guard.fence()),
            Held::Blocking(guard) => guard.fence(),
            Held::AsyncLeading(_, leading) => Ok(leading.term()),
            Held::BlockingLeading(leading) => Ok(leading.term()),
        }
    }

    /// Gives the hold back; a leadership resigns.
    fn unlock(self) -> dlock::Result<()> {
        match self {
            Held::Async(runtime, guard) => runtime.block_on(guard.unlock()),
            Held::Blocking(guard) => guard.unlock(),
            Held::AsyncLeading(runtime, leading) => runtime.block_on(leading.resign()),
            Held::BlockingLeading(leading) => leading.resign(),
        }
    }

    fn apply(&self, batch: &dlock::Guarded) -> dlock::Result<Vec<dlock::redis::Value>> {
        match self {
            Held::Async(runtime, guard) => runtime.block_on(guard.apply(batch)),
            Held::Blocking(guard) => guard.apply(batch),
            Held::AsyncLeading(runtime, leading) => runtime.block_on(leading.apply(batch)),
            Held::BlockingLeading(leading) => leading.apply(batch),
        }
    }
}

/// The data key of the guarded counter, beside each lock (`{LOCK}:data:counter`).
pub const GUARDED_COUNTER: &str = "counter";

/// Applies a guarded batch for the hold the work is done under.
type Apply<'a> = &'a dyn Fn(&dlock::Guarded) -> dlock::Result<Vec<dlock::redis::Value>>;

/// How a client reaches its lock: the async API on a runtime of its own, or the
/// blocking API, over one deployment or a Redlock's masters.
struct Locker {
    acquire: Box<dyn Fn() -> dlock::Result<Held>>,
    shutdown: Box<dyn FnOnce()>,
}

/// The lock of `primitive` named `name` on `client`.
fn lock_of(
    client: &dlock::Client,
    primitive: Primitive,
    name: &str,
    options: LockOptions,
) -> dlock::Result<dlock::AnyLock> {
    Ok(match primitive {
        Primitive::Mutex => client.mutex_with(name, options)?.into(),
        Primitive::Fair => client.fair_mutex_with(name, options)?.into(),
        Primitive::Write => client.rwlock_with(name, options)?.writer().into(),
        Primitive::Read => client.rwlock_with(name, options)?.reader().into(),
        Primitive::Reentrant => client.reentrant_mutex_with(name, options)?.into(),
        Primitive::Sem1 | Primitive::Sem3 => client
            .semaphore_with(name, primitive.limit() as u32, options)?
            .into(),
        Primitive::Multi => client
            .multi_lock_with(&[name, Primitive::MULTI_SECOND], options)?
            .into(),
        Primitive::Redlock => unreachable!("a Redlock mutex is made by its handle"),
        Primitive::Elect => unreachable!("an election is campaigned, not locked"),
    })
}

impl Locker {
    fn connect(args: &ClientArgs, options: LockOptions) -> dlock::Result<Locker> {
        let (name, primitive) = (args.lock.as_str(), args.primitive);
        if primitive == Primitive::Redlock {
            return Locker::connect_redlock(args, options);
        }
        let builder = match (args.redis.first(), args.service.as_deref()) {
            (Some(url), _) => dlock::Client::builder(url),
            (None, _) if !args.cluster.is_empty() => {
                dlock::Client::cluster_builder(args.cluster.clone())
            }
            (None, service) => {
                dlock::Client::sentinel_builder(args.sentinel.clone(), service.unwrap_or_default())
            }
        };
        let options = match (args.replicas, args.replica_timeout_ms) {
            (Some(count), Some(ms)) => options.replicas(count, Duration::from_millis(ms)),
            _ => options,
        };
        if primitive == Primitive::Elect {
            return Locker::connect_election(args, builder, options);
        }
        Ok(match args.api {
            Api::Async => {
                let runtime = std::sync::Arc::new(async_runtime());
                let client = runtime.block_on(builder.connect())?;
                let lock = lock_of(&client, primitive, name, options)?;
                let on = runtime.clone();
                Locker {
                    acquire: Box::new(move || {
                        Ok(Held::Async(on.handle().clone(), on.block_on(lock.lock())?))
                    }),
                    shutdown: Box::new(move || runtime.block_on(client.shutdown())),
                }
            }
            Api::Blocking => {
                let client = dlock::blocking::Client::connect_with(builder)?;
                let lock = match primitive {
                    Primitive::Mutex => client.mutex_with(name, options)?.into_any(),
                    Primitive::Fair => client.fair_mutex_with(name, options)?.into_any(),
                    Primitive::Write => client.rwlock_with(name, options)?.writer().into_any(),
                    Primitive::Read => client.rwlock_with(name, options)?.reader().into_any(),
                    Primitive::Reentrant => client.reentrant_mutex_with(name, options)?.into_any(),
                    Primitive::Sem1 | Primitive::Sem3 => client
                        .semaphore_with(name, primitive.limit() as u32, options)?
                        .into_any(),
                    Primitive::Multi => client
                        .multi_lock_with(&[name, Primitive::MULTI_SECOND], options)?
                        .into_any(),
                    Primitive::Redlock => unreachable!("connected by connect_redlock"),
                    Primitive::Elect => unreachable!("connected by connect_election"),
                };
                Locker {
                    acquire: Box::new(move || Ok(Held::Blocking(lock.lock()?))),
                    shutdown: Box::new(move || client.shutdown()),
                }
            }
        })
    }

    /// Campaigns in the election named `--lock`, proclaiming the client's name.
    fn connect_election(
        args: &ClientArgs,
        builder: dlock::ClientBuilder,
        options: LockOptions,
    ) -> dlock::Result<Locker> {
        let value = args.client.clone();
        Ok(match args.api {
            Api::Async => {
                let runtime = std::sync::Arc::new(async_runtime());
                let client = runtime.block_on(builder.connect())?;
                let election = client.election_with(&args.lock, options)?;
                let on = runtime.clone();
                Locker {
                    acquire: Box::new(move || {
                        let leading = on.block_on(election.campaign(&value))?;
                        Ok(Held::AsyncLeading(on.handle().clone(), leading))
                    }),
                    shutdown: Box::new(move || runtime.block_on(client.shutdown())),
                }
            }
            Api::Blocking => {
                let client = dlock::blocking::Client::connect_with(builder)?;
                let election = client.election_with(&args.lock, options)?;
                Locker {
                    acquire: Box::new(move || {
                        Ok(Held::BlockingLeading(election.campaign(&value)?))
                    }),
                    shutdown: Box::new(move || client.shutdown()),
                }
            }
        })
    }

    /// A Redlock over every `--redis` master. A master frozen at connect time would hold
    /// the connect up for the default 5 s: a lease is plenty for a healthy one.
    fn connect_redlock(args: &ClientArgs, options: LockOptions) -> dlock::Result<Locker> {
        let mut builder = dlock::Client::redlock_builder(args.redis.clone())
            .connect_timeout(Duration::from_millis(args.ttl_ms));
        if args.without_fence_raise {
            builder = builder.without_fence_raise();
        }
        Ok(match args.api {
            Api::Async => {
                let runtime = std::sync::Arc::new(async_runtime());
                let redlock = runtime.block_on(builder.connect())?;
                let lock: dlock::AnyLock = redlock.mutex_with(&args.lock, options)?.into();
                let on = runtime.clone();
                Locker {
                    acquire: Box::new(move || {
                        Ok(Held::Async(on.handle().clone(), on.block_on(lock.lock())?))
                    }),
                    shutdown: Box::new(move || runtime.block_on(redlock.shutdown())),
                }
            }
            Api::Blocking => {
                let redlock = dlock::blocking::Redlock::connect_with(builder)?;
                let lock = redlock.mutex_with(&args.lock, options)?.into_any();
                Locker {
                    acquire: Box::new(move || Ok(Held::Blocking(lock.lock()?))),
                    shutdown: Box::new(move || redlock.shutdown()),
                }
            }
        })
    }

    fn acquire(&self) -> dlock::Result<Held> {
        (self.acquire)()
    }

    fn shutdown(self) {
        (self.shutdown)()
    }
}

/// The runtime an async client runs its lock calls on.
fn async_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn pause_ms(range: std::ops::Range<u64>) {
    std::thread::sleep(Duration::from_millis(rand::rng().random_range(range)));
}

/// Connects to the store, retrying until `until_ns` (it never fails in the harness, but a
/// client must not die of a slow start).
fn store(url: &str, primitive: Primitive, until_ns: u64) -> Option<Store> {
    loop {
        match Store::connect(url, primitive.name()) {
            Ok(store) => return Some(store),
            Err(_) if mono_ns() < until_ns => pause_ms(20..50),
            Err(_) => return None,
        }
    }
}

/// The work of one hold: three steps of check, read, work, fenced write, unfenced write.
/// Without a store (the semaphore of three, whose holders legitimately interleave) a
/// step is check and work only. `believe` is the client's check that it still holds the
/// lock; a step whose check fails stops the work and returns when the belief was found
/// ended. With `guarded` (a library client on a single lock server), each step also
/// reads the guarded counter beside the lock with the unfenced read and writes it with
/// the fenced write, both as guarded writes: a pause in the work makes its write late.
fn work(
    mut store: Option<&mut Store>,
    guarded: Option<Apply>,
    recorder: &mut Recorder,
    (client, hold, fence): (&str, u64, u64),
    work_ms: u64,
    believe: &dyn Fn() -> bool,
) -> Option<u64> {
    for _ in 0..3 {
        if !believe() {
            return Some(mono_ns());
        }
        recorder.record(&Event::Step {
            client: client.to_string(),
            hold,
            at: mono_ns(),
        });
        let Some(store) = store.as_deref_mut() else {
            pause_ms(work_ms / 2..work_ms);
            continue;
        };
        let Ok(read) = store.read_counter() else {
            continue;
        };
        let guarded_read = guarded.and_then(|apply| {
            let read = apply(&dlock::Guarded::new().get(GUARDED_COUNTER)).ok()?;
            let value = dlock::redis::from_redis_value::<Option<u64>>(read.first()?.clone());
            Some(value.ok()?.unwrap_or(0))
        });
        pause_ms(work_ms / 2..work_ms);
        let at = mono_ns();
        let Ok(accepted) = store.fenced_write(fence) else {
            continue;
        };
        recorder.record(&Event::Write {
            client: client.to_string(),
            hold,
            at,
            fence,
            accepted,
        });
        if let (Some(apply), Some(value)) = (guarded, guarded_read) {
            let client = client.to_string();
            match apply(&dlock::Guarded::new().set(GUARDED_COUNTER, value + 1)) {
                Ok(_) => recorder.record(&Event::GuardedIncrement {
                    client,
                    hold,
                    value: value + 1,
                }),
                Err(dlock::Error::Lost { .. }) => {
                    recorder.record(&Event::GuardedRefused { client, hold })
                }
                // Unreachable or refusing: neither surely applied nor refused.
                Err(_) => {}
            }
        }
        if store.write_counter(read + 1).is_ok() {
            recorder.record(&Event::Increment {
                client: client.to_string(),
                hold,
            });
        }
    }
    None
}

/// A reentrant hold's inner hold, after the work: whether it was granted with the outer
/// hold's fence (`false` when it was not granted at all), and, once it is given back,
/// whether Redis still has the outer hold (a guarded read beside the lock); `None` when
/// that cannot be judged: the outer belief had ended, or Redis did not answer.
fn nested(
    inner: dlock::Result<Held>,
    outer: &Held,
    fence: u64,
    believe: &dyn Fn() -> bool,
) -> (bool, Option<bool>) {
    let Ok(inner) = inner else {
        return (false, None);
    };
    let same_fence = inner.fence().is_ok_and(|f| f == fence);
    if inner.unlock().is_err() || !believe() {
        return (same_fence, None);
    }
    let outer_kept = match outer.apply(&dlock::Guarded::new().get(GUARDED_COUNTER)) {
        Ok(_) => Some(true),
        // Gone while the belief still stands: the inner release freed the lock (a
        // belief cannot outlive the hold in Redis otherwise: its deadline comes first).
        Err(dlock::Error::Lost { .. }) if believe() => Some(false),
        Err(_) => None,
    };
    (same_fence, outer_kept)
}

/// `dlock-torture client`: takes the lock through the library until `until_ns`.
pub fn run_library(args: ClientArgs) -> i32 {
    // With --keep the harness keeps this stderr: RUST_LOG=dlock=debug shows every wait.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut recorder = Recorder::create(&args.log).expect("create the client's record");
    let ttl = Duration::from_millis(args.ttl_ms);
    let options = LockOptions::default()
        .renewed(ttl)
        .wait(Wait::Timeout(ttl * 3));
    let locker = loop {
        match Locker::connect(&args, options) {
            Ok(locker) => break locker,
            Err(_) if mono_ns() < args.until_ns => pause_ms(50..100),
            Err(err) => {
                eprintln!("{}: could not connect: {err}", args.client);
                return 1;
            }
        }
    };
    let mut store = match args.primitive.exclusive() {
        true => match store(&args.store, args.primitive, args.until_ns) {
            Some(store) => Some(store),
            None => return 1,
        },
        false => None,
    };
    // Guarded writes need the hold at one key on one server: the counter is read back
    // from it (a multi-lock's hold is at two keys).
    let guarded = args.primitive.exclusive()
        && !matches!(args.primitive, Primitive::Redlock | Primitive::Multi)
        && args.redis.len() == 1;
    let mut hold = 0;
    while mono_ns() < args.until_ns {
        let asked = mono_ns();
        let acquired = locker.acquire();
        let begun = mono_ns();
        recorder.record(&Event::Attempt {
            client: args.client.clone(),
            from: asked,
            to: begun,
            granted: acquired.is_ok(),
        });
        let guard = match acquired {
            Ok(guard) => guard,
            // Busy past the wait, Redis unreachable or refusing: try again.
            Err(_) => {
                pause_ms(10..30);
                continue;
            }
        };
        hold += 1;
        let Ok(fence) = guard.fence() else {
            // Lost before the fence could be drawn: nothing was believed.
            let _ = guard.unlock();
            continue;
        };
        recorder.record(&Event::Begin {
            client: args.client.clone(),
            hold,
            at: begun,
            fence,
            pid: std::process::id(),
        });
        let _ = std::fs::write(&args.holding, format!("{}", std::process::id()));
        // The reentrant mutex's hold takes the lock again inside itself, as nested code
        // of the same owner would; the work runs under both holds.
        let inner = match args.primitive {
            Primitive::Reentrant => Some(locker.acquire()),
            _ => None,
        };
        let believe = || !guard.is_lost() && Instant::now() < guard.valid_until();
        let apply = |batch: &dlock::Guarded| guard.apply(batch);
        let belief_ended = work(
            store.as_mut(),
            guarded.then_some(&apply as Apply),
            &mut recorder,
            (&args.client, hold, fence),
            args.work_ms,
            &believe,
        );
        if let Some(inner) = inner {
            let nested = nested(inner, &guard, fence, &believe);
            recorder.record(&Event::Nested {
                client: args.client.clone(),
                hold,
                same_fence: nested.0,
                outer_kept: nested.1,
            });
        }
        let _ = std::fs::remove_file(&args.holding);
        let released = mono_ns();
        let deadline = instant_ns(guard.valid_until());
        let lost = guard.is_lost();
        let _ = guard.unlock();
        recorder.record(&Event::End {
            client: args.client.clone(),
            hold,
            // The belief ends at the release, or earlier where the client learnt or its
            // deadline says the lock was gone.
            at: released.min(deadline).min(belief_ended.unwrap_or(u64::MAX)),
            lost,
        });
        pause_ms(args.rest_ms / 2..args.rest_ms / 2 + 20);
        pause_ms(0..args.rest_ms / 2 + 1);
    }
    locker.shutdown();
    0
}

/// `dlock-torture writer`: one hold's work under `dlock run` (fence from DLOCK_FENCE).
pub fn run_writer(args: WriterArgs) -> i32 {
    let begun = mono_ns();
    let Some(fence) = std::env::var("DLOCK_FENCE")
        .ok()
        .and_then(|f| f.parse::<u64>().ok())
    else {
        eprintln!("writer: DLOCK_FENCE is not set: run me under `dlock run`");
        return 64;
    };
    let mut recorder = Recorder::create(&args.log).expect("create the writer's record");
    let pid = std::process::id();
    recorder.record(&Event::Begin {
        client: args.client.clone(),
        hold: args.hold,
        at: begun,
        fence,
        pid,
    });
    // `dlock run` (our parent) renews the lease; this process leads its own group.
    // SAFETY: getppid has no preconditions.
    let wrapper = unsafe { libc::getppid() };
    let _ = std::fs::write(&args.holding, format!("{wrapper} {pid}"));
    let mut store = match args.primitive.exclusive() {
        true => match store(&args.store, args.primitive, u64::MAX) {
            Some(store) => Some(store),
            None => return 1,
        },
        false => None,
    };
    // A command under `dlock run` has no check to make: it trusts dlock to stop it.
    work(
        store.as_mut(),
        None,
        &mut recorder,
        (&args.client, args.hold, fence),
        args.work_ms,
        &|| true,
    );
    let _ = std::fs::remove_file(&args.holding);
    recorder.record(&Event::End {
        client: args.client,
        hold: args.hold,
        at: mono_ns(),
        lost: false,
    });
    0
}

//! A client's run: the work of one hold, and the library client's and the writer's
//! loops.

use std::time::{Duration, Instant};

use dlock::{LockOptions, Wait};
use rand::Rng;

use super::locker::{Apply, Held, Locker};
use super::{ClientArgs, Primitive, WriterArgs, GUARDED_COUNTER};
use crate::record::{instant_ns, mono_ns, Event, Recorder};
use crate::store::Store;

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

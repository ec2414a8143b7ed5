//! The model follows the scripts: random sequences of the plain mutex's operations —
//! acquire (and its resend with the same token), release, renewal, the lazily drawn fence
//! (and its resend), and expiry — run through the real Lua scripts on a real server and
//! through the model's transitions (`src/scripts/`) side by side; after every step the
//! replies and the keys (holder, fencing counter, fence record) must agree.
//!
//! The semaphore's scripts (acquire and its resend, release, renewal) run the same way, and
//! so do the fair mutex's (acquire, waiting or single, and its next attempt; release with
//! its hand-off to the first in line; leaving the line; renewal), the live waiters in line
//! compared in order, the reentrant mutex's (acquire, new or resent, release of one
//! hold, renewal), its hash's owner, count and holds compared, and the read-write lock's
//! (read and write acquire and resend, release, renewal; no writer queue, no re-entry),
//! its live read holds and writer compared; and one Redlock master's (acquire with the
//! fence drawn at grant and its origin told, raise, release, restart empty) beside
//! `redlock/master.rs`'s `Master`.
//!
//! Time is not waited for: a tick shortens every key's real TTL by a tick (and, for the
//! semaphore, moves every permit's stored end a tick earlier, for the fair mutex every
//! waiter lease's, so the scripts' own `end <= now` decides); a key with at most a tick (plus the run's few milliseconds) left
//! is deleted, as Redis would expire it within that tick. So a run takes no time, and a
//! transition that kept or restarted a lease differently from the script shows.
//!
//! Each kind's run and its test live in a file of their own (`mutex.rs`, `semaphore.rs`,
//! `fair.rs`, `reentrant.rs`, `rwlock.rs`, `redlock.rs`, and the later suites) over
//! `harness.rs`, what they share; this file keeps the coverage test over all of them.
//!
//! Every call of a library script is the library's own: built as its `dlock::__scripts`
//! wrapper from the model's step and sent as composed (`library.rs`), on keys named by the
//! door's key types; only the test's own scripts (the clock shifts) are composed here.

use dlock_testkit::RedisServer;

mod admin;
mod election;
mod fair;
mod guarded;
mod harness;
mod kinds;
mod library;
mod linger;
mod multi;
mod mutex;
mod redlock;
mod reentrant;
mod rwlock;
mod semaphore;
mod tokens;
mod weighted;

/// Every suite's run for one seed, as the coverage test runs them: a suite added for a
/// script the library sends is called here too. Divergences are the suites' own tests'
/// to report; this only calls the scripts.
fn run_every_suite(seed: u64, conn: &mut redis::Connection) {
    let _ = mutex::run(seed, &mutex::scripts(), conn, &[]);
    let _ = semaphore::run_semaphore(
        seed,
        &semaphore::semaphore_scripts(),
        conn,
        &[],
        &mut semaphore::SemaphoreReached::default(),
    );
    let _ = fair::run_fair(seed, &fair::fair_scripts(), conn, &[]);
    let _ = reentrant::run_reentrant(seed, &reentrant::reentrant_scripts(), conn, &[]);
    let _ = rwlock::run_rw(
        seed,
        &rwlock::rw_scripts(),
        conn,
        &[],
        &mut Default::default(),
    );
    let mut reached = Default::default();
    let master = redlock::master_scripts();
    let _ = redlock::run_redlock_master(seed, &master, conn, None, &mut reached);
    let _ = guarded::run_guarded(
        seed,
        &guarded::guarded_scripts(),
        conn,
        &[],
        &mut Default::default(),
    );
    let _ = election::run_election(
        seed,
        &election::election_scripts(),
        conn,
        &[],
        &mut Default::default(),
    );
    admin::run_suites(seed, conn);
    linger::run_linger_suite(seed, conn);
    let _ = weighted::run_weighted(
        seed,
        &semaphore::semaphore_scripts(),
        conn,
        &[],
        &mut Default::default(),
    );
    multi::run_multi_suite(seed, conn);
}

/// Every script the library sends (`dlock::__library_scripts`, not a list kept here) is
/// called by a conformance suite: a script added to the library without a run beside the
/// model fails here.
#[test]
fn every_script_the_library_sends_is_in_a_conformance_run() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    for seed in 0..10 {
        run_every_suite(seed, &mut conn);
    }
    let called = library::called();
    let missing: Vec<_> = dlock::__library_scripts()
        .into_iter()
        .map(|script| script.name)
        .filter(|name| !called.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "scripts the library sends that no conformance suite runs: {missing:?}"
    );
}

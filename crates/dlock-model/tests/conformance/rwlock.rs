//! The read-write lock's scripts (read and write acquire and resend, release with the
//! hand-off to the first writer in line, leaving the line, downgrade, renewal) beside the
//! model, the read holds, the writer, the counter and the writers in line compared after
//! every step.

use dlock::__scripts::{
    writer_queue, Downgrade, HoldKind, LockKeys, QueueKeys, ReadAcquire, ReadRelease, RwKeys,
    WriteAcquire, WriteRelease,
};
use dlock_model::mutant::Mutant;
use dlock_model::scripts::{Grant, Server, Token};
use rand::{Rng, SeedableRng};

use super::harness::{
    entries_at, leave_line, line_at, renew, same, token_text, waiter_text, Bench, Fences,
    SHIFT_ENTRIES, SHIFT_QUEUE, SLACK_MS, TICK_MS, TTL, WAITER_LEASE,
};
use super::library::{lock_keys, named_key, send};

/// The owner of each client's read holds (and of a downgrade's): clients 0 and 2 read for
/// one owner, so one re-enters the other's read hold.
pub const RW_OWNERS: [u8; 3] = [0, 1, 0];

/// The read-write lock's keys and writers' line as the library names them (every call is
/// composed from them), and the test's own ticks.
pub struct RwScripts {
    pub keys: LockKeys,
    pub writers: QueueKeys,
    /// The read holds' expiry index (`expiry`).
    pub index: String,
    pub shift: redis::Script,
    pub shift_queue: redis::Script,
}

impl RwScripts {
    /// The keys every read-write lock script names.
    pub fn lock(&self) -> RwKeys<'_> {
        RwKeys {
            keys: &self.keys,
            writers: &self.writers,
        }
    }

    /// A tick on the server: the read holds' ends and the waiters' leases a tick earlier.
    pub fn tick(&self, conn: &mut redis::Connection) {
        let _: () = self
            .shift
            .key(&self.keys.key)
            .key(&self.index)
            .arg(TICK_MS)
            .invoke(conn)
            .unwrap();
        let _: () = self
            .shift_queue
            .key(&self.writers.queue)
            .key(&self.writers.leases)
            .arg(TICK_MS)
            .arg(SLACK_MS)
            .invoke(conn)
            .unwrap();
    }
}

pub fn rw_scripts() -> RwScripts {
    rw_scripts_for("w")
}

/// The keys of the read-write lock `name`.
pub fn rw_scripts_for(name: &str) -> RwScripts {
    let keys = lock_keys(name);
    RwScripts {
        writers: writer_queue(&keys),
        index: named_key(&keys, "expiry"),
        keys,
        shift: redis::Script::new(SHIFT_ENTRIES),
        shift_queue: redis::Script::new(SHIFT_QUEUE),
    }
}

/// The read holds at `key` on the server now (live, and how many ended), and the writer.
pub fn rw_holds(key: &str, conn: &mut redis::Connection) -> (Vec<String>, usize, Option<String>) {
    let kind: String = redis::cmd("TYPE").arg(key).query(conn).unwrap();
    match kind.as_str() {
        "string" => (
            Vec::new(),
            0,
            redis::cmd("GET").arg(key).query(conn).unwrap(),
        ),
        "hash" => {
            let (live, ended) = entries_at(conn, key);
            (live, ended, None)
        }
        _ => (Vec::new(), 0, None),
    }
}

/// What the rwlock's runs reached.
#[derive(Default)]
pub struct RwReached {
    /// Write attempts that found ended read holds in the key, which the script purges
    /// before it decides (a write is never granted over ended holds alone here: the hash
    /// expires with its latest lease, so only live ones keep it, and they make it busy).
    pub purged_for_write: usize,
    /// Releases (a writer's, the last reader's) that handed the write lock to the first
    /// writer in line.
    pub hand_offs: usize,
    /// A waiting writer's next attempt (its token in line) granted.
    pub from_line: usize,
    /// Read holds granted to an owner that read already (a new hold token, not a resend).
    pub reentries: usize,
    /// ... of which while a writer waited in line.
    pub reentries_past_writer: usize,
    /// Downgrades granted (a write lock turned into a read hold).
    pub downgrades: usize,
    /// Downgrades refused: the write lock was not the client's.
    pub downgrades_refused: usize,
}

/// A client's latest hold in a run of the rwlock.
#[derive(Clone, Copy, Default)]
pub struct RwLatest {
    /// Its token is a write's (else a read hold's).
    pub write: bool,
    /// A write that waits (takes a place in line when busy).
    pub join: bool,
    /// The fence of its write grant, the server's and the model's.
    pub fence: Option<(u64, u64)>,
    /// A read hold made by a downgrade: the writer's token (a resend sends it again).
    pub downgraded_from: Option<Token>,
}

/// One random run of the read-write lock with its writer queue: three clients take read
/// holds (two of them for one owner, who re-enters) or the write lock (a wait, which takes
/// a place in line, or a single attempt that does not), try again with their token, resend,
/// release (the write lock handed to the first writer in line), leave the line, downgrade
/// a write lock to a read hold (and resend that), renew; the clock ticks. The read holds,
/// the writer, the counter and the live writers in line (in order) are compared after
/// every step.
pub fn run_rw(
    seed: u64,
    scripts: &RwScripts,
    conn: &mut redis::Connection,
    mutants: &[Mutant],
    reached: &mut RwReached,
) -> Result<(), String> {
    let _: () = redis::cmd("FLUSHALL").query(conn).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut model = Server::default();
    let mut now: u8 = 0;
    let mut attempts = [0u8; 3];
    let mut latests = [RwLatest::default(); 3];
    let mut fences = Fences::default();
    let lease_ms = u64::from(TTL) * TICK_MS;
    let owner_of = |t: Token| RW_OWNERS[usize::from(t.client)];
    for step in 0..40 {
        let client = rng.random_range(0..3u8);
        let c = client as usize;
        let owner = RW_OWNERS[c];
        let owner_text = format!("o{owner}");
        let latest = Token {
            client,
            attempt: attempts[c].saturating_sub(1),
        };
        let choice = rng.random_range(0..14);
        let context = format!("seed {seed}, step {step}: choice {choice}, client {client}");
        match choice {
            // A new read hold, a new write (a wait or a single attempt), or the latest
            // again (a resend, or a waiting writer's next attempt).
            0..=5 => {
                let (token, this) = if choice <= 2 {
                    attempts[c] += 1;
                    let this = RwLatest {
                        write: choice >= 1,
                        join: choice == 1,
                        ..RwLatest::default()
                    };
                    (latest_after(client, &attempts), this)
                } else if attempts[c] == 0 || latests[c].downgraded_from.is_some() {
                    continue;
                } else {
                    (latest, latests[c])
                };
                latests[c] = this;
                // Ended read holds the write finds in the key, which its script must
                // purge before it decides.
                let finds_ended = this.write && rw_holds(&scripts.keys.key, conn).1 > 0;
                let in_line = model.live_waiters(now).any(|t| t == token);
                let waiting = model.live_waiters(now).next().is_some();
                let reading = !this.write
                    && model.holder(now).is_none()
                    && model
                        .live_entries(now)
                        .any(|t| t != token && owner_of(t) == owner)
                    && !model.live_entries(now).any(|t| t == token);
                let (expected, reply): (Grant, Vec<i64>) = if this.write {
                    let expected =
                        model.write_acquire(token, now, TTL, WAITER_LEASE, this.join, mutants);
                    let acquire = WriteAcquire {
                        lock: scripts.lock(),
                        token: &waiter_text(token),
                        lease_ms,
                        waiter_lease_ms: u64::from(WAITER_LEASE) * TICK_MS,
                        join_queue: this.join,
                    };
                    let reply = send(&acquire, conn);
                    (expected, reply)
                } else {
                    let expected = model.read_acquire(owner, owner_of, token, now, TTL, mutants);
                    let acquire = ReadAcquire {
                        lock: scripts.lock(),
                        owner: &owner_text,
                        lease_ms,
                        token: &token_text(token),
                    };
                    let reply = send(&acquire, conn);
                    (expected, reply)
                };
                reached.purged_for_write += usize::from(finds_ended);
                match (reply.as_slice(), expected) {
                    ([1, fence, ..], Grant::Granted(Some(modelled))) => {
                        fences.check(*fence as u64, modelled, &context)?;
                        if this.write {
                            latests[c].fence = Some((*fence as u64, modelled));
                            reached.from_line += usize::from(in_line);
                        } else if reading {
                            reached.reentries += 1;
                            reached.reentries_past_writer += usize::from(waiting);
                        }
                    }
                    ([0, ..], Grant::Busy) => {}
                    (other, _) => {
                        return Err(format!("{context}: {other:?}, the model says {expected:?}"))
                    }
                }
            }
            6..=8 => {
                let (_, handed) = if latests[c].write {
                    let expected = model.write_release(latest, now, TTL, mutants);
                    let release = WriteRelease {
                        lock: scripts.lock(),
                        token: &waiter_text(latest),
                    };
                    let released: i64 = send(&release, conn);
                    same(released == 1, expected.0, &context)?;
                    expected
                } else {
                    let expected = model.read_release(latest, now, TTL, mutants);
                    let release = ReadRelease {
                        lock: scripts.lock(),
                        token: &token_text(latest),
                        owner: &owner_text,
                    };
                    let released: i64 = send(&release, conn);
                    same(released == 1, expected.0, &context)?;
                    expected
                };
                if let Some((writer, fence)) = handed {
                    reached.hand_offs += 1;
                    // The hand-off's fence is the counter now (compared in order).
                    let counter: u64 = redis::cmd("GET")
                        .arg(&scripts.keys.fence)
                        .query(conn)
                        .unwrap();
                    fences.check(counter, fence, &format!("{context}: hand-off fence"))?;
                    // The writer handed the lock is told its fence (its downgrade sends it).
                    let w = usize::from(writer.client);
                    if latests[w].write && latest_after(writer.client, &attempts) == writer {
                        latests[w].fence = Some((counter, fence));
                    }
                }
            }
            9 => {
                if !latests[c].write {
                    continue;
                }
                let text = waiter_text(latest);
                leave_line(conn, &scripts.writers, &text, &mut model, latest, now)
                    .map_err(|e| format!("{context}: {e}"))?;
            }
            // A downgrade of the latest write (held or not: the script checks), or the
            // resend of a downgrade made.
            10 => {
                let this = latests[c];
                let (writer, hold) = match this.downgraded_from {
                    Some(writer) => (writer, latest),
                    None if this.write && attempts[c] > 0 => {
                        attempts[c] += 1;
                        (latest, latest_after(client, &attempts))
                    }
                    None => continue,
                };
                // A writer never granted sends what the guard would not have: no fence.
                let (server_fence, model_fence) = this.fence.unwrap_or((0, 0));
                let expected = model.downgrade(writer, hold, now, TTL, model_fence, mutants);
                let downgrade = Downgrade {
                    lock: scripts.lock(),
                    writer: &waiter_text(writer),
                    owner: &owner_text,
                    lease_ms,
                    token: &token_text(hold),
                    fence: server_fence,
                };
                let reply: Vec<i64> = send(&downgrade, conn);
                match (reply.as_slice(), expected) {
                    ([1, fence, _], Some(modelled)) => {
                        fences.check(*fence as u64, modelled, &context)?;
                        reached.downgrades += 1;
                        latests[c] = RwLatest {
                            downgraded_from: Some(writer),
                            ..this
                        };
                    }
                    ([0, -1], None) => {
                        reached.downgrades_refused += 1;
                        if this.downgraded_from.is_none() {
                            attempts[c] -= 1; // no read hold was made: the write is latest
                        }
                    }
                    (other, _) => {
                        return Err(format!("{context}: {other:?}, the model says {expected:?}"))
                    }
                }
            }
            11 => {
                let (expected, renewed): (bool, Vec<i64>) = if latests[c].write {
                    let expected = model.renew_string(latest, now, TTL);
                    let text = waiter_text(latest);
                    let renewed = renew(&scripts.keys.key, HoldKind::String, &text, lease_ms, conn);
                    (expected, renewed)
                } else {
                    let expected = model.renew_entry(latest, now, TTL);
                    let text = token_text(latest);
                    let renewed = renew(&scripts.keys.key, HoldKind::Entry, &text, lease_ms, conn);
                    (expected, renewed)
                };
                // -1: the key holds the other kind (a read hash, a writer's string): not
                // held either.
                same(renewed == [1], expected, &context)?;
            }
            _ => {
                now += 1;
                model.expire(now);
                scripts.tick(conn);
            }
        }
        let (reads, _, writer) = rw_holds(&scripts.keys.key, conn);
        let mut modelled: Vec<String> = model.live_entries(now).map(token_text).collect();
        modelled.sort();
        same(reads, modelled, &format!("{context}: read holds"))?;
        same(
            writer,
            model.holder(now).map(waiter_text),
            &format!("{context}: writer"),
        )?;
        fences.check_counter(conn, &scripts.keys.fence, model.counter, &context)?;
        same(
            line_at(conn, &scripts.writers.queue, &scripts.writers.leases),
            model.live_waiters(now).map(waiter_text).collect::<Vec<_>>(),
            &format!("{context}: the line"),
        )?;
    }
    Ok(())
}

/// The token of a client's latest attempt, `attempts` counting it.
pub fn latest_after(client: u8, attempts: &[u8; 3]) -> Token {
    Token {
        client,
        attempt: attempts[client as usize] - 1,
    }
}

#[test]
fn the_rwlock_scripts_do_what_the_model_says() {
    let mut bench = Bench::start();
    let scripts = rw_scripts();
    let mut reached = RwReached::default();
    bench.conforms(400, |seed, conn| {
        run_rw(seed, &scripts, conn, &[], &mut reached)
    });
    // The runs reach what they are for: writes that find ended read holds (which the
    // script purges first), hand-offs to the first writer in line, writers granted by
    // their next attempt, owners that re-enter their read hold (also past a waiting
    // writer), downgrades made and refused.
    let RwReached {
        purged_for_write,
        hand_offs,
        from_line,
        reentries,
        reentries_past_writer,
        downgrades,
        downgrades_refused,
    } = reached;
    // (In these runs: 33 purges, 95 hand-offs, 34 grants from the line, 291 re-entries, 110
    // of them past a waiting writer, 107 downgrades and 408 refused.)
    assert!(
        purged_for_write >= 25,
        "only {purged_for_write} writes found ended read holds"
    );
    assert!(hand_offs >= 75, "only {hand_offs} hand-offs in 400 runs");
    assert!(
        from_line >= 25,
        "only {from_line} grants from the line in 400 runs"
    );
    assert!(
        reentries >= 200,
        "only {reentries} read re-entries in 400 runs"
    );
    assert!(
        reentries_past_writer >= 75,
        "only {reentries_past_writer} read re-entries past a waiting writer in 400 runs"
    );
    assert!(downgrades >= 75, "only {downgrades} downgrades in 400 runs");
    assert!(
        downgrades_refused >= 200,
        "only {downgrades_refused} refused downgrades"
    );
    // The negative control: bugs in the model's rwlock are told apart.
    let mutants = [
        Mutant::PurgeForgetsLiveReader,
        Mutant::ReleaseWithoutOwnerCheck,
        Mutant::ResendKeepsOldLease,
        Mutant::QueueSkipsHead,
        Mutant::QueueKeepsLapsedWaiters,
        Mutant::ReleaseSkipsHandOff,
        Mutant::HandOffReusesFence,
        Mutant::DowngradeWithoutOwnerCheck,
    ];
    bench.tells_apart(&mutants, 200, |seed, conn, mutant| {
        let reached = &mut RwReached::default();
        run_rw(seed, &scripts, conn, &[mutant], reached)
    });
}

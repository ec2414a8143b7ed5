//! The lease, wait and replica options that take or renew a hold (`--ttl`, `--wait`,
//! `--lock-delay`, `--replicas`...), turned into the library's checked `LockOptions`.

use std::time::Duration;

use clap::Args;
use dlock::{LockOptions, Wait};

use crate::duration;

/// Lease and wait options shared by `run` and `acquire`.
#[derive(Args, Debug, Clone)]
pub struct LeaseArgs {
    /// Lease of the lock, within the library's limits (the help says them)
    #[arg(long, value_parser = duration::ttl, default_value = dlock::humane(dlock::DEFAULT_TTL), help = format!(
        "Lease of the lock, {} (e.g. 250ms, 30s, 5m; every duration takes {}, combined as in 1m30s); `run` renews it while the command runs, so a long job keeps a short --ttl; a hold of `acquire` is not renewed (`dlock extend` restarts it)",
        duration::ttl_range(),
        duration::UNITS
    ))]
    pub ttl: Duration,
    /// Wait at most this long for the lock (default: wait forever)
    #[arg(long, value_parser = duration::parse, conflicts_with = "no_wait", value_name = "DUR")]
    pub wait: Option<Duration>,
    /// Fail at once (exit 75, or -E N) if the lock is held
    #[arg(long, short = 'n')]
    pub no_wait: bool,
    /// Exit with N instead of 75 when the lock is busy (flock's -E)
    #[arg(short = 'E', long, value_name = "N")]
    pub conflict_exit_code: Option<u8>,
    /// Lease on a waiter's place in a queue, within the library's limits (the help says them)
    #[arg(long, value_parser = duration::waiter_lease, value_name = "DUR", help = format!(
        "Lease on a waiter's place in the queue of a fair lock, write lock or semaphore: a crashed waiter holds up the queue this long ({}) [default: {}]",
        duration::waiter_lease_range(),
        dlock::humane(dlock::DEFAULT_WAITER_LEASE)
    ))]
    pub waiter_lease: Option<Duration>,
    /// Keep the lock ungrantable for DUR after a hold that ended by its lease running out
    /// (the help says the library's limit)
    #[arg(long, value_parser = duration::parse, value_name = "DUR", help = format!(
        "Keep the lock ungrantable for DUR after a hold that ended by its lease running out (its holder died or was stopped) rather than by a release: for storage that cannot check DLOCK_FENCE (--ttl plus DUR at most {})",
        dlock::humane(dlock::MAX_TTL)
    ))]
    pub lock_delay: Option<Duration>,
}

/// `options` with `--lock-delay`, checked in the flag's words.
pub fn with_lock_delay(
    options: LockOptions,
    delay: Option<Duration>,
) -> dlock::Result<LockOptions> {
    let Some(delay) = delay else {
        return Ok(options);
    };
    let room = dlock::MAX_TTL.saturating_sub(options.ttl);
    if room.is_zero() {
        return Err(dlock::Error::InvalidArgument(format!(
            "--lock-delay does not fit with --ttl {}: Redis keeps a hold --ttl plus --lock-delay, at most {}; lower --ttl",
            dlock::humane(options.ttl),
            dlock::humane(dlock::MAX_TTL)
        )));
    }
    if delay.is_zero() || delay > room {
        return Err(dlock::Error::InvalidArgument(format!(
            "--lock-delay {} is out of range; use above zero and at most {} with --ttl {} (Redis keeps a hold --ttl plus --lock-delay, at most {})",
            dlock::humane(delay),
            dlock::humane(room),
            dlock::humane(options.ttl),
            dlock::humane(dlock::MAX_TTL)
        )));
    }
    Ok(options.lock_delay(delay))
}

/// The longest `--wait`: beyond it, leave `--wait` out to wait forever.
const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

impl LeaseArgs {
    /// The library options, with `--replicas` when given, checked (before any connection).
    pub fn options(&self, replication: Option<Replication>) -> dlock::Result<LockOptions> {
        let wait = match (self.no_wait, self.wait) {
            (true, _) => Wait::NoWait,
            (false, Some(limit)) if limit > MAX_WAIT => {
                return Err(dlock::Error::InvalidArgument(format!(
                    "--wait {} is longer than a year; leave out --wait to wait forever",
                    dlock::humane(limit)
                )))
            }
            (false, Some(limit)) => Wait::Timeout(limit),
            (false, None) => Wait::Forever,
        };
        // --ttl and --waiter-lease were checked against their ranges while parsing.
        let mut options = LockOptions::default().ttl(self.ttl).wait(wait);
        if let Some(lease) = self.waiter_lease {
            options = options.waiter_lease(lease);
        }
        options = with_lock_delay(options, self.lock_delay)?;
        options = Replication::apply(replication, options, "--ttl")?;
        options.validate()?;
        Ok(options)
    }
}

/// `--replicas N` and `--replica-timeout DUR`.
#[derive(Debug, Clone, Copy)]
pub struct Replication {
    count: u32,
    /// `None`: the default (see [`Replication::timeout`]).
    timeout: Option<Duration>,
}

/// The longest default `--replica-timeout`.
const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_secs(1);

impl Replication {
    /// `--replicas count`, with `--replica-timeout` when given.
    pub fn new(count: u32, timeout: Option<Duration>) -> Replication {
        Replication { count, timeout }
    }

    /// The time the replicas get for a lock whose lease is `lease`: `--replica-timeout`,
    /// or 1 s, or a third of the lease when that is shorter.
    fn timeout(&self, lease: Duration) -> Duration {
        self.timeout
            .unwrap_or_else(|| DEFAULT_REPLICA_TIMEOUT.min(lease / 3))
    }

    /// `options` (whose `ttl` is the lease) with the replicas asked for, checked against
    /// that lease, which the flag `lease_flag` sets.
    pub fn apply(
        replication: Option<Replication>,
        options: LockOptions,
        lease_flag: &str,
    ) -> dlock::Result<LockOptions> {
        let Some(replication) = replication else {
            return Ok(options);
        };
        replication.check()?;
        let lease = options.ttl;
        let timeout = replication.timeout(lease);
        if timeout.is_zero() || timeout >= lease {
            return Err(dlock::Error::InvalidArgument(format!(
                "--replica-timeout {} must be above zero and shorter than the lease ({lease_flag} {}): an acknowledgement that comes after the lease ended is worthless; use a shorter --replica-timeout or a longer {lease_flag}",
                dlock::humane(timeout),
                dlock::humane(lease)
            )));
        }
        Ok(options.replicas(replication.count, timeout))
    }

    /// The count alone (before any lease is known).
    pub fn check(&self) -> dlock::Result<()> {
        if self.count == 0 || self.count > dlock::MAX_REPLICAS {
            return Err(dlock::Error::InvalidArgument(format!(
                "--replicas {} is out of range; use 1 to {} (or leave out --replicas to trust the master's reply alone)",
                self.count,
                dlock::MAX_REPLICAS
            )));
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err(dlock::Error::InvalidArgument(
                "--replica-timeout must be above zero".into(),
            ));
        }
        Ok(())
    }
}

//! `dlock acquire NAME`: take the lock, print `TOKEN FENCE` (or JSON), leave it held for
//! its lease.

use clap::Args;

use crate::cmd::run::Forwarded;
use crate::exit;
use crate::hold::{self, KindArgs, Locks};
use crate::lease::{LeaseArgs, Replication};

/// The arguments of `dlock acquire`.
#[derive(Args, Debug)]
pub struct AcquireArgs {
    /// Lock name
    pub name: String,
    #[command(flatten)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    pub kind: KindArgs,
    /// Print one JSON object: name, key, kind (the kind of lock taken: mutex, fair, read,
    /// write, semaphore), hold (how it is held, as inspect's kind says: exclusive, read,
    /// semaphore), token, fence, ttl_ms, weight (the permits the hold takes: K of --take,
    /// else 1)
    #[arg(long)]
    pub json: bool,
}

impl AcquireArgs {
    /// Everything that can be checked without Redis: the name (with its `prefix`), the
    /// kind flags and the lease with `replication`.
    pub fn check(&self, prefix: &str, replication: Option<Replication>) -> dlock::Result<()> {
        dlock::check_name(prefix, &self.name)?;
        self.kind.check()?;
        self.lease.options(replication).map(drop)
    }

    /// Takes the lock and prints its token and fence; returns the exit code.
    pub async fn run(&self, locks: &Locks, replication: Option<Replication>) -> dlock::Result<i32> {
        let (name, kind, lease) = (&self.name, &self.kind, &self.lease);
        let mut signals = Forwarded::install().map_err(|e| {
            dlock::Error::InvalidArgument(format!("cannot install signal handlers: {e}"))
        })?;
        let guard = tokio::select! {
            hold = hold::take(locks, kind, name, lease.options(replication)?) => hold?,
            signal = signals.next() => {
                // One line: the interruption was asked for, so there is nothing to fix.
                eprintln!("dlock: interrupted while waiting for {name:?}; nothing is held");
                signals.exit_on_next(signal);
                exit::die_by(signal, false);
                return Ok(128 + signal);
            }
        };
        let (guard, fence) = hold::fenced(guard).await?;
        let token = guard.token().to_string();
        let line = if self.json {
            serde_json::json!({
                "name": name,
                "key": format!("{}{name}", locks.prefix()),
                // The kind of lock taken (mutex, fair, write, ...); `hold` is how it is
                // held, as `dlock inspect --json` names it (exclusive, read, semaphore).
                "kind": kind.describe(),
                "hold": kind.hold().to_string(),
                "token": token,
                "fence": fence,
                "ttl_ms": lease.ttl.as_millis() as u64,
                "weight": kind.weight.take.unwrap_or(1),
            })
            .to_string()
        } else {
            format!("{token} {fence}")
        };
        if let Err(unwritten) = exit::try_write(&format!("{line}\n")) {
            let err = match unwritten {
                exit::Unwritten::Failed(why) => why,
                exit::Unwritten::ReaderLeft => "its reader went away".to_string(),
            };
            // The caller never got the token: give the lock back rather than strand it.
            match guard.unlock().await {
                Ok(()) => eprintln!("dlock: cannot print the token ({err}); the lock was released again\n  hint: read dlock acquire's output, e.g. read TOKEN FENCE < <(dlock acquire NAME)"),
                Err(release) => eprintln!("dlock: cannot print the token ({err}), and releasing the lock failed too ({release}); it frees when its lease ends\n  hint: read dlock acquire's output, e.g. read TOKEN FENCE < <(dlock acquire NAME)"),
            }
            return Ok(exit::IO_ERROR);
        }
        drop(guard.into_token());
        Ok(exit::OK)
    }
}

//! `dlock run NAME -- CMD`: hold a lock while a child command runs.

use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use dlock::{
    Client, Error, LostReason, LostSignal, MutexGuard, Owner, ReadGuard, SemaphorePermit,
    WriteGuard,
};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::{duration, exit, LeaseArgs};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Lock name
    name: String,
    #[command(flatten)]
    lease: LeaseArgs,
    /// When the lock is lost, how long the command gets after SIGTERM before SIGKILL
    #[arg(long, value_parser = duration::parse, default_value = "10s")]
    kill_after: Duration,
    #[command(flatten)]
    kind: KindArgs,
    /// The command and its arguments, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Which primitive `run` holds (at most one flag; default: the plain mutex).
#[derive(Args, Debug)]
#[group(multiple = false)]
struct KindArgs {
    /// Use a fair lock: waiters are served strictly in arrival order
    #[arg(long)]
    fair: bool,
    /// Hold a shared read lock (many readers at once, no writer)
    #[arg(long)]
    read: bool,
    /// Hold the exclusive write lock of a read-write lock
    #[arg(long)]
    write: bool,
    /// Hold one of N permits of a semaphore (at most N commands at once)
    #[arg(long, value_name = "N")]
    permits: Option<u32>,
}

/// Whatever `run` holds while the command runs.
enum Hold {
    Mutex(MutexGuard),
    Read(ReadGuard),
    Write(WriteGuard),
    Permit(SemaphorePermit),
}

impl Hold {
    async fn take(client: &Client, args: &RunArgs) -> dlock::Result<Hold> {
        // The client's watchdog renews the lease every third of --ttl while the command runs.
        let options = args.lease.options().renewed(args.lease.ttl);
        let name = &args.name;
        let kind = &args.kind;
        Ok(if kind.fair {
            Hold::Mutex(client.fair_mutex_with(name, options)?.lock().await?)
        } else if kind.read {
            Hold::Read(
                client
                    .rwlock_with(name, options)?
                    .read(&Owner::new())
                    .await?,
            )
        } else if kind.write {
            Hold::Write(client.rwlock_with(name, options)?.write().await?)
        } else if let Some(permits) = kind.permits {
            Hold::Permit(
                client
                    .semaphore_with(name, permits, options)?
                    .acquire()
                    .await?,
            )
        } else {
            Hold::Mutex(client.mutex_with(name, options)?.lock().await?)
        })
    }

    fn token(&self) -> &str {
        match self {
            Hold::Mutex(g) => g.token(),
            Hold::Read(g) => g.owner().id(),
            Hold::Write(g) => g.token(),
            Hold::Permit(g) => g.token(),
        }
    }

    fn fence(&self) -> u64 {
        match self {
            Hold::Mutex(g) => g.fence(),
            Hold::Read(g) => g.fence(),
            Hold::Write(g) => g.fence(),
            Hold::Permit(g) => g.fence(),
        }
    }

    fn lost_signal(&self) -> LostSignal {
        match self {
            Hold::Mutex(g) => g.lost_signal(),
            Hold::Read(g) => g.lost_signal(),
            Hold::Write(g) => g.lost_signal(),
            Hold::Permit(g) => g.lost_signal(),
        }
    }

    async fn unlock(self) -> dlock::Result<()> {
        match self {
            Hold::Mutex(g) => g.unlock().await,
            Hold::Read(g) => g.unlock().await,
            Hold::Write(g) => g.unlock().await,
            Hold::Permit(g) => g.unlock().await,
        }
    }
}

pub async fn run(client: &Client, args: RunArgs) -> dlock::Result<i32> {
    let guard = Hold::take(client, &args).await?;
    // Installed before the child starts, so no signal slips through unforwarded.
    let mut signals = match Forwarded::install() {
        Ok(signals) => signals,
        Err(err) => {
            let _ = guard.unlock().await;
            eprintln!("dlock: cannot install signal handlers: {err}");
            return Ok(exit::LOST);
        }
    };
    let mut child = match spawn_child(&args, &guard) {
        Ok(child) => child,
        Err(err) => {
            let _ = guard.unlock().await;
            let code = if err.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            eprintln!("dlock: cannot start {:?}: {err}\n  hint: check the command name and that it is executable", args.command[0]);
            return Ok(code);
        }
    };
    match supervise(&mut child, &guard, &mut signals).await {
        Supervised::Exited(status) => {
            match guard.unlock().await {
                Ok(()) => Ok(exit_code(status)),
                Err(Error::Lost { .. }) => {
                    eprintln!(
                    "dlock: the command finished, but the lock {:?} had been lost before it was released\n  hint: use a longer --ttl",
                    args.name
                );
                    Ok(exit::LOST)
                }
                Err(err) => {
                    // The command is done; its lock will expire by itself.
                    eprintln!("dlock: warning: could not release {:?}: {err}; it frees when its lease ends", args.name);
                    Ok(exit_code(status))
                }
            }
        }
        Supervised::LockLost(reason) => {
            eprintln!(
                "dlock: lost the lock {:?} ({reason}); the command was stopped\n  hint: check Redis availability, or use a longer --ttl",
                args.name
            );
            terminate(&mut child, args.kill_after).await;
            Ok(exit::LOST)
        }
    }
}

fn spawn_child(args: &RunArgs, guard: &Hold) -> std::io::Result<Child> {
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("DLOCK_NAME", &args.name)
        .env("DLOCK_TOKEN", guard.token())
        .env("DLOCK_FENCE", guard.fence().to_string());
    // SAFETY: the closure only calls async-signal-safe functions (prctl, getppid, raise).
    let parent = std::process::id() as libc::pid_t;
    unsafe {
        command.pre_exec(move || {
            // If dlock dies (even by SIGKILL) the command must not go on without the lock.
            // The signal is tied to the forking thread: this runs on the main thread, which
            // lives as long as dlock does.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
    command.kill_on_drop(true).spawn()
}

/// The signals dlock passes on to the command instead of dying from them.
struct Forwarded {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    quit: Signal,
}

impl Forwarded {
    fn install() -> std::io::Result<Forwarded> {
        Ok(Forwarded {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
        })
    }
}

enum Supervised {
    Exited(ExitStatus),
    LockLost(LostReason),
}

/// Waits for the child while the watchdog keeps the lease alive, forwarding signals.
async fn supervise(child: &mut Child, guard: &Hold, signals: &mut Forwarded) -> Supervised {
    let mut lost = guard.lost_signal();
    loop {
        tokio::select! {
            status = child.wait() => {
                return Supervised::Exited(status.unwrap_or_else(|_| ExitStatus::from_raw(1 << 8)));
            }
            reason = lost.wait() => return Supervised::LockLost(reason),
            _ = signals.interrupt.recv() => forward(child, libc::SIGINT),
            _ = signals.terminate.recv() => forward(child, libc::SIGTERM),
            _ = signals.hangup.recv() => forward(child, libc::SIGHUP),
            _ = signals.quit.recv() => forward(child, libc::SIGQUIT),
        }
    }
}

fn forward(child: &Child, sig: libc::c_int) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) on our own, not yet reaped child.
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

/// SIGTERM, then SIGKILL after `grace` if the child is still running.
async fn terminate(child: &mut Child, grace: Duration) {
    forward(child, libc::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    }
}

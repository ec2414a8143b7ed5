//! The harness's own processes and signals: whether a client still runs, signals to it,
//! the interrupt that stops a run cleanly, and sleeps and waits that an interrupt cuts
//! short.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::record::mono_ns;

/// Processes the harness started and that may still run.
pub(crate) type Live = Arc<Mutex<HashSet<u32>>>;

/// Whether `pid` is a process that can still act: it exists and is not a zombie (dead,
/// waiting for its parent to reap it, which `kill(pid, 0)` alone takes for alive).
pub(crate) fn running(pid: u32) -> bool {
    if !signal(pid as i32, 0) {
        return false;
    }
    // The state follows the command's name, which is in parentheses and may hold any.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, None | Some('Z' | 'X'))
}

/// Sends `sig` (0: only checks the process exists); true when it was delivered.
pub(crate) fn signal(pid: i32, sig: i32) -> bool {
    // SAFETY: kill has no memory effects; the pids are of processes this harness started
    // (or their process groups, which `dlock run` made for their commands).
    unsafe { libc::kill(pid, sig) == 0 }
}

/// The signal (INT, TERM, HUP) that asked the harness to stop, or 0.
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_interrupt(signal: libc::c_int) {
    INTERRUPTED.store(signal, Ordering::SeqCst);
}

/// From now on INT, TERM and HUP stop the run cleanly (every process it started killed,
/// frozen ones included, every server stopped, every record removed) instead of killing
/// the harness and orphaning all that.
pub fn catch_interrupts() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(signal, on_interrupt as *const () as libc::sighandler_t);
        }
    }
}

/// The signal that interrupted the run, if one did.
pub fn interrupted() -> Option<i32> {
    match INTERRUPTED.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Sleeps, cut short by an interrupt.
pub(crate) fn sleep(duration: Duration) {
    let until = mono_ns() + duration.as_nanos() as u64;
    while interrupted().is_none() {
        let left = until.saturating_sub(mono_ns());
        if left == 0 {
            return;
        }
        thread::sleep(Duration::from_nanos(left).min(Duration::from_millis(20)));
    }
}

/// Kills every client process still running when dropped: on the normal path nothing is
/// left by then, but an interrupt or a panic must not leave clients running, or frozen.
pub(crate) struct KillLive(pub(crate) Live);

impl Drop for KillLive {
    fn drop(&mut self) {
        for &pid in self.0.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            // SIGKILL ends a stopped process too; a `dlock run` command dies with its
            // wrapper (PR_SET_PDEATHSIG).
            signal(pid as i32, libc::SIGKILL);
        }
    }
}

/// Freezes or resumes a holder: a library client, or a `dlock run` wrapper together with
/// its command's process group.
pub(crate) fn stop_or_continue(pids: &[u32], sig: i32) {
    for (index, &pid) in pids.iter().enumerate() {
        if index == 0 {
            signal(pid as i32, sig);
        } else {
            signal(-(pid as i32), sig);
        }
    }
}

/// Polls `ready` until it holds or `within` has passed (or an interrupt came).
pub(crate) fn wait_until(within: Duration, ready: impl Fn() -> bool) {
    let until = mono_ns() + within.as_nanos() as u64;
    while mono_ns() < until && interrupted().is_none() && !ready() {
        thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command that dlock stopped, not yet reaped by its wrapper, is no holder to kill:
    /// `kill(pid, 0)` alone still finds it (the negative control).
    #[test]
    fn a_zombie_is_not_running() {
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(running(sleeper.id()));
        sleeper.kill().unwrap();
        // Not reaped yet: a zombie once the kill lands.
        let pid = sleeper.id();
        let stat = || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        while !stat()
            .rsplit_once(')')
            .unwrap()
            .1
            .trim_start()
            .starts_with('Z')
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            signal(pid as i32, 0),
            "kill(pid, 0) takes a zombie for alive"
        );
        assert!(!running(pid));
        sleeper.wait().unwrap();
        assert!(!running(pid));
    }
}

//! The command's whole process tree as one unit.
//!
//! The command runs in a process group of its own, so one `killpg` reaches it and every
//! process it started (that stayed in the group), and a signal dlock forwards reaches each
//! of them exactly once: the terminal's Ctrl-C goes to dlock's group (or, when dlock runs
//! in the foreground of a terminal, the command's group gets the terminal instead), never
//! to both. A small watchdog process (dlock itself, re-executed as `__watch-group` under a
//! name of its own, [`WATCHDOG_NAME`], in a process group of its own) holds the read end
//! of a pipe whose write end only dlock has: when dlock dies, even by SIGKILL, the pipe
//! closes and the watchdog gives the terminal back and kills the whole group. The watchdog starts before the command, and the
//! command's process itself, between its fork and its exec, writes its group's id into
//! that pipe: so the watchdog knows the group before the command can start anything, and
//! a dlock killed at any instant leaves no process of the command's behind. Through the same pipe dlock tells it, after every
//! renewal, by when the command must be gone if no renewal follows: if dlock itself is
//! stopped (SIGSTOP, a debugger, a freezer) past that, the watchdog kills the command's
//! group, so whatever continues the command later, it cannot run a step without the lock.
//! Neither its name nor its command line says dlock, and its group is not dlock's: a stop
//! of dlock by name (`killall -STOP dlock`, `pkill -STOP -f dlock`) or by its group leaves
//! the watchdog to act. Only a stop that reaches both at once (by executable path,
//! `killall -STOP /usr/bin/dlock`; both pids; a freezer of the whole tree) cannot be
//! caught.
//!
//! Job control: when dlock runs in the foreground of a terminal it hands the terminal to
//! the command's group (so the command can read it and Ctrl-C reaches it once). When the
//! command is suspended by the terminal (Ctrl-Z, or it stops itself for terminal I/O),
//! dlock takes the terminal back and suspends itself too, so the shell gets control; on
//! `fg` it hands the terminal back and continues the command's group, unless the lease
//! ended meanwhile (then the command is killed, and dlock exits 70). Any other stop of the
//! command (SIGSTOP from outside) is not followed: dlock goes on renewing, since a paused
//! command is still the holder.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Stdio;

/// The command's process group, and the watchdog that kills it if dlock dies.
pub struct Group {
    pub pgid: libc::pid_t,
    /// The write end of the watchdog's pipe: closing it (dlock exits) fires the watchdog.
    lifeline: Option<OwnedFd>,
    watchdog: Option<std::process::Child>,
    /// The controlling terminal and our own process group, when the command was given
    /// the terminal.
    terminal: Option<(OwnedFd, libc::pid_t)>,
}

/// The controlling terminal, if dlock is in its foreground process group.
fn foreground_terminal() -> Option<OwnedFd> {
    let tty = open_terminal()?;
    // SAFETY: tcgetpgrp/getpgrp only query.
    let foreground = unsafe { libc::tcgetpgrp(tty.as_raw_fd()) == libc::getpgrp() };
    foreground.then_some(tty)
}

/// The terminal's foreground process group.
fn foreground_of(tty: &OwnedFd) -> libc::pid_t {
    // SAFETY: tcgetpgrp only queries.
    unsafe { libc::tcgetpgrp(tty.as_raw_fd()) }
}

/// Makes `pgid` the terminal's foreground group (SIGTTOU ignored for the call: a
/// background group asking for the terminal would otherwise be stopped).
fn give_terminal(tty: &OwnedFd, pgid: libc::pid_t) {
    // SAFETY: tcsetpgrp on our controlling terminal; the previous disposition is restored.
    unsafe {
        let previous = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        libc::tcsetpgrp(tty.as_raw_fd(), pgid);
        libc::signal(libc::SIGTTOU, previous);
    }
}

/// Starts the watchdog, then `command` in its own process group, with `env` added.
/// `deadline`: by when the command must be gone unless dlock renews (the first
/// [`Group::must_end_by`]): the watchdog knows it from its start, and the command's process
/// refuses to exec past it (an error of kind `TimedOut`), so a dlock stopped between the
/// grant and the command's start cannot start it, or leave it running, without the lock.
pub fn spawn(
    command: &[String],
    env: &[(&str, String)],
    deadline: std::time::Instant,
) -> std::io::Result<(tokio::process::Child, Group)> {
    let deadline_ns = monotonic_at(deadline);
    let tty = foreground_terminal();
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: getpgrp only queries.
    let ours = unsafe { libc::getpgrp() };
    let watchdog = match start_watchdog(tty.is_some().then_some(ours), deadline_ns) {
        Ok(watchdog) => Some(watchdog),
        Err(err) => {
            eprintln!(
                "dlock: warning: no watchdog for the command's process group ({err}); if dlock is killed, processes the command started may keep running"
            );
            None
        }
    };
    // Where the command tells the watchdog its group (close-on-exec: gone once it runs).
    let tell_watchdog = watchdog.as_ref().map(|(lifeline, _)| lifeline.as_raw_fd());
    let mut cmd = tokio::process::Command::new(&command[0]);
    cmd.args(&command[1..])
        .envs(env.iter().map(|(k, v)| (k, v)));
    // SAFETY: the closure only calls async-signal-safe functions (setpgid, prctl,
    // getppid, raise, getpid, signal, write).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // If dlock dies the command must not go on without the lock (the watchdog
            // covers the rest of the group). The signal is tied to the forking thread:
            // this runs on the main thread, which lives as long as dlock does.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            if let Some(fd) = tell_watchdog {
                // The group's id, before the command runs a single instruction of its own.
                // (A watchdog already gone changes nothing: no SIGPIPE for that.)
                let pgid = (libc::getpid() as u64).to_le_bytes();
                let previous = libc::signal(libc::SIGPIPE, libc::SIG_IGN);
                libc::write(fd, pgid.as_ptr().cast(), pgid.len());
                libc::signal(libc::SIGPIPE, previous);
            }
            // dlock was stopped (or starved) past the lease before the command could run:
            // it must not start. (From here to exec the watchdog covers it.)
            if monotonic_ns() >= deadline_ns {
                // An OS error: only its errno reaches dlock (ETIMEDOUT: kind TimedOut).
                return Err(std::io::Error::from_raw_os_error(libc::ETIMEDOUT));
            }
            Ok(())
        });
    }
    let child = match cmd.kill_on_drop(true).spawn() {
        Ok(child) => child,
        Err(err) => {
            // The command never ran; the watchdog may know a group id that is nobody's
            // now: it must not kill it later.
            if let Some((_, mut watchdog)) = watchdog {
                let _ = watchdog.kill();
                let _ = watchdog.wait();
            }
            return Err(err);
        }
    };
    let pgid = child.id().map(|id| id as libc::pid_t).unwrap_or(-1);
    let (lifeline, watchdog) = watchdog.unzip();
    let mut group = Group {
        pgid,
        lifeline,
        watchdog,
        terminal: None,
    };
    // SAFETY: setpgid on our own child (also done by the child: whichever runs first
    // wins, as job-control shells do).
    unsafe {
        libc::setpgid(pgid, pgid);
    }
    if let Some(tty) = tty {
        // Only dlock hands the terminal over (a command that failed to start never took
        // it). A command that touched the terminal before this was stopped: continue it.
        give_terminal(&tty, pgid);
        group.signal(libc::SIGCONT);
        group.terminal = Some((tty, ours));
    }
    Ok((child, group))
}

/// The watchdog's process name (its comm, `ps -o comm`, and its argv[0], so also
/// `/proc/PID/cmdline`): one of its own, without "dlock" in it, so that a stop or kill of
/// dlock by name never reaches the watchdog, which must stay free to kill the command's
/// group once dlock misses its deadline. At most 15 bytes (the kernel's comm length).
pub const WATCHDOG_NAME: &str = "lock-watchdog";

/// Starts the watchdog of a group the command will tell it (see [`spawn`]); `terminal`:
/// dlock's own group, to which it gives the terminal back.
fn start_watchdog(
    terminal: Option<libc::pid_t>,
    deadline_ns: u64,
) -> std::io::Result<(OwnedFd, std::process::Child)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills two fresh descriptors; close-on-exec keeps the write end out of
    // the command and the watchdog.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // Executed as /proc/self/exe (this very binary, even if its file was replaced since),
    // with argv[0] WATCHDOG_NAME: from its exec on, nothing that names dlock (its comm is
    // "exe" until `watch_group` sets WATCHDOG_NAME, its command line never says dlock), so
    // a stop of dlock by name (`killall -STOP dlock`, `pkill -STOP dlock`, `pkill -f dlock`)
    // leaves the watchdog running to kill the command's group.
    let mut command = std::process::Command::new("/proc/self/exe");
    {
        use std::os::unix::process::CommandExt as _;
        command.arg0(WATCHDOG_NAME);
    }
    command
        .arg("__watch-group")
        .arg("--deadline")
        .arg(deadline_ns.to_string());
    if let Some(ours) = terminal {
        command.arg("--terminal").arg(ours.to_string());
    }
    // SAFETY: setpgid is async-signal-safe. A group of its own: a stop or kill of dlock's
    // group (`kill -STOP -PGID`, a supervisor's SIGKILL) leaves the watchdog running to
    // protect and clean up the command's group.
    unsafe {
        use std::os::unix::process::CommandExt as _;
        command.pre_exec(|| {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let watchdog = command
        .stdin(Stdio::from(read))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    Ok((write, watchdog))
}

impl Group {
    /// Sends `signal` to every process of the group.
    pub fn signal(&self, signal: libc::c_int) {
        if self.pgid > 0 {
            // SAFETY: killpg on the group we created; ESRCH (already empty) is fine.
            unsafe {
                libc::killpg(self.pgid, signal);
            }
        }
    }

    /// Tells the watchdog that the command must be gone by `deadline` unless dlock tells
    /// it a later one (after a renewal). Nothing if there is no watchdog.
    pub fn must_end_by(&self, deadline: std::time::Instant) {
        let Some(lifeline) = &self.lifeline else {
            return;
        };
        let bytes = monotonic_at(deadline).to_le_bytes();
        // SAFETY: writing 8 bytes to the pipe we own; a watchdog that is gone (EPIPE, with
        // SIGPIPE ignored by Rust's runtime) changes nothing here.
        unsafe {
            libc::write(lifeline.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
        }
    }

    /// True when a stop of the command by `signal` is the terminal's job control (Ctrl-Z,
    /// or terminal I/O from the background), which dlock follows; any other stop (SIGSTOP
    /// from outside: an operator, a debugger, a checkpointing tool) it does not.
    pub fn is_job_control(&self, signal: libc::c_int) -> bool {
        self.terminal.is_some() && matches!(signal, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU)
    }

    /// The command was suspended by the terminal: take the terminal back and suspend
    /// dlock too, so the shell gets control. Returns when dlock is continued; the caller
    /// then decides whether the command may go on ([`Group::resume`]).
    pub fn suspended(&self) {
        if let Some((tty, ours)) = &self.terminal {
            give_terminal(tty, *ours);
        }
        // SAFETY: stopping ourselves; execution resumes here on SIGCONT.
        unsafe {
            libc::raise(libc::SIGSTOP);
        }
    }

    /// After [`Group::suspended`]: continued by `fg` (the shell gave our group the
    /// terminal: pass it on) or by `bg` (the shell keeps it: leave it alone), the command's
    /// group goes on too.
    pub fn resume(&self) {
        if let Some((tty, ours)) = &self.terminal {
            if foreground_of(tty) == *ours {
                give_terminal(tty, self.pgid);
            }
        }
        self.signal(libc::SIGCONT);
    }

    /// True when the command was handed the terminal (dlock runs in a terminal's
    /// foreground).
    pub fn had_terminal(&self) -> bool {
        self.terminal.is_some()
    }

    /// The command is done: kills what it left in its group (it would run without the
    /// lock), gives the terminal back and retires the watchdog.
    pub fn finish(&mut self) {
        self.signal(libc::SIGKILL);
        if let Some((tty, ours)) = self.terminal.take() {
            // Only if the command's group still has it (not after `bg`).
            if foreground_of(&tty) == self.pgid {
                give_terminal(&tty, ours);
            }
        }
        drop(self.lifeline.take());
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.wait();
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Watches `pid` for being suspended (stopped by a signal); each suspension is sent on
/// `stops`. Runs on a thread of its own until the child is gone.
pub fn watch_stops(pid: libc::pid_t, stops: tokio::sync::mpsc::UnboundedSender<libc::c_int>) {
    std::thread::spawn(move || loop {
        // SAFETY: waitid on our own child for stop/continue events only: its exit is
        // left for tokio to reap.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let waited = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WSTOPPED | libc::WCONTINUED,
            )
        };
        if waited != 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return; // the child is gone
        }
        // SAFETY: si_status is the stop signal of a CLD_STOPPED report.
        if info.si_code == libc::CLD_STOPPED && stops.send(unsafe { info.si_status() }).is_err() {
            return;
        }
    });
}

/// The arguments of the hidden `__watch-group` subcommand: the watchdog that `run` starts.
#[derive(clap::Args, Debug)]
pub struct WatchGroupArgs {
    #[arg(long)]
    terminal: Option<i32>,
    #[arg(long)]
    deadline: Option<u64>,
}

impl WatchGroupArgs {
    /// Watches the command's group (see [`watch_group`]); returns the exit code.
    pub fn run(&self) -> i32 {
        watch_group(self.terminal, self.deadline)
    }
}

/// The watchdog: waits until its pipe closes (dlock exited, however it died), then gives
/// the terminal back to dlock's group (`terminal`: its id) and kills the command's
/// process group. The first 8 bytes on the pipe are that group's id, written by the
/// command's process before it runs (see [`spawn`]); a pipe that closes before (the
/// command never started) leaves nothing to kill. Then it reads the deadlines dlock sends
/// (8-byte CLOCK_MONOTONIC nanoseconds): when one passes before a later one arrives, dlock
/// has not renewed in time (it is stopped, frozen or starved), and the command's group is
/// killed at once. Ignores the signals a terminal or a supervisor sends to dlock's group,
/// so only dlock's end or its silence decides.
pub fn watch_group(terminal: Option<libc::pid_t>, first_deadline: Option<u64>) -> i32 {
    name_this_process(WATCHDOG_NAME);
    // SAFETY: setting dispositions of this single-threaded process.
    unsafe {
        for signal in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGTSTP,
        ] {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let mut stdin = std::io::stdin();
    let mut pending = Vec::new();
    let mut pgid: libc::pid_t = 0;
    // Known from the start: a dlock stopped before its first renewal is caught too.
    let mut deadline: Option<u64> = first_deadline;
    loop {
        let timeout_ms = match deadline {
            None => -1,
            Some(at) => {
                let now = monotonic_ns();
                if now >= at && pgid > 1 {
                    // dlock did not renew in time: the lease may pass to another holder.
                    kill_group(pgid);
                    deadline = None;
                    continue;
                } else if now >= at {
                    // Past it before the command told its group: kill it as soon as it
                    // does (the deadline stays), waiting for nothing else.
                    -1
                } else {
                    (at - now).div_ceil(1_000_000).min(i32::MAX as u64) as i32
                }
            }
        };
        let mut poll = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polling our own stdin.
        if unsafe { libc::poll(&mut poll, 1, timeout_ms) } == 0 {
            continue; // the deadline is checked at the top
        }
        let mut buffer = [0u8; 64];
        match stdin.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                pending.extend_from_slice(&buffer[..n]);
                while pending.len() >= 8 {
                    let mut bytes = [0u8; 8];
                    bytes.copy_from_slice(&pending[..8]);
                    pending.drain(..8);
                    let word = u64::from_le_bytes(bytes);
                    if pgid == 0 {
                        pgid = libc::pid_t::try_from(word).unwrap_or(0);
                    } else {
                        deadline = Some(word);
                    }
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    if let Some(ours) = terminal {
        // The shell that ran dlock gets its terminal back, not a group about to die (only
        // if that group has it: after `bg` the shell kept it).
        if let Some(tty) = open_terminal() {
            if foreground_of(&tty) == pgid {
                give_terminal(&tty, ours);
            }
        }
    }
    kill_group(pgid);
    0
}

/// Sets this process's comm (what `killall`, `pkill` and `ps -o comm` match) to `name`
/// (cut to 15 bytes by the kernel).
fn name_this_process(name: &str) {
    let Ok(name) = std::ffi::CString::new(name) else {
        return;
    };
    // SAFETY: PR_SET_NAME reads a NUL-terminated string that outlives the call.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr());
    }
}

fn kill_group(pgid: libc::pid_t) {
    if pgid > 1 {
        // SAFETY: killpg of the group dlock created for its command.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
}

/// `deadline` as CLOCK_MONOTONIC nanoseconds, the watchdog's clock.
fn monotonic_at(deadline: std::time::Instant) -> u64 {
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    monotonic_ns().saturating_add(left.as_nanos() as u64)
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for dlock and its watchdog.
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the struct we pass.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now);
    }
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

fn open_terminal() -> Option<OwnedFd> {
    // SAFETY: opening our controlling terminal; the descriptor is owned by the result.
    unsafe {
        let fd = libc::open(
            c"/dev/tty".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        (fd >= 0).then(|| OwnedFd::from_raw_fd(fd))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_watchdog_has_a_name_of_its_own_that_fits_in_a_comm() {
        let name = super::WATCHDOG_NAME;
        assert!(
            name.len() <= 15,
            "{name}: the kernel keeps 15 bytes of a comm"
        );
        assert!(!name.to_ascii_lowercase().contains("dlock"), "{name}");
    }
}

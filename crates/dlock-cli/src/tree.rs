//! The command's whole process tree as one unit.
//!
//! The command runs in a process group of its own, so one `killpg` reaches it and every
//! process it started (that stayed in the group), and a signal dlock forwards reaches each
//! of them exactly once: the terminal's Ctrl-C goes to dlock's group (or, when dlock runs
//! in the foreground of a terminal, the command's group gets the terminal instead), never
//! to both. A small watchdog process (dlock itself, re-executed as `__watch-group`) holds
//! the read end of a pipe whose write end only dlock has: when dlock dies, even by
//! SIGKILL, the pipe closes and the watchdog gives the terminal back and kills the whole
//! group.
//!
//! Job control: when dlock runs in the foreground of a terminal it hands the terminal to
//! the command's group (so the command can read it and Ctrl-C reaches it once). When the
//! command is suspended (Ctrl-Z, or it stops itself), dlock takes the terminal back and
//! suspends itself too, so the shell gets control; on `fg` it hands the terminal back and
//! continues the command's group. A suspension longer than the lease loses the lock.

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

/// Starts `command` in its own process group, with `env` added, and its watchdog.
pub fn spawn(
    command: &[String],
    env: &[(&str, String)],
) -> std::io::Result<(tokio::process::Child, Group)> {
    let tty = foreground_terminal();
    let parent = std::process::id() as libc::pid_t;
    let mut cmd = tokio::process::Command::new(&command[0]);
    cmd.args(&command[1..])
        .envs(env.iter().map(|(k, v)| (k, v)));
    // SAFETY: the closure only calls async-signal-safe functions (setpgid, prctl,
    // getppid, raise).
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
            Ok(())
        });
    }
    let child = cmd.kill_on_drop(true).spawn()?;
    let pgid = child.id().map(|id| id as libc::pid_t).unwrap_or(-1);
    let mut group = Group {
        pgid,
        lifeline: None,
        watchdog: None,
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
        // SAFETY: getpgrp only queries.
        group.terminal = Some((tty, unsafe { libc::getpgrp() }));
    }
    match start_watchdog(pgid, group.terminal.is_some()) {
        Ok((lifeline, watchdog)) => {
            group.lifeline = Some(lifeline);
            group.watchdog = Some(watchdog);
        }
        Err(err) => eprintln!(
            "dlock: warning: no watchdog for the command's process group ({err}); if dlock is killed, processes the command started may keep running"
        ),
    }
    Ok((child, group))
}

fn start_watchdog(
    pgid: libc::pid_t,
    terminal: bool,
) -> std::io::Result<(OwnedFd, std::process::Child)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills two fresh descriptors; close-on-exec keeps the write end out of
    // the command and the watchdog.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command.arg("__watch-group").arg(pgid.to_string());
    if terminal {
        command.arg("--terminal");
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

    /// The command was suspended: take the terminal back and suspend dlock too, so the
    /// shell gets control; when continued (`fg`), hand the terminal back and continue the
    /// command's group.
    pub fn suspended(&self) {
        if let Some((tty, ours)) = &self.terminal {
            give_terminal(tty, *ours);
        }
        // SAFETY: stopping ourselves; execution resumes here on SIGCONT.
        unsafe {
            libc::raise(libc::SIGSTOP);
        }
        // Continued: by `fg` (the shell gave our group the terminal: pass it on) or by
        // `bg` (the shell keeps the terminal: leave it alone).
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
pub fn watch_stops(pid: libc::pid_t, stops: tokio::sync::mpsc::UnboundedSender<()>) {
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
        if info.si_code == libc::CLD_STOPPED && stops.send(()).is_err() {
            return;
        }
    });
}

/// The watchdog: waits until its pipe closes (dlock exited, however it died), then gives
/// the terminal back to dlock's group (with `terminal`) and kills the command's process
/// group. Ignores the signals a terminal or a supervisor sends to dlock's group, so only
/// dlock's end decides.
pub fn watch_group(pgid: libc::pid_t, terminal: bool) -> i32 {
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
    let mut buffer = [0u8; 64];
    // Nothing is ever written: a read returns only when the pipe closes.
    loop {
        match stdin.read(&mut buffer) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    if terminal {
        // The shell that ran dlock gets its terminal back, not a group about to die (only
        // if that group has it: after `bg` the shell kept it).
        // SAFETY: getpgrp only queries; the descriptor is ours.
        let ours = unsafe { libc::getpgrp() };
        if let Some(tty) = open_terminal() {
            if foreground_of(&tty) == pgid {
                give_terminal(&tty, ours);
            }
        }
    }
    if pgid > 1 {
        // SAFETY: killpg of the group dlock created for its command.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
    0
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

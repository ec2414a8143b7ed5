//! The command's whole process tree as one unit.
//!
//! The command runs in a process group of its own, so one `killpg` reaches it and every
//! process it started (that stayed in the group), and a signal dlock forwards reaches each
//! of them exactly once: the terminal's Ctrl-C goes to dlock's group (or, when dlock runs
//! in the foreground of a terminal, the command's group gets the terminal instead), never
//! to both. A small watchdog process (dlock itself, re-executed as `__watch-group`) holds
//! the read end of a pipe whose write end only dlock has: when dlock dies, even by
//! SIGKILL, the pipe closes and the watchdog kills the whole group.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;

/// The command's process group, and the watchdog that kills it if dlock dies.
pub struct Group {
    pub pgid: libc::pid_t,
    /// The write end of the watchdog's pipe: closing it (dlock exits) fires the watchdog.
    lifeline: Option<OwnedFd>,
    watchdog: Option<std::process::Child>,
    /// Our own process group, when the command was given the terminal.
    terminal_back_to: Option<libc::pid_t>,
}

/// Starts `command` in its own process group, with `env` added, and its watchdog.
pub fn spawn(
    command: &[String],
    env: &[(&str, String)],
) -> std::io::Result<(tokio::process::Child, Group)> {
    // SAFETY: plain queries of our own process and terminal.
    let interactive = unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() };
    let parent = std::process::id() as libc::pid_t;
    let mut cmd = tokio::process::Command::new(&command[0]);
    cmd.args(&command[1..])
        .envs(env.iter().map(|(k, v)| (k, v)));
    // SAFETY: the closure only calls async-signal-safe functions (setpgid, signal,
    // tcsetpgrp, getpid, prctl, getppid, raise).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if interactive {
                // Take the terminal so the command can read it and gets the terminal's
                // signals (and dlock does not). SIGTTOU would stop a background group
                // asking for the terminal; ignore it for the call only.
                let previous = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(0, libc::getpid());
                libc::signal(libc::SIGTTOU, previous);
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
        terminal_back_to: None,
    };
    // SAFETY: setpgid/tcsetpgrp on our own child (also done by the child: whichever runs
    // first wins, as job-control shells do).
    unsafe {
        libc::setpgid(pgid, pgid);
        if interactive {
            let previous = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            libc::tcsetpgrp(0, pgid);
            libc::signal(libc::SIGTTOU, previous);
            group.terminal_back_to = Some(libc::getpgrp());
        }
    }
    match start_watchdog(pgid) {
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

fn start_watchdog(pgid: libc::pid_t) -> std::io::Result<(OwnedFd, std::process::Child)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills two fresh descriptors; close-on-exec keeps the write end out of
    // the command and the watchdog.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let watchdog = std::process::Command::new(std::env::current_exe()?)
        .arg("__watch-group")
        .arg(pgid.to_string())
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

    /// The command is done: kills what it left in its group (it would run without the
    /// lock), gives the terminal back and retires the watchdog.
    pub fn finish(&mut self) {
        self.signal(libc::SIGKILL);
        if let Some(ours) = self.terminal_back_to.take() {
            // SAFETY: handing the terminal back to our own group, SIGTTOU ignored for the
            // call since we are in the background now.
            unsafe {
                let previous = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(0, ours);
                libc::signal(libc::SIGTTOU, previous);
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

/// The watchdog: waits until its pipe closes (dlock exited, however it died), then kills
/// the command's process group. Ignores the signals a terminal or a supervisor sends to
/// dlock's group, so only dlock's end decides.
pub fn watch_group(pgid: libc::pid_t) -> i32 {
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
    if pgid > 1 {
        // SAFETY: killpg of the group dlock created for its command.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
    0
}

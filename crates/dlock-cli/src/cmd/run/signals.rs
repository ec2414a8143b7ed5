//! The stopping signals `run` and `acquire` pass on instead of dying of them, and how
//! dlock tells the same stop delivered twice from someone insisting (`arrivals`).

use std::time::Duration;

use tokio::signal::unix::{signal, Signal, SignalKind};

/// How soon after a stopping signal's arrival the same signal again, whoever sends it, is
/// still the same stop (two senders stopping dlock together). The same signal from the
/// process that sent the first is the same stop at any time: see [`arrivals`].
const SAME_STOP: Duration = Duration::from_millis(500);

/// How often a stopped dlock looks whether someone insists (see [`Forwarded::exit_on_next`]).
const INSISTING_LOOK: Duration = Duration::from_millis(10);

/// The signals dlock passes on to the command instead of dying from them.
pub struct Forwarded {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    quit: Signal,
}

impl Forwarded {
    pub fn install() -> std::io::Result<Forwarded> {
        let forwarded = Forwarded {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
        };
        // After tokio's handlers, so that no signal goes unseen meanwhile (ours then runs
        // after tokio's: dlock may see an arrival a moment before it is recorded).
        arrivals::record()?;
        Ok(forwarded)
    }

    /// From now on, a further stop ends dlock at once (128+N), without waiting for
    /// clean-up still in progress: another signal, or `first` again from someone else
    /// (see [`arrivals`]). `first` repeated by its sender is the same stop delivered
    /// twice, and is ignored.
    pub fn exit_on_next(self, first: i32) {
        let mut signals = self;
        tokio::spawn(async move {
            // The record is written by a signal handler, which cannot wake a task, and
            // after tokio's handler has: looked at on every signal and every 10 ms.
            let mut look = tokio::time::interval(INSISTING_LOOK);
            loop {
                if arrivals::insisting(first) {
                    std::process::exit(128 + first);
                }
                tokio::select! {
                    signal = signals.next() => if signal != first {
                        std::process::exit(128 + signal);
                    },
                    _ = look.tick() => {}
                }
            }
        });
    }

    /// The next signal received.
    pub async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
            _ = self.quit.recv() => libc::SIGQUIT,
        }
    }
}

/// Who sent each stopping signal and when it arrived, recorded by a signal handler of
/// dlock's own (tokio's says neither), to tell the same stop delivered twice from someone
/// insisting.
///
/// GNU `timeout` sends its SIGTERM to dlock and then to dlock's process group, systemd
/// sends its SIGTERM to the main process and then to the rest of the unit: the same stop
/// twice, from one process. The two are sent together but need not arrive or be seen
/// together: on a loaded machine the sender can be kept off the CPU between its two
/// `kill`s, and dlock can take as long to see the second. Told apart by time alone, such a
/// repeat was taken for someone insisting and dlock exited in the middle of giving its
/// queue place back. So the same signal again is the same stop when it comes from the
/// process that sent the first, however late; or from anyone within [`SAME_STOP`] of the
/// first's arrival. Later, from anyone else, it is someone insisting: a `kill` from
/// another process, or a second Ctrl-C (the terminal sends one per key press, never two).
mod arrivals {
    use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

    /// The stopping signals dlock handles, in [`slot`] order.
    const STOPS: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

    /// What arrived of one signal. Written by the handler: atomics only.
    struct Arrivals {
        /// When the first arrived (CLOCK_MONOTONIC, ns; 0: not yet).
        first_at: AtomicU64,
        /// The process that sent the first; -1 for the kernel (a terminal) or a sender
        /// that cannot be told (another PID namespace); 0 while not yet recorded.
        first_from: AtomicI32,
        /// A later arrival was someone insisting.
        insisting: AtomicBool,
    }

    static ARRIVALS: [Arrivals; 4] = [const {
        Arrivals {
            first_at: AtomicU64::new(0),
            first_from: AtomicI32::new(0),
            insisting: AtomicBool::new(false),
        }
    }; 4];

    fn slot(signal: libc::c_int) -> Option<&'static Arrivals> {
        STOPS
            .iter()
            .position(|&stop| stop == signal)
            .map(|index| &ARRIVALS[index])
    }

    /// Starts recording (once per process; later calls do nothing).
    pub fn record() -> std::io::Result<()> {
        static RECORDING: std::sync::OnceLock<Result<(), std::io::ErrorKind>> =
            std::sync::OnceLock::new();
        let registered = RECORDING.get_or_init(|| {
            for signal in STOPS {
                // SAFETY: `arrived` is async-signal-safe: it reads the siginfo, reads the
                // monotonic clock and touches atomics, nothing else.
                unsafe {
                    signal_hook_registry::register_sigaction(signal, move |info| {
                        arrived(signal, info)
                    })
                }
                .map_err(|err| err.kind())?;
            }
            Ok(())
        });
        registered.map_err(std::io::Error::from)
    }

    /// The sender of a signal: its process id when a process sent it with `kill`,
    /// `sigqueue` or `tgkill` (and it is visible from here), -1 otherwise.
    fn sender(info: &libc::siginfo_t) -> i32 {
        if matches!(
            info.si_code,
            libc::SI_USER | libc::SI_QUEUE | libc::SI_TKILL
        ) {
            // SAFETY: these codes carry the sender's pid.
            let pid = unsafe { info.si_pid() };
            if pid > 0 {
                return pid;
            }
        }
        -1
    }

    fn monotonic_ns() -> u64 {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime is async-signal-safe and writes only `now`.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        (now.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(now.tv_nsec as u64)
            .max(1)
    }

    fn arrived(signal: libc::c_int, info: &libc::siginfo_t) {
        let Some(arrivals) = slot(signal) else { return };
        let (now, from) = (monotonic_ns(), sender(info));
        match (arrivals.first_at).compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => arrivals.first_from.store(from, Ordering::Release),
            Err(first_at) => {
                // 0: the first is being recorded on another thread at this very moment.
                let first_from = arrivals.first_from.load(Ordering::Acquire);
                let same_sender = first_from == 0 || (from > 0 && from == first_from);
                let soon = now.saturating_sub(first_at) < super::SAME_STOP.as_nanos() as u64;
                if !same_sender && !soon {
                    arrivals.insisting.store(true, Ordering::Release);
                }
            }
        }
    }

    /// Whether `signal` arrived again, after its first, from someone insisting.
    pub fn insisting(signal: libc::c_int) -> bool {
        slot(signal).is_some_and(|arrivals| arrivals.insisting.load(Ordering::Acquire))
    }
}

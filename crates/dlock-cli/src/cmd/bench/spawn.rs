//! `bench --spawn`: private redis-servers started (and stopped) through the test kit. The
//! test kit (and its certificate generator) comes only with the `spawn` feature, which
//! the published binary leaves off; without it `--spawn` is refused before any work.

use super::{BenchArgs, REDLOCK_MASTERS};
#[cfg(feature = "spawn")]
use crate::exit;

/// The private servers of one `bench --spawn` run (none without `--spawn`), stopped when
/// dropped: keep it until the run's clients are shut down.
#[derive(Default)]
pub struct Spawned {
    #[cfg(feature = "spawn")]
    servers: Vec<PrivateServer>,
}

impl Spawned {
    /// The servers' URLs, the first for every scenario, all of them for redlock.
    pub fn urls(&self) -> Vec<String> {
        #[cfg(feature = "spawn")]
        return self.servers.iter().map(PrivateServer::url).collect();
        #[cfg(not(feature = "spawn"))]
        Vec::new()
    }
}

/// Starts `--spawn`'s servers ([`REDLOCK_MASTERS`] of them) when asked; on failure, says
/// why and returns the exit code (69: no server to bench).
#[cfg(feature = "spawn")]
pub fn spawn_servers(args: &BenchArgs) -> Result<Spawned, i32> {
    if !args.spawn {
        return Ok(Spawned::default());
    }
    match PrivateServer::start_many(REDLOCK_MASTERS) {
        Ok(servers) => Ok(Spawned { servers }),
        Err(why) => {
            eprintln!("dlock: {why}\n  hint: install redis-server (Debian package redis-server; ./scripts/ensure-redis.sh does it), or bench an existing server with --redis URL");
            Err(exit::UNAVAILABLE)
        }
    }
}

/// Without the `spawn` feature there is nothing to start: `--spawn` was refused by
/// [`BenchArgs::check`].
#[cfg(not(feature = "spawn"))]
pub fn spawn_servers(_args: &BenchArgs) -> Result<Spawned, i32> {
    let _ = REDLOCK_MASTERS;
    Ok(Spawned::default())
}

/// A private redis-server for `bench --spawn`: the test kit's, on a free loopback port in
/// a temp dir of its own, used only once it answers with its own pid, stopped (by that
/// pid) when dropped.
#[cfg(feature = "spawn")]
struct PrivateServer(dlock_testkit::RedisServer);

#[cfg(feature = "spawn")]
impl PrivateServer {
    /// Starts the server; on failure, says why (the caller exits 69: no server to bench).
    fn start() -> Result<PrivateServer, String> {
        dlock_testkit::RedisServer::try_start()
            .map(PrivateServer)
            .map_err(|err| format!("--spawn: {err}"))
    }

    /// Starts `count` servers; on failure, those already started are stopped again.
    fn start_many(count: usize) -> Result<Vec<PrivateServer>, String> {
        (0..count).map(|_| PrivateServer::start()).collect()
    }

    fn url(&self) -> String {
        self.0.url()
    }
}

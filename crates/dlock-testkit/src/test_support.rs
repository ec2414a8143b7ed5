//! Helpers shared by the tests of all modules.

use crate::server::RedisServer;

/// The pids of running servers.
pub(crate) fn pids(servers: &[RedisServer]) -> Vec<u32> {
    servers.iter().filter_map(RedisServer::pid).collect()
}

/// Panics if any of `pids` is still alive (after the handles owning them dropped).
pub(crate) fn assert_all_gone(pids: &[u32]) {
    assert!(!pids.is_empty(), "no pids to check");
    for &pid in pids {
        // SAFETY: kill(2) with signal 0 only probes; ESRCH means the process is gone
        // (and reaped: Drop waited for it).
        let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
        assert!(!alive, "redis-server {pid} still alive after drop");
    }
}

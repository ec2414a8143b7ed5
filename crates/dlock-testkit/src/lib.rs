//! Real `redis-server` processes for dlock's tests and benchmarks.
//!
//! [`RedisServer::start`] launches `redis-server` on a free loopback port in its own
//! temporary directory and waits until it answers. The handle can stop, `kill -9`, restart
//! (same port, same data directory), pause (`SIGSTOP`) and resume the server; on drop it
//! kills exactly the process it started. A missing `redis-server` binary is a clear panic
//! naming the Debian package, never a skipped test.
//!
//! Four topologies are built from such servers, each torn down process by process when
//! dropped (also when a panic interrupts their start):
//! - [`RedisCluster`]: a Redis Cluster of masters and replicas, with slot migration and
//!   master failover;
//! - [`MasterWithReplicas`]: one master and its replicas (for `WAIT`), optionally each
//!   behind its own [`Proxy`] so that one of them can be cut off from the others;
//! - [`SentinelGroup`]: Redis Sentinels watching a master, with failover;
//! - [`IndependentMasters`]: unrelated servers, each behind its own [`Proxy`] (for
//!   Redlock), so that one node can be partitioned, stalled, refused or crashed.

#![warn(missing_docs)]

mod cluster;
pub mod layout;
mod masters;
mod proxy;
mod replicated;
mod sentinel;
pub use cluster::{key_slot, RedisCluster};
pub use masters::IndependentMasters;
pub use proxy::Proxy;
pub use replicated::MasterWithReplicas;
pub use sentinel::SentinelGroup;
mod server;
pub use server::{redis_server_binary, KillOnDrop, RedisServer, ServerMode, ServerOptions};

#[cfg(test)]
mod test_support;

#[cfg(test)]
mod tests {
    use super::*;

    /// Tests share topologies across threads (e.g. a migration in `spawn_blocking` while
    /// clients run): this fails to compile if one stops being shareable.
    #[test]
    fn topologies_are_send_and_sync() {
        fn shareable<T: Send + Sync>() {}
        shareable::<RedisServer>();
        shareable::<RedisCluster>();
        shareable::<MasterWithReplicas>();
        shareable::<SentinelGroup>();
        shareable::<IndependentMasters>();
    }
}

//! A single Redis server: one multiplexed `ConnectionManager` (reconnecting by itself) for
//! every request, and connections of its own for the subscriber and acknowledged writes.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::{misconfigured, Backend, Pool, Settings};
use crate::error::Result;
use crate::redact::redact;

/// One server's connections.
pub(crate) struct SingleNode {
    /// Every request, multiplexed.
    pub(super) conn: ConnectionManager,
    /// Opens the subscriber's and the acknowledged writes' own connections.
    pub(super) client: redis::Client,
    pub(super) config: ConnectionManagerConfig,
    pub(super) acknowledged: Pool<ConnectionManager>,
}

impl Backend {
    pub(crate) fn single_node(
        conn: ConnectionManager,
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) -> Backend {
        Backend::SingleNode(Arc::new(SingleNode {
            conn,
            client,
            config,
            acknowledged: Pool::new(),
        }))
    }
}

/// Connects to the one server at `url`.
pub(super) async fn connect(url: &str, settings: &Settings) -> Result<Backend> {
    let config = settings.manager_config();
    let redis = settings.open(url)?;
    let tls = url.starts_with("rediss://");
    if tls {
        refuse_plain_port(&redis, url, settings.connect_timeout).await?;
    }
    let connect = ConnectionManager::new_with_config(redis.clone(), config.clone());
    let conn = settings.within_budget(&redact(url), tls, connect).await?;
    Ok(Backend::single_node(conn, redis, config))
}

/// A TLS handshake sent to a port that speaks plain RESP never completes: Redis waits for
/// the end of an inline command that never comes. One `PING` in the clear tells such a
/// port apart at once (a TLS server drops it or answers with an alert, never `+`/`-`).
async fn refuse_plain_port(redis: &redis::Client, url: &str, timeout: Duration) -> Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (host, port) = match redis.get_connection_info().addr() {
        redis::ConnectionAddr::TcpTls { host, port, .. } => (host.clone(), *port),
        _ => return Ok(()),
    };
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).await?;
        Ok::<u8, std::io::Error>(first[0])
    };
    match tokio::time::timeout(timeout.min(Duration::from_secs(2)), probe).await {
        Ok(Ok(b'+' | b'-')) => Err(misconfigured(format!(
            "{} answers in plain text, not TLS: use redis:// for this port, or the server's TLS port with rediss://",
            redact(url)
        ))),
        // A TLS server, or nothing there: the real connection says what is wrong.
        _ => Ok(()),
    }
}

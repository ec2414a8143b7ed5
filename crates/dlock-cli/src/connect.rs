//! How the command line's deployment is reached: the client builder with its prefix,
//! holder label, TLS files and response timeout, for one deployment or each Redlock master.

use std::time::Duration;

use dlock::{Client, Redlock};

use crate::cli::{Cli, Topology};

/// What `dlock run` processes show as the holder in `dlock inspect`: host, pid, start.
fn holder_label() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most the buffer's length.
    let host = if unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } == 0 {
        let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
        String::from_utf8_lossy(&buffer[..end])
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect()
    } else {
        "unknown".to_string()
    };
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("dlock@{host}:{}:{started}", std::process::id())
}

/// The client of the deployment `cli` names (for Redlock: of the one master `url`).
pub async fn connect(cli: &Cli, url: &str) -> dlock::Result<Client> {
    builder(cli, url)?.connect().await
}

/// The client configuration for the deployment `cli` names (for Redlock: of the one
/// master `url`), ready to connect.
fn builder(cli: &Cli, url: &str) -> dlock::Result<dlock::ClientBuilder> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            dlock::Error::InvalidArgument(format!("cannot read {}: {e}", path.display()))
        })
    };
    let builder = match cli.topology {
        Topology::SingleNode | Topology::Redlock => Client::builder(url),
        Topology::Cluster => Client::cluster_builder(cli.cluster.iter().cloned()),
        Topology::Sentinel => Client::sentinel_builder(
            cli.sentinel.iter().cloned(),
            cli.service.as_deref().unwrap_or_default(),
        ),
    };
    let mut builder = builder
        .prefix(cli.prefix.clone())
        .holder_label(holder_label());
    if let Some(ca) = &cli.tls_ca {
        builder = builder.tls_root_certificate(read(ca)?);
    }
    if let (Some(cert), Some(key)) = (&cli.tls_cert, &cli.tls_key) {
        builder = builder.tls_client_certificate(read(cert)?, read(key)?);
    }
    if let Some(timeout) = cli.replica_timeout {
        // A request with a WAIT may take the replica timeout: the response timeout must
        // leave it room (the library refuses a WAIT it would cut off).
        let room = timeout + Duration::from_secs(1);
        let room = room.clamp(dlock::DEFAULT_RESPONSE_TIMEOUT, dlock::MAX_TIMEOUT);
        builder = builder.response_timeout(room);
    }
    Ok(builder)
}

/// The Redlock over the masters of `--redis`: connected once a majority answers.
pub async fn connect_redlock(cli: &Cli) -> dlock::Result<Redlock> {
    redlock_builder(cli)?.connect().await
}

/// The masters of `--redis`, each master's client with the settings one --redis server
/// would have (prefix, holder label, TLS).
pub fn redlock_builder(cli: &Cli) -> dlock::Result<dlock::RedlockBuilder> {
    Ok(Client::redlock_builder(cli.redis.iter().cloned())
        .node_settings(builder(cli, &cli.redis[0])?))
}

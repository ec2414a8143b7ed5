//! A Sentinel-monitored group: the master the sentinels name, looked up again whenever a
//! request finds the master gone or demoted (a failover), the subscriber too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::{misconfigured, refusal, Backend, Pool, Settings};
use crate::error::{Error, Result};
use crate::redact::{describe_urls, redact};

/// A Sentinel-monitored master's connections, and the sentinels that name it.
pub(crate) struct Sentinel {
    pub(super) sentinels: tokio::sync::Mutex<redis::sentinel::SentinelClient>,
    pub(super) config: ConnectionManagerConfig,
    /// The master as last resolved, with its connections.
    pub(super) master: RwLock<SentinelMaster>,
    /// True while a task asks the sentinels for the master (one at a time).
    pub(super) resolving: AtomicBool,
}

#[derive(Clone)]
pub(super) struct SentinelMaster {
    pub(super) client: redis::Client,
    pub(super) conn: ConnectionManager,
    pub(super) acknowledged: Arc<Pool<ConnectionManager>>,
}

impl Backend {
    /// Asks the sentinels for the master and connects to it.
    pub(crate) async fn sentinel(
        mut sentinels: redis::sentinel::SentinelClient,
        config: ConnectionManagerConfig,
    ) -> redis::RedisResult<Backend> {
        let client = sentinels.async_get_client().await?;
        let conn = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        Ok(Backend::Sentinel(Arc::new(Sentinel {
            sentinels: tokio::sync::Mutex::new(sentinels),
            config,
            master: RwLock::new(SentinelMaster {
                client,
                conn,
                acknowledged: Arc::new(Pool::new()),
            }),
            resolving: AtomicBool::new(false),
        })))
    }
}

impl Sentinel {
    /// Looks for a new master when `err` may mean a failover. A READONLY reply means the
    /// master we write to was demoted: reported as a dropped connection, so waiters retry
    /// (on the new master, once found) instead of failing for good.
    pub(super) fn after_error(self: &Arc<Self>, err: redis::RedisError) -> redis::RedisError {
        self.check_master(&err);
        if is_readonly(&err) {
            return redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "the master was demoted to a replica (READONLY); following the failover",
            ));
        }
        err
    }

    /// After a request failed in a way a failover explains (the master unreachable, or a
    /// replica now: READONLY), asks the sentinels for the master in the background and
    /// switches to it when it changed. One lookup at a time.
    fn check_master(self: &Arc<Self>, err: &redis::RedisError) {
        let failover_sign = err.is_connection_dropped()
            || err.is_connection_refusal()
            || err.is_io_error()
            || err.is_timeout()
            || is_readonly(err);
        if !failover_sign || self.resolving.swap(true, Ordering::AcqRel) {
            return;
        }
        let sentinel = self.clone();
        tokio::spawn(async move {
            let found = sentinel.sentinels.lock().await.async_get_client().await;
            match found {
                Ok(client) => {
                    let current = sentinel
                        .master
                        .read()
                        .unwrap()
                        .client
                        .get_connection_info()
                        .addr()
                        .clone();
                    if *client.get_connection_info().addr() != current {
                        match ConnectionManager::new_with_config(
                            client.clone(),
                            sentinel.config.clone(),
                        )
                        .await
                        {
                            Ok(conn) => {
                                tracing::warn!(
                                    master = %client.get_connection_info().addr(),
                                    "the sentinels name a new master; following it"
                                );
                                *sentinel.master.write().unwrap() = SentinelMaster {
                                    client,
                                    conn,
                                    acknowledged: Arc::new(Pool::new()),
                                };
                            }
                            Err(err) => {
                                tracing::debug!(error = %err, "the new master does not answer yet")
                            }
                        }
                    }
                }
                Err(err) => tracing::debug!(error = %err, "no sentinel named the master"),
            }
            // Not more than a few lookups a second while the failover is under way.
            tokio::time::sleep(Duration::from_millis(100)).await;
            sentinel.resolving.store(false, Ordering::Release);
        });
    }
}

/// A write refused by a replica (also when raised inside a script).
fn is_readonly(err: &redis::RedisError) -> bool {
    err.code() == Some("READONLY") || err.to_string().contains("READONLY")
}

/// Connects to the master the sentinels at `sentinels` name for `service`; sentinels that
/// know no such master, or are no sentinels, are named as such.
pub(super) async fn connect(
    sentinels: &[String],
    service: &str,
    settings: &Settings,
) -> Result<Backend> {
    let config = settings.manager_config();
    use redis::IntoConnectionInfo;
    if sentinels.is_empty() {
        return Err(Error::InvalidArgument(
            "Sentinel needs at least one sentinel URL".into(),
        ));
    }
    if service.is_empty() || service.chars().any(char::is_whitespace) {
        return Err(Error::InvalidArgument(format!(
            "the Sentinel service name {service:?} must be a non-empty name without spaces (the name in `sentinel monitor <name> ...`)"
        )));
    }
    let mut infos = Vec::new();
    for url in sentinels {
        settings.open(url)?;
        infos.push(url.as_str().into_connection_info().map_err(|e| {
            Error::InvalidArgument(format!("Sentinel URL {:?} is not valid ({e})", redact(url)))
        })?);
    }
    let addresses = infos.iter().map(|info| info.addr().clone());
    let mut builder = redis::sentinel::SentinelClientBuilder::new(
        addresses,
        service,
        redis::sentinel::SentinelServerType::Master,
    )
    .map_err(|e| Error::InvalidArgument(format!("Sentinel settings: {e}")))?;
    // The first URL's credentials and database serve both the sentinels and the
    // master (documented on ClientBuilder::sentinel).
    let first = infos[0].redis_settings();
    if let Some(username) = first.username() {
        builder = builder
            .set_client_to_sentinel_username(username)
            .set_client_to_redis_username(username);
    }
    if let Some(password) = first.password() {
        builder = builder
            .set_client_to_sentinel_password(password)
            .set_client_to_redis_password(password);
    }
    builder = builder.set_client_to_redis_db(first.db());
    let tls = sentinels.iter().any(|url| url.starts_with("rediss://"));
    if tls {
        builder = builder
            .set_client_to_sentinel_tls_mode(redis::TlsMode::Secure)
            .set_client_to_redis_tls_mode(redis::TlsMode::Secure);
    }
    if let Some(certificates) = settings.tls.clone() {
        builder = builder
            .set_client_to_sentinel_certificates(certificates.clone())
            .set_client_to_redis_certificates(certificates);
    }
    let client = builder
        .build()
        .map_err(|e| Error::InvalidArgument(format!("Sentinel settings: {e}")))?;
    let described = format!(
        "the master of {service:?} named by the sentinels at {}",
        describe_urls(sentinels)
    );
    settings
        .within_budget(&described, tls, Backend::sentinel(client, config))
        .await
        .map_err(|err| match sentinel_refusal(&err) {
            // The sentinels answer, but name no usable master (or are no sentinels):
            // as unavailable as a master that does not answer, not a request Redis
            // refused.
            Some(reason) if reason.to_ascii_lowercase().contains("sentinel") => {
                misconfigured(format!(
                    "the sentinels at {} know no usable master named {service:?} ({reason}); check the name in `sentinel monitor <name> ...`",
                    describe_urls(sentinels)
                ))
            }
            _ => err,
        })
}

/// The words of a refusal, or of an argument error the Sentinel client raises about
/// an address (one that does not point to a sentinel).
fn sentinel_refusal(err: &Error) -> Option<&str> {
    match err {
        Error::InvalidArgument(reason) => Some(reason),
        other => refusal(other),
    }
}

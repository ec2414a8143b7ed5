//! The [`Client`]: one shared Redis connection, options, and the shared release notifier.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::error::{Error, Result};
use crate::mutex::Mutex;
use crate::options::LockOptions;
use crate::reentrant::ReentrantMutex;
use crate::renew::Renewer;
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;
use crate::wait::Notifier;

/// Default time allowed to open a connection to Redis.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time allowed for Redis to answer one request.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

/// A handle to one Redis deployment, shared by every lock made from it.
///
/// Holds a single multiplexed connection that reconnects by itself, and (from the first
/// wait on) a single subscriber connection that delivers release notifications to every
/// waiter of this client. Cloning is cheap: clones share both connections.
///
/// ```no_run
/// # async fn demo() -> dlock::Result<()> {
/// let client = dlock::Client::connect("redis://127.0.0.1:6379").await?;
/// let guard = client.mutex("nightly-report")?.lock().await?;
/// println!("fencing token {}", guard.fence());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) conn: ConnectionManager,
    redis: redis::Client,
    pub(crate) prefix: String,
    connect_timeout: Duration,
    /// Where background work (releases on drop, the notifier) runs, even when a guard is
    /// dropped on a thread outside the runtime.
    pub(crate) runtime: tokio::runtime::Handle,
    notifier: OnceLock<Notifier>,
    renewer: OnceLock<Renewer>,
}

/// Configures and opens a [`Client`]. Made by [`Client::builder`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    url: String,
    prefix: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    tls_root: Option<Vec<u8>>,
    tls_client: Option<(Vec<u8>, Vec<u8>)>,
}

impl ClientBuilder {
    /// A prefix put in front of every lock name to form its Redis key (default: none).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long opening a connection may take before failing (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one request may wait for Redis to answer (default 3 s). Keep it well
    /// below your lock leases: a request that outlives the lease is useless.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// For `rediss://` URLs: trust this CA certificate (PEM) instead of the system's roots.
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root = Some(pem.into());
        self
    }

    /// For `rediss://` URLs: present this client certificate and key (PEM) for mutual TLS.
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls_client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Opens the connection. Fails with [`Error::Connection`] when Redis cannot be reached
    /// and [`Error::InvalidArgument`] for a malformed URL or zero timeouts.
    ///
    /// Must be called inside a tokio runtime; that runtime runs the client's background work.
    pub async fn connect(self) -> Result<Client> {
        if self.connect_timeout.is_zero() || self.response_timeout.is_zero() {
            return Err(Error::InvalidArgument(
                "connect and response timeouts must be greater than zero".into(),
            ));
        }
        // rustls needs a process-wide crypto provider; another part of the program may
        // have installed one already, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let opened = if self.tls_root.is_some() || self.tls_client.is_some() {
            redis::Client::build_with_tls(
                self.url.as_str(),
                redis::TlsCertificates {
                    client_tls: self
                        .tls_client
                        .clone()
                        .map(|(cert, key)| redis::ClientTlsConfig {
                            client_cert: cert,
                            client_key: key,
                        }),
                    root_cert: self.tls_root.clone(),
                },
            )
        } else {
            redis::Client::open(self.url.as_str())
        };
        let redis = opened.map_err(|e| {
            Error::InvalidArgument(format!(
                "Redis URL {:?} is not valid ({e}); expected redis://[user:password@]host[:port][/db] or rediss://...",
                redact(&self.url)
            ))
        })?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            // Reconnection happens on the next request; a caller waiting on a lock retries by
            // itself, so one quick retry here keeps failures prompt.
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let connect = ConnectionManager::new_with_config(redis.clone(), config);
        let conn = match tokio::time::timeout(self.connect_timeout * 2, connect).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(Error::Connection(redis::RedisError::from(
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "no connection to {} within {:?}",
                            redact(&self.url),
                            self.connect_timeout * 2
                        ),
                    ),
                )))
            }
        };
        Ok(Client {
            inner: Arc::new(ClientInner {
                conn,
                redis,
                prefix: self.prefix,
                connect_timeout: self.connect_timeout,
                runtime: tokio::runtime::Handle::current(),
                notifier: OnceLock::new(),
                renewer: OnceLock::new(),
            }),
        })
    }
}

impl Client {
    /// Connects with default options. See [`Client::builder`] for the URL forms.
    pub async fn connect(url: &str) -> Result<Client> {
        Client::builder(url).connect().await
    }

    /// Starts configuring a client for `url`: `redis://host:port/db`, `rediss://` for TLS
    /// (system roots, or [`ClientBuilder::tls_root_certificate`]), and
    /// `redis://user:password@host` for ACL users.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_string(),
            prefix: String::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            tls_root: None,
            tls_client: None,
        }
    }

    /// A mutex named `name` with default options (30 s lease renewed automatically,
    /// wait forever).
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        Mutex::new(self.clone(), name, LockOptions::default())
    }

    /// A mutex named `name` with the given options.
    pub fn mutex_with(&self, name: &str, options: LockOptions) -> Result<Mutex> {
        Mutex::new(self.clone(), name, options)
    }

    /// A fair mutex named `name` with default options: granted strictly in arrival order;
    /// a release wakes only the next waiter. Same storage and guard as [`Client::mutex`].
    pub fn fair_mutex(&self, name: &str) -> Result<Mutex> {
        Mutex::new_fair(self.clone(), name, LockOptions::default())
    }

    /// A fair mutex named `name` with the given options.
    pub fn fair_mutex_with(&self, name: &str, options: LockOptions) -> Result<Mutex> {
        Mutex::new_fair(self.clone(), name, options)
    }

    /// A semaphore named `name` allowing `permits` holders at once, with default options
    /// (30 s permit leases renewed automatically, wait forever).
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        Semaphore::new(self.clone(), name, permits, LockOptions::default())
    }

    /// A semaphore with the given options.
    pub fn semaphore_with(
        &self,
        name: &str,
        permits: u32,
        options: LockOptions,
    ) -> Result<Semaphore> {
        Semaphore::new(self.clone(), name, permits, options)
    }

    /// A read-write lock named `name` with default options (30 s leases renewed
    /// automatically, wait forever).
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        RwLock::new(self.clone(), name, LockOptions::default())
    }

    /// A read-write lock with the given options.
    pub fn rwlock_with(&self, name: &str, options: LockOptions) -> Result<RwLock> {
        RwLock::new(self.clone(), name, options)
    }

    /// A reentrant mutex named `name` with default options (30 s lease renewed
    /// automatically, wait forever).
    pub fn reentrant_mutex(&self, name: &str) -> Result<ReentrantMutex> {
        ReentrantMutex::new(self.clone(), name, LockOptions::default())
    }

    /// A reentrant mutex named `name` with the given options.
    pub fn reentrant_mutex_with(&self, name: &str, options: LockOptions) -> Result<ReentrantMutex> {
        ReentrantMutex::new(self.clone(), name, options)
    }

    /// The key prefix in use.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// A clone of the shared connection, for commands the locks need.
    pub(crate) fn conn(&self) -> ConnectionManager {
        self.inner.conn.clone()
    }

    /// The shared renewal scheduler, started on first use.
    pub(crate) fn renewer(&self) -> &Renewer {
        self.inner
            .renewer
            .get_or_init(|| Renewer::start(self.inner.conn.clone(), &self.inner.runtime))
    }

    /// The shared release notifier, started on first use.
    pub(crate) fn notifier(&self) -> &Notifier {
        self.inner.notifier.get_or_init(|| {
            Notifier::start(
                self.inner.redis.clone(),
                self.inner.connect_timeout,
                &self.inner.runtime,
            )
        })
    }
}

/// Running dlock's scripts through the client's shared connection.
pub(crate) trait RunScript {
    /// Runs the script. Every dlock script may safely run twice (acquires recognise their
    /// own token, releases and extends compare it), so a request that met a dropped
    /// connection is sent once more on the reconnected one; timeouts are not retried here.
    async fn run<T: redis::FromRedisValue>(&self, client: &Client) -> Result<T>;
}

impl RunScript for redis::ScriptInvocation<'_> {
    async fn run<T: redis::FromRedisValue>(&self, client: &Client) -> Result<T> {
        match self.invoke_async(&mut client.conn()).await {
            Err(err) if !err.is_timeout() && (err.is_connection_dropped() || err.is_io_error()) => {
                tracing::debug!(error = %err, "connection dropped; sending the script again");
                Ok(self.invoke_async(&mut client.conn()).await?)
            }
            other => Ok(other?),
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

/// The URL with any password replaced, for error messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme_end + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(
            super::redact("redis://u:secret@h:1/0"),
            "redis://u:***@h:1/0"
        );
        assert_eq!(super::redact("redis://h:1"), "redis://h:1");
        assert_eq!(super::redact("redis://:pw@h"), "redis://:***@h");
    }
}

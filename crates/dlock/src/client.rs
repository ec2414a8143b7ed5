//! The [`Client`]: a handle on one deployment (its backend, key prefix and session), and
//! the [`ClientBuilder`] that checks its settings and connects it (through
//! [`Backend::connect`](crate::backend::Backend::connect), which owns each topology's
//! connect code).

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Backend, Connection, Settings, Topology};

use crate::error::{Error, Result};
use crate::inspect::scripts::{DescribeKey, LiveEntries};
use crate::notifier::Notifier;
use crate::renew::Renewer;
use crate::script::{found_not_wanted, LuaScript, ScriptCall};
use crate::session::{Lane, Session};

/// Longest connect or response timeout accepted.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60 * 60);

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
/// println!("fencing token {}", guard.fence().await?);
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
    /// The handle of a lock with [`LockOptions::replicas`]: its grants and extends are sent
    /// with a `WAIT` (see `script::Call::run`).
    replicas: Option<crate::options::Replicas>,
}

pub(crate) struct ClientInner {
    /// Every Redis call goes through it (scripts, queries, renewals, the subscriber).
    pub(crate) backend: Backend,
    pub(crate) prefix: String,
    connect_timeout: Duration,
    /// The runtime, holds, background work, closed flag and tokens of this client.
    session: Session,
    response_timeout: Duration,
}

/// Configures and opens a [`Client`]. Made by [`Client::builder`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    url: String,
    topology: Topology,
    prefix: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    tls_root: Option<Vec<u8>>,
    tls_client: Option<(Vec<u8>, Vec<u8>)>,
    holder_label: Option<String>,
}

/// Longest holder label accepted ([`ClientBuilder::holder_label`]).
pub const MAX_HOLDER_LABEL: usize = 128;

impl ClientBuilder {
    /// Puts `label` in front of every token this client's holds get
    /// (`label/<client tag>.<32 hex digits>`, and a queued waiter's `~<ttl ms>[~<N>]` after
    /// it), so `dlock inspect` can tell who holds a lock (the `dlock` CLI uses
    /// `dlock@host:pid:start`). The token stays a plain string with 128 random bits, so
    /// other clients' locks still interoperate. Letters, digits and `.:@_-` only, at most
    /// [`MAX_HOLDER_LABEL`] bytes.
    pub fn holder_label(mut self, label: impl Into<String>) -> Self {
        self.holder_label = Some(label.into());
        self
    }

    /// The same settings for another single server (a Redlock node).
    pub(crate) fn url(mut self, url: &str) -> Self {
        self.url = url.to_string();
        self.topology = Topology::SingleNode;
        self
    }

    pub(crate) fn prefix_str(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn holder_label_str(&self) -> Option<&str> {
        self.holder_label.as_deref()
    }

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
        for (what, timeout) in [
            ("connect", self.connect_timeout),
            ("response", self.response_timeout),
        ] {
            if timeout.is_zero() || timeout > MAX_TIMEOUT {
                return Err(Error::InvalidArgument(format!(
                    "the {what} timeout {} is out of range; use more than zero and at most {}",
                    crate::duration_text::humane(timeout),
                    crate::duration_text::humane(MAX_TIMEOUT)
                )));
            }
        }
        if let Some(label) = &self.holder_label {
            let allowed = |c: char| c.is_ascii_alphanumeric() || ".:@_-".contains(c);
            if label.is_empty() || label.len() > MAX_HOLDER_LABEL || !label.chars().all(allowed) {
                return Err(Error::InvalidArgument(format!(
                    "holder label {label:?} must be 1 to {MAX_HOLDER_LABEL} letters, digits or .:@_- characters"
                )));
            }
        }
        if let Some(ca) = &self.tls_root {
            check_pem_certificates("the TLS CA certificate", ca)?;
        }
        if let Some((cert, key)) = &self.tls_client {
            check_pem_certificates("the TLS client certificate", cert)?;
            use rustls::pki_types::{pem::PemObject, PrivateKeyDer};
            PrivateKeyDer::from_pem_slice(key).map_err(|e| {
                Error::InvalidArgument(format!("the TLS client key is not a PEM private key ({e})"))
            })?;
        }
        // rustls needs a process-wide crypto provider; another part of the program may
        // have installed one already, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let settings = Settings {
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            tls: self.tls_certificates(),
        };
        let backend = Backend::connect(&self.topology, &self.url, &settings).await?;
        let client = Client {
            inner: Arc::new(ClientInner {
                backend,
                prefix: self.prefix,
                connect_timeout: self.connect_timeout,
                session: Session::new(tokio::runtime::Handle::current(), self.holder_label),
                response_timeout: self.response_timeout,
            }),
            replicas: None,
        };
        Ok(client)
    }

    fn tls_certificates(&self) -> Option<redis::TlsCertificates> {
        (self.tls_root.is_some() || self.tls_client.is_some()).then(|| redis::TlsCertificates {
            client_tls: self
                .tls_client
                .clone()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert,
                    client_key: key,
                }),
            root_cert: self.tls_root.clone(),
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
            topology: Topology::SingleNode,
            prefix: String::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            tls_root: None,
            tls_client: None,
            holder_label: None,
        }
    }

    /// Starts configuring a client for a Redis Cluster, found through `seeds` (any of its
    /// nodes; the rest are discovered). Requests are routed by slot and follow `MOVED` and
    /// `ASK` during a resharding; release notifications travel over sharded pub/sub
    /// (Redis 7 or newer). Every key of one lock, and its channels, share one slot.
    ///
    /// ```no_run
    /// # async fn demo() -> dlock::Result<()> {
    /// let client = dlock::Client::cluster_builder(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
    ///     .connect()
    ///     .await?;
    /// let guard = client.mutex("nightly-report")?.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn cluster_builder<S: Into<String>>(seeds: impl IntoIterator<Item = S>) -> ClientBuilder {
        let seeds: Vec<String> = seeds.into_iter().map(Into::into).collect();
        let mut builder = Client::builder(seeds.first().map_or("", String::as_str));
        builder.topology = Topology::Cluster(seeds);
        builder
    }

    /// Starts configuring a client for the master that the sentinels at `sentinels` name
    /// for `service` (the name in `sentinel monitor <service> ...`). After a failover,
    /// requests and the release subscriber follow the new master. The first URL's
    /// username, password and database are used for the sentinels and the master alike.
    ///
    /// Replication is asynchronous: a grant the master acknowledged may be lost in a
    /// failover, and the lock granted again. [`LockOptions::replicas`](crate::LockOptions::replicas) narrows that hole.
    ///
    /// ```no_run
    /// # async fn demo() -> dlock::Result<()> {
    /// let client = dlock::Client::sentinel_builder(
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "mymaster",
    /// )
    /// .connect()
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub fn sentinel_builder<S: Into<String>>(
        sentinels: impl IntoIterator<Item = S>,
        service: &str,
    ) -> ClientBuilder {
        let sentinels: Vec<String> = sentinels.into_iter().map(Into::into).collect();
        let mut builder = Client::builder(sentinels.first().map_or("", String::as_str));
        builder.topology = Topology::Sentinel {
            sentinels,
            service: service.to_string(),
        };
        builder
    }

    /// The key prefix in use.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Releases every lock still held through this client, stops renewal and the
    /// release notifier, and refuses new acquisitions ([`Error::Closed`]).
    ///
    /// Call it before `main` returns: a guard still alive when the runtime shuts down is
    /// otherwise not released (its background release never runs) and the next run waits
    /// out its lease. The lost signal of every released guard fires with
    /// [`LostReason::Released`](crate::LostReason::Released); their `unlock` then fails
    /// with [`Error::Lost`]. Waits in progress end with [`Error::Closed`].
    ///
    /// ```no_run
    /// # async fn demo() -> dlock::Result<()> {
    /// let client = dlock::Client::connect("redis://127.0.0.1:6379").await?;
    /// let _guard = client.mutex("nightly-report")?.lock().await?;
    /// // ... work ...
    /// client.shutdown().await; // releases the lock even though the guard is still alive
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self) {
        // Waits in progress end with the response timeout at worst; give-backs are waited
        // for while they land, and abandoned once none has for this long.
        let bound = self
            .inner
            .response_timeout
            .saturating_mul(3)
            .max(Duration::from_secs(5));
        self.inner.session.shutdown(bound, async {}).await;
    }

    /// The session of this client: its lost signal for every hold, and its end. See
    /// [`Session`].
    pub fn session(&self) -> &Session {
        &self.inner.session
    }

    /// How long one request may wait for Redis to answer
    /// ([`ClientBuilder::response_timeout`]).
    pub fn response_timeout(&self) -> Duration {
        self.inner.response_timeout
    }

    /// True once [`Client::shutdown`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.session.is_closed()
    }

    /// A plain `GET` of a string key (`None` when missing); a key of another type is
    /// [`Error::WrongType`] against `wanted`.
    pub(crate) async fn get_string(&self, key: &str, wanted: &str) -> Result<Option<String>> {
        let reply: redis::RedisResult<Option<String>> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut self.conn())
            .await;
        match reply {
            Ok(value) => Ok(value),
            Err(err) if err.code() == Some("WRONGTYPE") => Err(self.wrong_type(key, wanted).await),
            Err(err) => Err(Error::from_redis("GET", err)),
        }
    }

    /// The live leased entries (token, data) of a dlock hash of `kind` at `key` (read
    /// holds, semaphore permits); none when the key does not exist, or holds a string and
    /// `string_is_empty` (a write-held read-write lock has no readers).
    pub(crate) async fn leased_entries(
        &self,
        key: &str,
        kind: &str,
        string_is_empty: bool,
    ) -> Result<Vec<(String, String)>> {
        let flat = LiveEntries {
            key,
            kind,
            string_is_empty,
        }
        .run(self)
        .await?;
        Ok(flat
            .chunks_exact(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect())
    }

    /// [`Error::WrongType`] for `key`, saying what it holds (one more request).
    pub(crate) fn wrong_type<'a>(
        &'a self,
        key: &'a str,
        wanted: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Error> + Send + 'a>> {
        // Boxed: only a key of the wrong type comes here, and inline this future would
        // be part of every request's that may find one (every acquire and release), and
        // so of the bytes copied on every call.
        Box::pin(async move {
            let found = DescribeKey { key, wanted }.run(self).await.ok();
            Error::WrongType {
                key: key.to_string(),
                what: found_not_wanted(found.as_deref(), wanted),
            }
        })
    }

    /// A request handle of the client's backend, for commands the locks need.
    pub(crate) fn conn(&self) -> Connection {
        self.inner.backend.connection()
    }

    /// Opens a connection of its own for commands of your own on this client's
    /// deployment, routed as the locks' requests are: by key slot on a Cluster (following
    /// `MOVED`/`ASK`), to the master the sentinels name (opened to the current one; a
    /// failover is reported like any dropped connection, so open another). It is not the
    /// locks' connection: a blocking command (`BLPOP`, `WAIT`), a `SELECT` or a
    /// transaction there cannot hold up or redirect them. Use it for data kept beside a
    /// lock, for a baseline to compare dlock with (as `dlock bench` does), or for a
    /// command the library does not send. Cheap to clone (clones share it).
    ///
    /// ```no_run
    /// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
    /// use dlock::redis; // the redis crate dlock is built on, re-exported
    /// let mut conn = client.connection().await?;
    /// let _: () = redis::cmd("SET").arg("report:last").arg("ok").query_async(&mut conn).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connection(&self) -> Result<RawConnection> {
        self.inner
            .backend
            .dedicated()
            .await
            .map(RawConnection)
            .map_err(|err| Error::from_redis("connect", err))
    }

    /// Sends `cmd` to every master of the deployment (the one server, or each master of a
    /// Cluster) and returns each one's reply: for commands without a key, such as `INFO`.
    pub async fn on_every_master(&self, cmd: &redis::Cmd) -> Result<Vec<redis::Value>> {
        self.inner
            .backend
            .on_every_master(cmd)
            .await
            .map_err(|err| Error::from_redis("a command on every master", err))
    }

    /// Every key matching the glob `pattern` on every master (`SCAN ... MATCH`, never
    /// `KEYS`), unsorted; a key may be listed twice (`SCAN` may return one more than once).
    /// Keys that are not UTF-8 text are left out (dlock writes none: lock names are text);
    /// how many is logged at info level.
    pub async fn scan(&self, pattern: &str) -> Result<Vec<String>> {
        self.inner
            .backend
            .scan(pattern)
            .await
            .map(|scanned| scanned.keys)
            .map_err(|err| Error::from_redis("SCAN", err))
    }

    /// A handle of the same client whose grants and extends wait for `replicas`.
    pub(crate) fn acknowledging(&self, replicas: crate::options::Replicas) -> Client {
        Client {
            inner: self.inner.clone(),
            replicas: Some(replicas),
        }
    }

    /// The shared renewal scheduler, started on first use.
    ///
    pub(crate) fn renewer(&self) -> &Renewer {
        let lane = match self.replicas {
            Some(_) => Lane::Acknowledged,
            None => Lane::Plain,
        };
        self.inner
            .session
            .renewer(lane, || Arc::new(self.inner.backend.clone()))
    }

    /// The shared release notifier if it was started (by a wait), without starting it.
    pub(crate) fn started_notifier(&self) -> Option<&Notifier> {
        self.inner.session.started_notifier()
    }

    /// The shared release notifier, started on first use.
    pub(crate) fn notifier(&self) -> &Notifier {
        self.inner.session.notifier(|runtime| {
            Notifier::start(
                self.inner.backend.clone(),
                self.inner.connect_timeout,
                runtime,
            )
        })
    }
}

impl crate::script::Target for Client {
    fn backend(&self) -> &Backend {
        &self.inner.backend
    }

    /// What this handle's grants and extends wait for (see [`Client::acknowledging`]).
    fn replicas(&self) -> Option<crate::options::Replicas> {
        self.replicas
    }
}

/// Runs a script of the caller's (`source`, with the prelude) the way dlock runs its own,
/// under the [resend check](crate::__resend_check) when it is enabled: the check's
/// negative control, which shows it catches a script that is not safe to run twice.
#[doc(hidden)]
pub async fn probe(
    client: &Client,
    source: &str,
    keys: &[&str],
    args: &[&str],
) -> Result<redis::Value> {
    let libraries = concat!(
        include_str!("lua/answer.lua"),
        include_str!("lua/fencing.lua"),
        include_str!("lua/prelude.lua")
    );
    let form = crate::script::Form {
        grants: false,
        wrapped: true,
        fence_alone: false,
    };
    let script = LuaScript::new("probe", &[], libraries, source, form);
    let mut call = script.call();
    for key in keys {
        call = call.key(*key);
    }
    for arg in args {
        call = call.arg(*arg);
    }
    call.run(client).await
}

/// Rejects a PEM file without certificates before any connection is tried.
fn check_pem_certificates(what: &str, pem: &[u8]) -> Result<()> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut found = 0;
    for certificate in CertificateDer::pem_slice_iter(pem) {
        certificate
            .map_err(|e| Error::InvalidArgument(format!("{what} is not valid PEM ({e})")))?;
        found += 1;
    }
    if found == 0 {
        return Err(Error::InvalidArgument(format!(
            "{what} holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)"
        )));
    }
    Ok(())
}

/// A connection of its own for commands of your own on a [`Client`]'s deployment; opened
/// by [`Client::connection`]. Use it like any connection of the `redis` crate
/// (`query_async`, pipelines, scripts).
#[derive(Clone)]
pub struct RawConnection(Connection);

impl redis::aio::ConnectionLike for RawConnection {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        self.0.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

impl std::fmt::Debug for RawConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawConnection").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

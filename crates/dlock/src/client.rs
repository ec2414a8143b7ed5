//! The [`Client`]: one shared Redis connection, options, and the shared release notifier.

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::backend::{Backend, Connection};

use crate::error::{Error, Result};
use crate::notifier::Notifier;
use crate::renew::Renewer;
use crate::script::{describe, lua_script, LuaScript};
use crate::session::{Lane, Session};

static DESCRIBE: LazyLock<LuaScript> = lua_script!("describe", "describe.lua");
static LIVE_ENTRIES: LazyLock<LuaScript> =
    lua_script!("list holders", "entries.lua", "entries_live.lua");

/// The oldest Redis dlock's scripts run on (`ZADD GT`, `SET ... GET`-era commands).
pub const MIN_REDIS_VERSION: (u32, u32) = (6, 2);

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

/// Which Redis deployment a [`ClientBuilder`] connects to.
#[derive(Debug, Clone)]
enum Topology {
    /// The one server of the builder's URL.
    SingleNode,
    /// A Redis Cluster, found through these seed nodes.
    Cluster(Vec<String>),
    /// The master the sentinels name for `service`.
    Sentinel {
        sentinels: Vec<String>,
        service: String,
    },
}

/// Longest holder label accepted ([`ClientBuilder::holder_label`]).
pub const MAX_HOLDER_LABEL: usize = 128;

impl ClientBuilder {
    /// Puts `label` in front of every token this client's holds get (`label/<32 hex
    /// digits>`), so `dlock inspect` can tell who holds a lock (the `dlock` CLI uses
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
                    crate::humane(timeout),
                    crate::humane(MAX_TIMEOUT)
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
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            // Reconnection happens on the next request; a caller waiting on a lock retries by
            // itself, so one quick retry here keeps failures prompt.
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let backend = match &self.topology {
            Topology::SingleNode => self.connect_single_node(config).await?,
            Topology::Cluster(seeds) => self.connect_cluster(seeds).await?,
            Topology::Sentinel { sentinels, service } => {
                self.connect_sentinel(sentinels, service, config).await?
            }
        };
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
        client.check_server().await?;
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

    /// Opens a `redis::Client` for one URL, with the builder's TLS certificates.
    fn open(&self, url: &str) -> Result<redis::Client> {
        let opened = match self.tls_certificates() {
            Some(certificates) => redis::Client::build_with_tls(url, certificates),
            None => redis::Client::open(url),
        };
        opened.map_err(|e| {
            Error::InvalidArgument(format!(
                "Redis URL {:?} is not valid ({e}); expected redis://[user:password@]host[:port][/db] or rediss://...",
                redact(url)
            ))
        })
    }

    /// Bounds a connection attempt by the connect timeout, with the errors named.
    async fn within_budget<T>(
        &self,
        what: &str,
        tls: bool,
        connect: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        let budget = self.connect_timeout;
        match tokio::time::timeout(budget, connect).await {
            Ok(Ok(connected)) => Ok(connected),
            Ok(Err(err)) => Err(connect_error(what, tls, err)),
            Err(_) => Err(Error::Connection(redis::RedisError::from(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no connection to {what} within {}{}",
                        crate::humane(budget),
                        if tls {
                            " (a TLS handshake that never completes: is the server serving TLS on this port?)"
                        } else {
                            ""
                        }
                    ),
                ),
            ))),
        }
    }

    async fn connect_single_node(&self, config: ConnectionManagerConfig) -> Result<Backend> {
        let redis = self.open(&self.url)?;
        let tls = self.url.starts_with("rediss://");
        if tls {
            refuse_plain_port(&redis, &self.url, self.connect_timeout).await?;
        }
        let connect = ConnectionManager::new_with_config(redis.clone(), config.clone());
        let conn = self.within_budget(&redact(&self.url), tls, connect).await?;
        Ok(Backend::single_node(conn, redis, config))
    }

    async fn connect_cluster(&self, seeds: &[String]) -> Result<Backend> {
        if seeds.is_empty() {
            return Err(Error::InvalidArgument(
                "a cluster needs at least one seed node URL".into(),
            ));
        }
        for seed in seeds {
            self.open(seed)?;
        }
        let tls = seeds.iter().any(|seed| seed.starts_with("rediss://"));
        let described = format!("the cluster at {}", describe_urls(seeds));
        let (seeds, certificates) = (seeds.to_vec(), self.tls_certificates());
        let (connect_timeout, response_timeout) = (self.connect_timeout, self.response_timeout);
        let builder: crate::backend::ClusterBuilder = Arc::new(move || {
            let builder = redis::cluster::ClusterClientBuilder::new(seeds.clone())
                .connection_timeout(connect_timeout)
                .response_timeout(response_timeout)
                // MOVED/ASK and a failed node are retried with a short pause; a lock call
                // that still fails retries by itself.
                .retries(4)
                .min_retry_wait(10)
                .max_retry_wait(500);
            match &certificates {
                Some(certificates) => builder.certs(certificates.clone()),
                None => builder,
            }
        });
        self.within_budget(&described, tls, Backend::cluster(builder))
            .await
            .map_err(|err| match err {
                // The cluster client reports a failed login as a connection failure.
                Error::Connection(inner)
                    if inner.to_string().to_ascii_lowercase().contains("authentication failed")
                        || inner.to_string().contains("WRONGPASS") =>
                {
                    Error::Authentication(inner)
                }
                err if refusal(&err).is_some_and(|r| r.contains("cluster support disabled")) => {
                    misconfigured(format!(
                        "{described} includes a server without cluster support; connect to a single server with Client::builder (the CLI's --redis)"
                    ))
                }
                err if refusal(&err).is_some_and(|r| r.contains("unknown command 'CLUSTER'")) => {
                    misconfigured(format!(
                        "{described} includes a server that does not know CLUSTER (a Sentinel?); give the cluster's data nodes"
                    ))
                }
                err => err,
            })
    }

    async fn connect_sentinel(
        &self,
        sentinels: &[String],
        service: &str,
        config: ConnectionManagerConfig,
    ) -> Result<Backend> {
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
            self.open(url)?;
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
        if let Some(certificates) = self.tls_certificates() {
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
        self.within_budget(&described, tls, Backend::sentinel(client, config))
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
        // Waits in progress and give-backs end with the response timeout at worst.
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
        let flat: Vec<String> = LIVE_ENTRIES
            .call()
            .key(key)
            .arg(kind)
            .arg(if string_is_empty { "1" } else { "0" })
            .run(self)
            .await?;
        Ok(flat
            .chunks_exact(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect())
    }

    /// [`Error::WrongType`] for `key`, saying what it holds (one more request).
    pub(crate) async fn wrong_type(&self, key: &str, wanted: &str) -> Error {
        let found: String = DESCRIBE
            .call()
            .key(key)
            .arg(wanted)
            .run(self)
            .await
            .unwrap_or_else(|_| "another type".to_string());
        Error::WrongType {
            key: key.to_string(),
            what: format!("{}, not {}", describe(&found), describe(wanted)),
        }
    }

    /// Checks the server version (every master's, on a cluster); warns when eviction
    /// could drop locks or fences.
    async fn check_server(&self) -> Result<()> {
        let infos = match self
            .inner
            .backend
            .on_every_master(&redis::cmd("INFO"))
            .await
        {
            Ok(infos) => infos,
            Err(err) if err.code() == Some("NOPERM") => {
                tracing::debug!("INFO is not permitted; the server version is not checked");
                return Ok(());
            }
            Err(err) => return Err(Error::from_redis("INFO", err)),
        };
        for info in infos {
            let info: String = redis::from_redis_value(info)
                .map_err(|e| Error::unexpected_reply(format!("INFO: {e}")))?;
            self.check_info(&info)?;
        }
        Ok(())
    }

    fn check_info(&self, info: &str) -> Result<()> {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        if !matches!(self.inner.backend, Backend::Cluster(_)) {
            // A server of another deployment answers, but cannot serve these locks as
            // configured: said at connect, not as a MOVED or an unknown command later.
            if field("redis_mode") == Some("sentinel") {
                return Err(misconfigured(
                    "the server is a Redis Sentinel, not a data server: connect through it with Client::sentinel_builder (the CLI's --sentinel with --service)".into(),
                ));
            }
            if field("cluster_enabled") == Some("1") {
                return Err(misconfigured(
                    "the server is a Redis Cluster node: connect with Client::cluster_builder (the CLI's --cluster), which routes every lock to the node of its slot".into(),
                ));
            }
        }
        if let Some(version) = field("redis_version") {
            let needed = match self.inner.backend.sharded_pubsub() {
                // Sharded pub/sub (SPUBLISH/SSUBSCRIBE) came with Redis 7.
                true => (7, 0),
                false => MIN_REDIS_VERSION,
            };
            if older_than(version, needed) {
                return Err(Error::Unsupported(format!(
                    "the server runs Redis {version}; dlock needs Redis {}.{} or newer{}",
                    needed.0,
                    needed.1,
                    if needed == MIN_REDIS_VERSION {
                        ""
                    } else {
                        " on a cluster"
                    }
                )));
            }
        }
        let maxmemory = field("maxmemory").and_then(|v| v.parse::<u64>().ok());
        let policy = field("maxmemory_policy");
        if let (Some(limit), Some(policy)) = (maxmemory, policy) {
            if limit > 0 && policy != "noeviction" {
                tracing::warn!(
                    policy,
                    "Redis may evict keys (maxmemory-policy {policy}): an evicted lock can be granted twice and an evicted fencing counter restarts at zero; set maxmemory-policy noeviction"
                );
            }
        }
        Ok(())
    }

    /// A request handle of the client's backend, for commands the locks need.
    pub(crate) fn conn(&self) -> Connection {
        self.inner.backend.connection()
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
    let source = format!(
        "{}{}{source}",
        include_str!("fencing.lua"),
        include_str!("prelude.lua")
    );
    let script = LuaScript::new("probe", &source, false);
    let mut call = script.call();
    for key in keys {
        call = call.key(*key);
    }
    for arg in args {
        call = call.arg(*arg);
    }
    call.run(client).await
}

/// True when a `redis_version` is older than `needed` (major, minor).
fn older_than(version: &str, needed: (u32, u32)) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) < needed
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

/// Classifies a failure to connect, naming TLS when the handshake is what failed.
fn connect_error(url: &str, tls: bool, err: redis::RedisError) -> Error {
    if err.kind() == redis::ErrorKind::Parse {
        // Something answered, but not in the Redis protocol (e.g. an HTTP server).
        return misconfigured(format!(
            "{} answers, but not in the Redis protocol; check the host and port",
            redact(url)
        ));
    }
    let text = err.to_string();
    let tls_failure = tls
        && [
            "tls",
            "certificate",
            "handshake",
            "corrupt message",
            "InvalidContentType",
        ]
        .iter()
        .any(|word| text.contains(word));
    if tls_failure {
        return misconfigured(format!(
            "the TLS handshake with {} failed ({text}); check that the server serves TLS on this port and that --tls-ca names the CA that signed its certificate",
            redact(url)
        ));
    }
    Error::from_redis("connect", err)
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

/// The server's words when `err` is a refusal.
fn refusal(err: &Error) -> Option<&str> {
    match err {
        Error::Refused { reason, .. } => Some(reason),
        _ => None,
    }
}

/// The words of a refusal, or of an argument error the Sentinel client raises about
/// an address (one that does not point to a sentinel).
fn sentinel_refusal(err: &Error) -> Option<&str> {
    match err {
        Error::InvalidArgument(reason) => Some(reason),
        other => refusal(other),
    }
}

/// A deployment that cannot serve locks as configured: not worth retrying.
fn misconfigured(why: String) -> Error {
    Error::Misconfigured(why)
}

/// Several URLs for a message, passwords hidden.
fn describe_urls(urls: &[String]) -> String {
    urls.iter()
        .map(|url| redact(url))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The URL with any password replaced, for messages and logs: `user:password@` and the
/// `pass=` / `password=` query parameters of unix-socket URLs.
pub fn redact(url: &str) -> String {
    let url = redact_userinfo(url);
    match url.split_once('?') {
        Some((base, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((key, _)) if key == "pass" || key == "password" => format!("{key}=***"),
                    _ => param.to_string(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
        None => url,
    }
}

fn redact_userinfo(url: &str) -> String {
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
    fn versions_before_6_2_are_too_old() {
        for old in ["5.0.14", "6.0.20", "6.1.9", "2.8"] {
            assert!(super::older_than(old, super::MIN_REDIS_VERSION), "{old}");
        }
        for new in ["6.2.0", "7.0.15", "7.4.2", "10.0.0"] {
            assert!(!super::older_than(new, super::MIN_REDIS_VERSION), "{new}");
        }
    }

    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(
            super::redact("redis://u:secret@h:1/0"),
            "redis://u:***@h:1/0"
        );
        assert_eq!(super::redact("redis://h:1"), "redis://h:1");
        assert_eq!(super::redact("redis://:pw@h"), "redis://:***@h");
        assert_eq!(
            super::redact("redis+unix:///tmp/r.sock?db=1&pass=S3CRET"),
            "redis+unix:///tmp/r.sock?db=1&pass=***"
        );
        assert_eq!(
            super::redact("unix:///s?password=x"),
            "unix:///s?password=***"
        );
    }
}

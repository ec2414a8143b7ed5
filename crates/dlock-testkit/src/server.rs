//! One real `redis-server` (or Valkey, or a Sentinel) process: started on a free loopback
//! port in its own directory, probed until it answers, and killed by PID when dropped; and
//! the probing, polling and binary lookup the topologies share.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long one probe of a server (connect, then one reply) may take before it counts as
/// "not answering". Probes run in polling loops, so a paused server must not hang them.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What a server runs as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ServerMode {
    /// A plain server (a replica too, with `--replicaof` in [`ServerOptions::extra_args`]).
    #[default]
    Standalone,
    /// A cluster node (`cluster-enabled yes`) with its `nodes.conf` in its data directory
    /// and its cluster bus on a second free port. It belongs to no cluster until joined:
    /// [`RedisCluster`](crate::cluster::RedisCluster) does that.
    Cluster {
        /// `cluster-node-timeout`: how long a node may not answer before it is suspected.
        node_timeout: Duration,
    },
    /// Redis Sentinel (`redis-server sentinel.conf --sentinel`), with its own rewritable
    /// config file in its data directory. It watches nothing until told to:
    /// [`SentinelGroup`](crate::sentinel::SentinelGroup) does that.
    Sentinel,
}

/// How a server is started.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Turn on the append-only file (persistence across restarts).
    pub aof: bool,
    /// `appendfsync` policy when `aof` is on (`always` when `None`).
    pub appendfsync: Option<String>,
    /// Extra `--name value` arguments, e.g. `["--requirepass", "pw"]`.
    pub extra_args: Vec<String>,
    /// Serve TLS only (`rediss://`), with a certificate from a CA made for this server.
    /// Standalone servers only.
    pub tls: bool,
    /// Plain server, cluster node or sentinel.
    pub mode: ServerMode,
    /// The server binary, when not the one `REDIS_SERVER` or `PATH` names (for example a
    /// `valkey-server` beside Redis ones).
    pub binary: Option<PathBuf>,
    /// Environment variables for the server process (for example `LD_PRELOAD` of
    /// libfaketime, to move its clock).
    pub env: Vec<(String, String)>,
}

impl ServerOptions {
    /// AOF on with `appendfsync always`: every acknowledged write survives a crash.
    pub fn durable() -> Self {
        ServerOptions {
            aof: true,
            appendfsync: Some("always".into()),
            ..ServerOptions::default()
        }
    }

    /// TLS only, no persistence.
    pub fn tls() -> Self {
        ServerOptions {
            tls: true,
            ..ServerOptions::default()
        }
    }
}

/// One `redis-server` process owned by a test.
pub struct RedisServer {
    port: u16,
    /// The cluster bus port of a cluster node: chosen once, so that a restarted node is
    /// found where the other nodes remember it.
    cluster_port: Option<u16>,
    dir: tempfile::TempDir,
    pub(crate) options: ServerOptions,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server without persistence.
    pub fn start() -> RedisServer {
        RedisServer::start_with(ServerOptions::default())
    }

    /// Starts a server with the given options.
    pub fn start_with(options: ServerOptions) -> RedisServer {
        RedisServer::try_start_with(options)
            .unwrap_or_else(|err| panic!("could not start redis-server: {err}"))
    }

    /// Starts a server without persistence, or says why it could not (no `redis-server`
    /// binary, no free port, a server that never answered): for programs that report the
    /// failure themselves, such as `dlock bench --spawn`.
    pub fn try_start() -> Result<RedisServer, String> {
        RedisServer::try_start_with(ServerOptions::default())
    }

    /// [`RedisServer::try_start`] with the given options.
    pub fn try_start_with(options: ServerOptions) -> Result<RedisServer, String> {
        assert!(
            !options.tls || options.mode == ServerMode::Standalone,
            "TLS is supported for standalone servers only"
        );
        assert!(
            !options.aof || options.mode != ServerMode::Sentinel,
            "a sentinel keeps no data: AOF makes no sense for it"
        );
        locate_binary("REDIS_SERVER", "redis-server")?;
        let mut last_error = String::new();
        for _ in 0..10 {
            let cluster_port = match options.mode {
                ServerMode::Cluster { .. } => Some(try_free_port()?),
                _ => None,
            };
            let mut server = RedisServer {
                port: try_free_port()?,
                // Not port + 10000 (Redis' default): that overflows for high free ports.
                cluster_port,
                dir: tempfile::Builder::new()
                    .prefix("dlock-redis-")
                    .tempdir()
                    .map_err(|e| format!("cannot create a temp dir for redis-server ({e})"))?,
                options: options.clone(),
                child: None,
            };
            match server.launch() {
                Ok(()) => return Ok(server),
                // Another process took the port between our probe and the bind: try another.
                Err(err) => last_error = err,
            }
        }
        Err(last_error)
    }

    /// `redis://127.0.0.1:PORT` (`rediss://` for a TLS server).
    pub fn url(&self) -> String {
        let scheme = if self.options.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The PEM of the CA that signed a TLS server's certificate.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("ca.pem")).expect("a TLS server has a CA")
    }

    fn client(&self) -> redis::RedisResult<redis::Client> {
        if self.options.tls {
            let _ = rustls::crypto::ring::default_provider().install_default();
            redis::Client::build_with_tls(
                quiet(&self.url())?,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(self.ca_pem()),
                },
            )
        } else {
            redis::Client::open(quiet(&self.url())?)
        }
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// A new synchronous connection, for test set-up and inspection.
    pub fn connection(&self) -> redis::Connection {
        self.client()
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("connect to test redis-server at {}: {e}", self.url()))
    }

    /// Runs one command and returns its reply.
    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        build_cmd(args)
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("{args:?} on {}: {e}", self.url()))
    }

    /// Runs one command as a probe: an error instead of a panic, and bounded in time even
    /// when the server is paused or gone.
    pub(crate) fn try_cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> Result<T, String> {
        if self.child.is_none() {
            // Not ours any more: the port may belong to anyone now.
            return Err(format!(
                "{args:?}: server on port {} is not running",
                self.port
            ));
        }
        probe(self.client(), args).map_err(|e| format!("{args:?} on port {}: {e}", self.port))
    }

    /// One field of `INFO <section>` (e.g. `role` of `replication`), as a probe.
    pub(crate) fn info_field(&self, section: &str, field: &str) -> Result<String, String> {
        let info: String = self.try_cmd(&["INFO", section])?;
        info_value(&info, field)
            .map(str::to_string)
            .ok_or_else(|| format!("no {field} in INFO {section} of port {}", self.port))
    }

    /// Calls per command since start or the last `CONFIG RESETSTAT`, from
    /// `INFO commandstats` (e.g. `"evalsha" → 12`).
    pub fn command_calls(&self) -> HashMap<String, u64> {
        let info: String = self.cmd(&["INFO", "commandstats"]);
        parse_command_calls(&info)
    }

    /// Total calls of all commands except the `INFO` used to read them.
    pub fn total_calls(&self) -> u64 {
        self.command_calls()
            .iter()
            .filter(|(name, _)| name.as_str() != "info")
            .map(|(_, calls)| calls)
            .sum()
    }

    /// Sends SIGKILL and waits for the process to end (no chance to save anything).
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM and waits for a clean shutdown.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), libc::SIGTERM);
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and data directory.
    pub fn restart(&mut self) {
        self.kill9();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.launch() {
                Ok(()) => return,
                Err(err) if Instant::now() > deadline => panic!("restart redis-server: {err}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        if let Some(pid) = self.pid() {
            signal(pid, libc::SIGSTOP);
        }
    }

    /// Resumes a paused process (SIGCONT).
    pub fn resume(&self) {
        if let Some(pid) = self.pid() {
            signal(pid, libc::SIGCONT);
        }
    }

    fn launch(&mut self) -> Result<(), String> {
        let dir = self.dir.path().to_path_buf();
        let log = dir.join("redis.log");
        let mut args: Vec<String> = Vec::new();
        if self.options.mode != ServerMode::Sentinel {
            // A master waits 5 s (Redis 7's default) before a diskless full sync, in case
            // more replicas come to share it: that would be 5 s added to every test that
            // starts replicas.
            args.extend(["--repl-diskless-sync-delay".into(), "0".into()]);
        }
        match self.options.mode {
            ServerMode::Standalone => {}
            ServerMode::Cluster { node_timeout } => {
                let bus = self.cluster_port.expect("a cluster node has a bus port");
                args.extend([
                    "--cluster-enabled".into(),
                    "yes".into(),
                    // Relative to --dir: each node has its own.
                    "--cluster-config-file".into(),
                    "nodes.conf".into(),
                    "--cluster-node-timeout".into(),
                    node_timeout.as_millis().to_string(),
                    "--cluster-port".into(),
                    bus.to_string(),
                ]);
            }
            ServerMode::Sentinel => {
                // Sentinel insists on a config file it can rewrite (it records what it
                // monitors and the other sentinels it found there), given first.
                let conf = dir.join("sentinel.conf");
                if !conf.exists() {
                    std::fs::write(&conf, "# written by dlock-testkit; sentinel appends\n")
                        .map_err(|e| format!("write {}: {e}", conf.display()))?;
                }
                args.extend([conf.display().to_string(), "--sentinel".into()]);
            }
        }
        args.extend(if self.options.tls {
            let (cert, key, ca) = write_tls_files(&dir);
            vec![
                "--port".into(),
                "0".into(),
                "--tls-port".into(),
                self.port.to_string(),
                "--tls-cert-file".into(),
                cert,
                "--tls-key-file".into(),
                key,
                "--tls-ca-cert-file".into(),
                ca,
                "--tls-auth-clients".into(),
                "no".into(),
            ]
        } else {
            vec!["--port".into(), self.port.to_string()]
        });
        args.extend(
            [
                "--bind".into(),
                "127.0.0.1".into(),
                "--dir".into(),
                dir.display().to_string(),
                "--logfile".into(),
                log.display().to_string(),
                "--save".into(),
                String::new(),
                "--daemonize".into(),
                "no".into(),
                "--appendonly".into(),
                if self.options.aof { "yes" } else { "no" }.into(),
            ]
            .map(String::from),
        );
        if self.options.aof {
            args.push("--appendfsync".into());
            args.push(
                self.options
                    .appendfsync
                    .clone()
                    .unwrap_or_else(|| "always".into()),
            );
        }
        args.extend(self.options.extra_args.iter().cloned());
        let binary = self
            .options
            .binary
            .clone()
            .unwrap_or_else(redis_server_binary);
        // What the server says before its log file is open (a directive it does not know,
        // a bad value) goes to its standard streams: kept, to say why it did not start.
        let console = dir.join("console.log");
        let console_file = std::fs::File::create(&console)
            .map_err(|e| format!("create {}: {e}", console.display()))?;
        let console_err = console_file
            .try_clone()
            .map_err(|e| format!("open {} twice: {e}", console.display()))?;
        let child = Command::new(binary)
            .args(&args)
            .envs(self.options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(console_file)
            .stderr(console_err)
            .spawn()
            .map_err(|e| format!("spawn redis-server: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                let said = [&console, &log]
                    .map(|file| std::fs::read_to_string(file).unwrap_or_default())
                    .join("\n");
                let hint = if said.contains("TLS support") {
                    " (this server was built without TLS: run the TLS tests with a build \
                     that has it; scripts/test.sh excludes them by name for such a server)"
                } else if said.contains("cluster-port") {
                    " (a cluster node here needs Redis 7.0+, as dlock on Redis Cluster does; \
                     scripts/test.sh excludes the cluster tests by name for an older server)"
                } else {
                    ""
                };
                return Err(format!(
                    "redis-server exited with {status}{hint}: {}",
                    tail(&said)
                ));
            }
            if self.answers() {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill9();
                return Err(format!(
                    "redis-server on port {} did not answer within 10 s",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// True when the server is ready for its tests.
    fn answers(&self) -> bool {
        // The answer must come from our process: when another process took the port between
        // `free_port` and our bind, ours exits, but a probe in the meantime reaches theirs.
        let ours = self.pid().map(|pid| pid.to_string());
        if self.info_field("server", "process_id").ok() != ours {
            return false;
        }
        match self.options.mode {
            // A data command, not only PING: after a restart with AOF, the server must
            // have finished loading.
            ServerMode::Standalone => self
                .try_cmd::<i64>(&["EXISTS", "dlock-testkit-probe"])
                .is_ok(),
            // A data command fails with CLUSTERDOWN until the node is in a cluster that
            // covers all slots; what matters here is that the process has loaded its data.
            ServerMode::Cluster { .. } => self
                .info_field("persistence", "loading")
                .is_ok_and(|loading| loading == "0"),
            // Sentinels know no data commands (nor INFO persistence).
            ServerMode::Sentinel => self.try_cmd::<String>(&["PING"]).is_ok(),
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            // A paused server would not die from SIGTERM; SIGKILL works regardless.
            signal(pid, libc::SIGCONT);
        }
        self.kill9();
    }
}

/// Runs one command on `127.0.0.1:port` (plain TCP) as a probe, like
/// [`RedisServer::try_cmd`], for servers known only by port (e.g. the master a Sentinel
/// names).
pub(crate) fn probe_port<T: redis::FromRedisValue>(port: u16, args: &[&str]) -> Result<T, String> {
    probe(
        quiet(&format!("redis://127.0.0.1:{port}")).and_then(redis::Client::open),
        args,
    )
    .map_err(|e| format!("{args:?} on port {port}: {e}"))
}

/// The test kit's own connections skip the `CLIENT SETINFO` handshake: servers that have
/// the command (Redis 7.2+, Valkey) would count it, and tests count the commands a lock
/// sends.
fn quiet(url: &str) -> redis::RedisResult<redis::ConnectionInfo> {
    use redis::IntoConnectionInfo;
    let info = url.into_connection_info()?;
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    Ok(info.set_redis_settings(settings))
}

/// One command on a fresh connection, every step bounded by [`PROBE_TIMEOUT`].
fn probe<T: redis::FromRedisValue>(
    client: redis::RedisResult<redis::Client>,
    args: &[&str],
) -> redis::RedisResult<T> {
    let mut conn = client?.get_connection_with_timeout(PROBE_TIMEOUT)?;
    conn.set_read_timeout(Some(PROBE_TIMEOUT))?;
    conn.set_write_timeout(Some(PROBE_TIMEOUT))?;
    build_cmd(args).query(&mut conn)
}

/// A command from its words.
fn build_cmd(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd
}

/// The value of `field` in an `INFO` reply (`field:value` lines).
pub(crate) fn info_value<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)?
            .strip_prefix(':')
            .map(|value| value.trim_end())
    })
}

/// Polls `probe` until it succeeds, or panics once `timeout` has passed, saying what never
/// happened and what the last probe saw instead.
pub(crate) fn poll<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match probe() {
            Ok(value) => return value,
            Err(last) if Instant::now() >= deadline => {
                panic!("{what}: did not happen within {timeout:?}; last seen: {last}")
            }
            // Between probes: the condition is another process's doing.
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// A process that is killed when dropped, so that a panic (a failed assertion) before a
/// test ends it leaks nothing.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // Both fail harmlessly when the process has already been reaped.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) with a pid of a child we spawned and have not reaped yet.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Writes a CA and a server certificate for 127.0.0.1 into `dir` (once); returns the
/// paths of the certificate, key and CA.
fn write_tls_files(dir: &Path) -> (String, String, String) {
    let (cert, key, ca) = (
        dir.join("server.pem"),
        dir.join("server.key"),
        dir.join("ca.pem"),
    );
    if !cert.exists() {
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "dlock test CA");
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let server_key = rcgen::KeyPair::generate().expect("server key");
        let server_params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .expect("server params");
        let server_cert = server_params
            .signed_by(&server_key, &issuer)
            .expect("server certificate");
        std::fs::write(&ca, ca_cert.pem()).unwrap();
        std::fs::write(&cert, server_cert.pem()).unwrap();
        std::fs::write(&key, server_key.serialize_pem()).unwrap();
    }
    let show = |p: PathBuf| p.display().to_string();
    (show(cert), show(key), show(ca))
}

fn try_free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port ({e})"))
}

pub(crate) fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// Path of `redis-server`, or a panic that says how to install it.
pub fn redis_server_binary() -> PathBuf {
    find_binary("REDIS_SERVER", "redis-server")
}

/// Path of `redis-cli` (Debian's `redis-tools`, which `redis-server` depends on), used to
/// create clusters.
pub(crate) fn redis_cli_binary() -> PathBuf {
    if std::env::var_os("REDIS_CLI").is_none() {
        // Prefer the one beside the redis-server in use: they come in pairs.
        if let Some(dir) = redis_server_binary().parent() {
            let beside = dir.join("redis-cli");
            if beside.is_file() {
                return beside;
            }
        }
    }
    find_binary("REDIS_CLI", "redis-cli")
}

/// `$env_var`, else `name` on PATH or in /usr/bin or /usr/sbin, else a panic that says how
/// to install it.
fn find_binary(env_var: &str, name: &str) -> PathBuf {
    locate_binary(env_var, name).unwrap_or_else(|err| panic!("{err}"))
}

/// [`find_binary`], or what to do when it is missing.
fn locate_binary(env_var: &str, name: &str) -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(env_var) {
        return Ok(PathBuf::from(path));
    }
    for dir in std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
    {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "{name} was not found on PATH. dlock's tests run against a real Redis: install the \
         Debian package `redis-server` (sudo apt-get install redis-server), or run \
         ./scripts/test.sh which installs it, or set {env_var} to the binary's path."
    ))
}

fn parse_command_calls(info: &str) -> HashMap<String, u64> {
    // Lines look like: cmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,...
    info.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cmdstat_")?;
            let (name, stats) = rest.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commandstats() {
        let info = "# Commandstats\r\ncmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,rejected_calls=0,failed_calls=0\r\ncmdstat_info:calls=1,usec=1\r\n";
        let calls = parse_command_calls(info);
        assert_eq!(calls["evalsha"], 12);
        assert_eq!(calls["info"], 1);
    }

    /// A refused directive never reaches the log file: the server's own words on its
    /// standard streams are the reason given.
    #[test]
    fn a_server_that_refuses_its_arguments_says_why() {
        let refused = RedisServer::try_start_with(ServerOptions {
            extra_args: vec!["--no-such-directive".into(), "1".into()],
            ..ServerOptions::default()
        });
        let reason = refused
            .err()
            .expect("a server with an unknown directive started");
        assert!(reason.contains("no-such-directive"), "{reason}");
    }

    #[test]
    fn starts_restarts_and_kills_its_own_server() {
        let mut server = RedisServer::start_with(ServerOptions::durable());
        let _: () = server.cmd(&["SET", "k", "v"]);
        let pid = server.pid().unwrap();
        server.restart();
        assert_ne!(server.pid().unwrap(), pid);
        let value: String = server.cmd(&["GET", "k"]);
        assert_eq!(value, "v", "AOF keeps data across kill -9");
        let pid = server.pid().unwrap();
        drop(server);
        // SAFETY: probing (signal 0) a pid we just reaped; ESRCH means it is gone.
        let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
        assert!(!alive, "redis-server {pid} still alive after drop");
    }
}

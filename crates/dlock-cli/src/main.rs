//! `dlock`: flock(1) for a fleet. A thin layer over the `dlock` library.

mod bench;
mod duration;
mod exit;
mod run;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use dlock::{Client, LockOptions, Wait};

#[derive(Parser, Debug)]
#[command(
    name = "dlock",
    version,
    about = "Distributed locks on Redis for shell scripts and cron jobs",
    after_help = exit::HELP
)]
struct Cli {
    /// Redis URL: redis://[user:password@]host[:port][/db]
    #[arg(
        long,
        global = true,
        env = "DLOCK_REDIS",
        default_value = "redis://127.0.0.1:6379"
    )]
    redis: String,

    /// Prefix put in front of every lock name to form its Redis key
    #[arg(long, global = true, env = "DLOCK_PREFIX", default_value = "")]
    prefix: String,

    /// For rediss:// URLs: PEM file of the CA to trust (default: the system's roots)
    #[arg(long, global = true, env = "DLOCK_TLS_CA", value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,

    /// For mutual TLS: PEM file of the client certificate (with --tls-key)
    #[arg(
        long,
        global = true,
        env = "DLOCK_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    tls_cert: Option<std::path::PathBuf>,

    /// For mutual TLS: PEM file of the client key (with --tls-cert)
    #[arg(
        long,
        global = true,
        env = "DLOCK_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<std::path::PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a command while holding the lock; exit with the command's exit code
    #[command(after_help = exit::HELP)]
    Run(run::RunArgs),
    /// Take the lock and leave it held for its lease; print "TOKEN FENCE"
    #[command(after_help = exit::HELP)]
    Acquire {
        /// Lock name
        name: String,
        #[command(flatten)]
        lease: LeaseArgs,
        /// Print one JSON object: name, key, token, fence, ttl_ms
        #[arg(long)]
        json: bool,
    },
    /// Release a lock held with TOKEN
    #[command(after_help = exit::HELP)]
    Release {
        /// Lock name
        name: String,
        /// The token printed by `dlock acquire`
        token: String,
    },
    /// Measure throughput, hand-off latency, herd cost and renewal cost against the
    /// configured Redis (use a private server: it writes keys and resets nothing)
    Bench(bench::BenchArgs),
    /// Reset the lease of a lock held with TOKEN
    #[command(after_help = exit::HELP)]
    Extend {
        /// Lock name
        name: String,
        /// The token printed by `dlock acquire`
        token: String,
        /// New lease, from now (e.g. 30s)
        #[arg(long, value_parser = duration::parse)]
        ttl: Duration,
    },
}

/// Lease and wait options shared by `run` and `acquire`.
#[derive(Args, Debug, Clone)]
pub struct LeaseArgs {
    /// Lease of the lock (e.g. 250ms, 30s, 5m)
    #[arg(long, value_parser = duration::parse, default_value = "30s")]
    pub ttl: Duration,
    /// Wait at most this long for the lock (default: wait forever)
    #[arg(long, value_parser = duration::parse, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,
    /// Fail at once (exit 75) if the lock is held
    #[arg(long)]
    pub no_wait: bool,
}

impl LeaseArgs {
    pub fn options(&self) -> LockOptions {
        let wait = match (self.no_wait, self.wait) {
            (true, _) => Wait::NoWait,
            (false, Some(limit)) => Wait::Timeout(limit),
            (false, None) => Wait::Forever,
        };
        LockOptions::default().ttl(self.ttl).wait(wait)
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
            let _ = err.print();
            return ExitCode::from(code as u8);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("dlock: cannot start the async runtime: {err}");
            return ExitCode::from(exit::LOST as u8);
        }
    };
    let code = runtime.block_on(async move {
        match execute(cli).await {
            Ok(code) => code,
            Err(err) => report(&err),
        }
    });
    // Background releases get a moment to finish; nothing may hang the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// Prints an error with what to do about it, and returns its exit code.
pub fn report(err: &dlock::Error) -> i32 {
    let (code, hint) = exit::classify(err);
    eprintln!("dlock: {err}\n  hint: {hint}");
    code
}

async fn connect(cli: &Cli) -> dlock::Result<Client> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            dlock::Error::InvalidArgument(format!("cannot read {}: {e}", path.display()))
        })
    };
    let mut builder = Client::builder(&cli.redis).prefix(cli.prefix.clone());
    if let Some(ca) = &cli.tls_ca {
        builder = builder.tls_root_certificate(read(ca)?);
    }
    if let (Some(cert), Some(key)) = (&cli.tls_cert, &cli.tls_key) {
        builder = builder.tls_client_certificate(read(cert)?, read(key)?);
    }
    builder.connect().await
}

async fn execute(cli: Cli) -> dlock::Result<i32> {
    let client = connect(&cli).await?;
    let outcome = dispatch(&client, cli).await;
    // Whatever is still held (an error path's guard) is released before exit; the
    // runtime's shutdown would not wait for a background release.
    client.shutdown().await;
    outcome
}

async fn dispatch(client: &Client, cli: Cli) -> dlock::Result<i32> {
    let client = client.clone();
    match cli.command {
        Command::Run(args) => run::run(&client, args).await,
        Command::Acquire { name, lease, json } => {
            let mutex = client.mutex_with(&name, lease.options())?;
            let guard = mutex.lock().await?;
            let fence = guard.fence();
            let token = guard.into_token();
            if json {
                let object = serde_json::json!({
                    "name": name,
                    "key": mutex.key(),
                    "token": token,
                    "fence": fence,
                    "ttl_ms": lease.ttl.as_millis() as u64,
                });
                println!("{object}");
            } else {
                println!("{token} {fence}");
            }
            Ok(exit::OK)
        }
        Command::Bench(args) => bench::bench(&client, &cli.redis, args).await,
        Command::Release { name, token } => {
            client.mutex(&name)?.release_token(&token).await?;
            Ok(exit::OK)
        }
        Command::Extend { name, token, ttl } => {
            client.mutex(&name)?.extend_token(&token, ttl).await?;
            Ok(exit::OK)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the arguments, parsing answers with a value or a usage error.
        #[test]
        fn argument_parsing_never_panics(args in proptest::collection::vec(
            prop_oneof![
                Just("run".to_string()), Just("acquire".to_string()), Just("release".to_string()),
                Just("extend".to_string()), Just("bench".to_string()), Just("--ttl".to_string()),
                Just("--wait".to_string()), Just("--no-wait".to_string()), Just("--permits".to_string()),
                Just("--fair".to_string()), Just("--".to_string()), Just("--kill-after".to_string()),
                "[0-9.]{1,22}(ms|s|m|h)?", "\\PC{0,12}",
            ],
            0..8,
        )) {
            let mut argv = vec!["dlock".to_string()];
            argv.extend(args);
            let _ = super::Cli::try_parse_from(argv);
        }
    }
}

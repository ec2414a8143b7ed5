//! `dlock extend NAME TOKEN --ttl DUR`: reset the lease of a hold by its token.

use std::time::Duration;

use clap::Args;

use crate::hold::{self, KindArgs, Locks};
use crate::lease::Replication;
use crate::{duration, exit};

/// The arguments of `dlock extend`.
#[derive(Args, Debug)]
pub struct ExtendArgs {
    /// Lock name
    pub name: String,
    /// The token printed by `dlock acquire`
    pub token: String,
    #[command(flatten)]
    pub kind: KindArgs,
    /// New lease, from now, within the library's limits (the help says them)
    #[arg(long, value_parser = duration::ttl, help = format!(
        "New lease, from now, {} (e.g. 30s)",
        duration::ttl_range()
    ))]
    pub ttl: Duration,
    /// The --lock-delay the hold was acquired with: Redis keeps it --ttl plus DUR
    /// (without it, an extend drops the delay)
    #[arg(long, value_parser = duration::parse, value_name = "DUR")]
    pub lock_delay: Option<Duration>,
}

impl ExtendArgs {
    /// Everything that can be checked without Redis.
    pub fn check(&self, prefix: &str, replication: Option<Replication>) -> dlock::Result<()> {
        dlock::check_name(prefix, &self.name)?;
        hold::check_token(Some(&self.token))?;
        self.kind.check()?;
        // --ttl was checked against its range while parsing.
        hold::extend_options(self.ttl, self.lock_delay, replication).map(drop)
    }

    /// Resets the lease; returns the exit code.
    pub async fn run(&self, locks: &Locks, replication: Option<Replication>) -> dlock::Result<i32> {
        let (name, token) = (&self.name, &self.token);
        let (ttl, delay) = (self.ttl, self.lock_delay);
        hold::extend(locks, &self.kind, name, token, ttl, delay, replication).await?;
        Ok(exit::OK)
    }
}

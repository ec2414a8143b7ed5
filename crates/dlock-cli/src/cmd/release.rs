//! `dlock release NAME TOKEN`: give a hold back by its token, or `--force` it whoever
//! holds it (drawing a new fencing token).

use clap::Args;

use crate::exit;
use crate::hold::{self, KindArgs, Locks};

/// The arguments of `dlock release`.
#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// Lock name
    pub name: String,
    /// The token printed by `dlock acquire` (not with --force)
    #[arg(required_unless_present = "force", conflicts_with = "force")]
    pub token: Option<String>,
    #[command(flatten)]
    pub kind: KindArgs,
    /// Operator's override: release NAME whoever holds it, and draw a new fencing
    /// token so fenced storage refuses the evicted holder's late writes. Only by
    /// exact name; prints the new fencing token
    #[arg(long)]
    pub force: bool,
}

impl ReleaseArgs {
    /// Everything that can be checked without Redis.
    pub fn check(&self, prefix: &str) -> dlock::Result<()> {
        let kind = &self.kind;
        dlock::check_name(prefix, &self.name)?;
        hold::check_token(self.token.as_deref())?;
        if self.force && kind.names_a_kind() {
            return Err(dlock::Error::InvalidArgument(
                "--force releases whatever holds the name; give no kind flag with it".into(),
            ));
        }
        kind.check()
    }

    /// Releases the hold (or forces the name free); returns the exit code.
    pub async fn run(&self, locks: &Locks) -> dlock::Result<i32> {
        let name = &self.name;
        if !self.force {
            let token = self.token.as_deref().unwrap_or_default();
            hold::release(locks, &self.kind, name, token).await?;
            return Ok(exit::OK);
        }
        // Refused with several masters before connecting (see cli::redlock_usage).
        let Locks::Client(client) = locks else {
            return Err(dlock::Error::InvalidArgument(
                "release --force cannot be used with several --redis URLs (Redlock) yet".into(),
            ));
        };
        match client.force_release(name).await? {
            Some(fence) => {
                eprintln!("dlock: released {name:?} by force; new fencing token {fence}");
                return Ok(exit::emit(&format!("{fence}\n")));
            }
            None => eprintln!("dlock: {name:?} was not held; nothing to release"),
        }
        Ok(exit::OK)
    }
}

//! `dlock inspect`: who holds which lock, for how long, and what waits.

use std::time::{Duration, SystemTime};

use clap::Args;
use dlock::{Client, LockInfo, Redlock, RedlockInfo};

use crate::holder::{token_prefix, utc, who, DlockHolder};
mod prometheus;

use crate::{duration, exit};

#[derive(Args, Debug, Clone)]
pub struct InspectArgs {
    /// Lock names (or --match PATTERN, e.g. --match '*' for every lock)
    #[arg(conflicts_with = "pattern")]
    names: Vec<String>,
    /// Every lock whose name matches this glob (Redis MATCH syntax: *, ?, [..]); found
    /// with SCAN, never KEYS
    #[arg(long = "match", value_name = "PATTERN")]
    pattern: Option<String>,
    /// One JSON object per lock (with --watch: one JSON array per refresh): name, key, kind
    /// and hold (both what the key holds: free, exclusive for a mutex, fair mutex or write
    /// lock, reentrant, read, semaphore), holders, remaining_ms, last_fence, queued
    #[arg(long)]
    json: bool,
    /// Print the Prometheus text format instead of a table: per lock dlock_lock_held,
    /// _holders, _lease_remaining_seconds, _queue_length, _last_fence and _info (its kind);
    /// per hold dlock_lock_holder_lease_remaining_seconds naming the holder; over several
    /// masters a master label, dlock_lock_quorum_held and dlock_master_up. For
    /// node_exporter's textfile collector: write to a temporary file, then rename it. Not
    /// with --json or --watch
    #[arg(long, conflicts_with_all = ["json", "watch"])]
    prometheus: bool,
    /// Refresh every INTERVAL until interrupted, like top(1)
    #[arg(long, value_parser = duration::parse, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "1s")]
    watch: Option<Duration>,
}

impl InspectArgs {
    pub fn check(&self, prefix: &str) -> dlock::Result<()> {
        if self.names.is_empty() && self.pattern.is_none() {
            return Err(dlock::Error::InvalidArgument(
                "name the locks to inspect, or give --match PATTERN (--match '*' for every lock)"
                    .into(),
            ));
        }
        for name in &self.names {
            dlock::check_name(prefix, name)?;
        }
        if let Some(interval) = self.watch {
            if interval < Duration::from_millis(100) || interval > Duration::from_secs(3600) {
                return Err(dlock::Error::InvalidArgument(format!(
                    "--watch {} is out of range; use 100ms to 1h",
                    dlock::humane(interval)
                )));
            }
        }
        Ok(())
    }
}

/// What `inspect` looks at: one deployment, or each of several independent masters
/// (Redlock), whose copies of a lock are shown side by side.
pub enum Scope<'a> {
    Client(&'a Client),
    Redlock(&'a Redlock),
}

pub async fn inspect(scope: Scope<'_>, args: &InspectArgs) -> dlock::Result<i32> {
    let Some(interval) = args.watch else {
        let view = view(&scope, args, false).await?;
        return Ok(exit::emit(&view));
    };
    let mut interrupt =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map_err(|e| dlock::Error::InvalidArgument(format!("cannot watch for Ctrl-C: {e}")))?;
    loop {
        let view = view(&scope, args, true).await?;
        // A reader that went away (`| head`) ends the watch, as it ends any pipeline.
        if let Err(code) = exit::write_out(&view) {
            return Ok(code);
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = interrupt.recv() => return Ok(exit::OK),
        }
    }
}

/// One snapshot, rendered.
async fn view(scope: &Scope<'_>, args: &InspectArgs, watching: bool) -> dlock::Result<String> {
    Ok(match scope {
        Scope::Client(client) if args.prometheus => {
            prometheus::render(&snapshot(client, args).await?)
        }
        Scope::Client(client) => render(&snapshot(client, args).await?, args, watching),
        Scope::Redlock(redlock) => {
            let locks = match &args.pattern {
                Some(pattern) => redlock.find_locks(pattern).await?,
                None => redlock.inspect_all(&unique(&args.names)).await?,
            };
            if args.prometheus {
                prometheus::render_masters(&locks)
            } else {
                render_masters(&locks, redlock.nodes(), args, watching)
            }
        }
    })
}

async fn snapshot(client: &Client, args: &InspectArgs) -> dlock::Result<Vec<LockInfo>> {
    if let Some(pattern) = &args.pattern {
        return client.find_locks(pattern).await;
    }
    let mut locks = Vec::with_capacity(args.names.len());
    for name in unique(&args.names) {
        locks.push(client.inspect(name).await?);
    }
    Ok(locks)
}

/// The names, each once, in the order given (`inspect a a` shows `a` once).
fn unique(names: &[String]) -> Vec<&str> {
    let mut seen = std::collections::HashSet::new();
    names
        .iter()
        .map(String::as_str)
        .filter(|name| seen.insert(*name))
        .collect()
}

/// Several masters' views: per lock, the holder a majority agrees on, then each master's
/// own row; or one JSON object per lock with a `masters` array.
fn render_masters(
    locks: &[RedlockInfo],
    nodes: usize,
    args: &InspectArgs,
    watching: bool,
) -> String {
    use std::fmt::Write;
    let quorum = nodes / 2 + 1;
    let mut out = String::new();
    if args.json {
        let objects: Vec<serde_json::Value> = locks
            .iter()
            .map(|lock| {
                let masters: Vec<serde_json::Value> = lock
                    .masters
                    .iter()
                    .map(
                        |dlock::MasterView {
                             master: label,
                             info: view,
                         }| match view {
                            Ok(info) => {
                                let mut object = to_json(info);
                                if let Some(map) = object.as_object_mut() {
                                    map.remove("name");
                                    map.insert("master".into(), label.clone().into());
                                }
                                object
                            }
                            Err(err) => serde_json::json!({ "master": label, "error": err }),
                        },
                    )
                    .collect();
                let holder = lock.majority_holder().map(|(holder, count)| {
                    let mut object = holder_json(holder);
                    if let Some(map) = object.as_object_mut() {
                        map.remove("remaining_ms");
                        map.insert("masters".into(), count.into());
                    }
                    object
                });
                serde_json::json!({
                    "name": lock.name,
                    "key": lock.answered().next().map(|v| v.key.clone()),
                    "redlock": { "masters": nodes, "quorum": quorum },
                    "holder": holder,
                    "last_fence": lock.last_fence(),
                    "masters": masters,
                })
            })
            .collect();
        return json_lines(objects, watching);
    }
    if watching {
        watch_header(&mut out);
    }
    if locks.is_empty() {
        let _ = writeln!(out, "(no locks)");
    }
    for lock in locks {
        let answered = lock.answered().count();
        let verdict = match lock.majority_holder() {
            Some((holder, count)) => format!(
                "held by {}… ({}) on {count}",
                token_prefix(&holder.token),
                who(holder)
            ),
            None if lock.answered().any(|lock| !lock.holders.is_empty()) => {
                "no holder on a majority".into()
            }
            None => "free on every master that answered".into(),
        };
        let _ = writeln!(
            out,
            "{} — Redlock over {nodes} masters ({quorum} needed, {answered} answered): {verdict}; last fence {}",
            lock.name,
            lock.last_fence()
        );
        let _ = writeln!(
            out,
            "    {:<28} {:<10} {:>7} {:>9} {:>16}",
            "MASTER", "KIND", "HOLDERS", "LEASE", "FENCE"
        );
        for dlock::MasterView {
            master: label,
            info: view,
        } in &lock.masters
        {
            match view {
                Ok(info) => {
                    let _ = writeln!(
                        out,
                        "    {:<28} {:<10} {:>7} {:>9} {:>16}",
                        label,
                        info.kind.to_string(),
                        info.holders.len(),
                        info.remaining
                            .map(dlock::humane)
                            .unwrap_or_else(|| "-".into()),
                        info.last_fence
                    );
                    for holder in &info.holders {
                        let _ = writeln!(out, "        {}", holder_line(holder));
                    }
                }
                Err(err) => {
                    let _ = writeln!(out, "    {label:<28} unreachable: {err}");
                }
            }
        }
    }
    out
}

/// A holder's line under its lock: token prefix, who, owner, weight (when more than
/// one permit), lease left.
fn holder_line(holder: &dlock::Holder) -> String {
    let owner = holder
        .owner
        .as_deref()
        .map(|o| format!(" owner {}", o.chars().take(12).collect::<String>()))
        .unwrap_or_default();
    let left = holder
        .remaining
        .map(|d| format!("{} left", dlock::humane(d)))
        .unwrap_or_else(|| "no expiry".into());
    // A permit taken with --take K (lock_many) holds K of the semaphore's permits.
    let weight = match holder.weight {
        1 => String::new(),
        k => format!(" takes {k} permits"),
    };
    format!(
        "{}…  {}{owner}{weight}  ({left})",
        token_prefix(&holder.token),
        who(holder)
    )
}

/// The view of `locks`: a table, or JSON.
/// JSON output: one object per line, or under `--watch` one array per refresh.
fn json_lines(objects: Vec<serde_json::Value>, watching: bool) -> String {
    if watching {
        format!("{}\n", serde_json::Value::Array(objects))
    } else {
        objects.iter().map(|object| format!("{object}\n")).collect()
    }
}

/// A live view's top: clear the screen and go home (on a terminal only: a file or a pipe
/// gets plain frames, one after another, as `top -b` writes them), say when.
fn watch_header(out: &mut String) {
    use std::fmt::Write;
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal() {
        let _ = write!(out, "\x1b[2J\x1b[H");
    }
    let _ = writeln!(
        out,
        "dlock inspect — {} (Ctrl-C to quit)\n",
        utc(SystemTime::now())
    );
}

fn render(locks: &[LockInfo], args: &InspectArgs, watching: bool) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if args.json {
        let objects: Vec<serde_json::Value> = locks.iter().map(to_json).collect();
        return json_lines(objects, watching);
    }
    if watching {
        watch_header(&mut out);
    }
    // FENCE is 16 wide: a fence is at least the server clock in microseconds (16 digits).
    let _ = writeln!(
        out,
        "{:<32} {:<10} {:>7} {:>9} {:>16} {:>6}",
        "NAME", "KIND", "HOLDERS", "LEASE", "FENCE", "QUEUED"
    );
    if locks.is_empty() {
        let _ = writeln!(out, "(no locks)");
    }
    for lock in locks {
        let _ = writeln!(
            out,
            "{:<32} {:<10} {:>7} {:>9} {:>16} {:>6}",
            lock.name,
            lock.kind.to_string(),
            lock.holders.len(),
            lock.remaining
                .map(dlock::humane)
                .unwrap_or_else(|| "-".into()),
            lock.last_fence,
            lock.queued
        );
        for holder in &lock.holders {
            let _ = writeln!(out, "    {}", holder_line(holder));
        }
    }
    out
}

fn to_json(lock: &LockInfo) -> serde_json::Value {
    let holders: Vec<serde_json::Value> = lock.holders.iter().map(holder_json).collect();
    serde_json::json!({
        "name": lock.name,
        "key": lock.key,
        // What the key holds; `hold` says the same under the name `acquire --json` uses
        // for it (whose `kind` is the kind of lock taken: mutex, fair, write, ...).
        "kind": lock.kind.to_string(),
        "hold": lock.kind.to_string(),
        "holders": holders,
        "remaining_ms": lock.remaining.map(|d| d.as_millis() as u64),
        "last_fence": lock.last_fence,
        "queued": lock.queued,
    })
}

fn holder_json(h: &dlock::Holder) -> serde_json::Value {
    let dlock_holder = h.label.as_deref().and_then(DlockHolder::parse);
    serde_json::json!({
        "token_prefix": token_prefix(&h.token),
        "label": h.label,
        "host": dlock_holder.as_ref().map(|d| d.host.clone()),
        "pid": dlock_holder.as_ref().map(|d| d.pid),
        "started": dlock_holder.as_ref().map(|d| d.started.clone()),
        "owner": h.owner,
        "remaining_ms": h.remaining.map(|d| d.as_millis() as u64),
        "weight": h.weight,
    })
}

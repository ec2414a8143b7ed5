//! `dlock inspect`: who holds which lock, for how long, and what waits.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use dlock::{Client, LockInfo, LockKind};

use crate::{duration, exit};

#[derive(Args, Debug, Clone)]
pub struct InspectArgs {
    /// Lock names
    #[arg(required_unless_present = "pattern", conflicts_with = "pattern")]
    names: Vec<String>,
    /// Every lock whose name matches this glob (Redis MATCH syntax: *, ?, [..]); found
    /// with SCAN, never KEYS
    #[arg(long = "match", value_name = "PATTERN")]
    pattern: Option<String>,
    /// One JSON object per lock (with --watch: one JSON array per refresh)
    #[arg(long)]
    json: bool,
    /// Refresh every INTERVAL until interrupted, like top(1)
    #[arg(long, value_parser = duration::parse, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "1s")]
    watch: Option<Duration>,
}

impl InspectArgs {
    pub fn check(&self, prefix: &str) -> dlock::Result<()> {
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
    Masters(&'a [Master]),
}

/// One master of several `--redis` URLs, connected or not.
pub struct Master {
    /// Its URL, without the password.
    pub label: String,
    /// Its client, or why it could not be connected to (Redis unreachable).
    pub client: Result<Client, String>,
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
        Scope::Client(client) => render(&snapshot(client, args).await?, args, watching),
        Scope::Masters(masters) => {
            let locks = snapshot_masters(masters, args).await?;
            render_masters(&locks, masters.len(), args, watching)
        }
    })
}

async fn snapshot(client: &Client, args: &InspectArgs) -> dlock::Result<Vec<LockInfo>> {
    if let Some(pattern) = &args.pattern {
        return client.find_locks(pattern).await;
    }
    let mut locks = Vec::with_capacity(args.names.len());
    for name in &args.names {
        locks.push(client.inspect(name).await?);
    }
    Ok(locks)
}

/// One lock as each master sees it.
struct Across {
    name: String,
    /// (master, its view of the lock or why there is none), in `--redis` order.
    views: Vec<(String, Result<LockInfo, String>)>,
}

/// Runs `request` on every connected master at once; in `--redis` order, each master's
/// answer, or why it has none.
async fn on_every_master<T, F, Fut>(masters: &[Master], request: F) -> Vec<Result<T, Failure>>
where
    T: Send + 'static,
    F: Fn(Client) -> Fut,
    Fut: std::future::Future<Output = dlock::Result<T>> + Send + 'static,
{
    let tasks: Vec<_> = masters
        .iter()
        .map(|master| {
            master
                .client
                .as_ref()
                .map(|client| tokio::spawn(request(client.clone())))
        })
        .collect();
    let mut answers = Vec::with_capacity(tasks.len());
    for task in tasks {
        answers.push(match task {
            Ok(task) => match task.await.unwrap_or(Err(dlock::Error::Closed)) {
                Ok(answer) => Ok(answer),
                Err(err) => Err(Failure {
                    message: err.to_string(),
                    error: Some(err),
                }),
            },
            Err(connect) => Err(Failure {
                message: connect.clone(),
                error: None,
            }),
        });
    }
    answers
}

/// Why a master has no answer, and the request's own error (`None` when the master
/// could not be connected to).
struct Failure {
    message: String,
    error: Option<dlock::Error>,
}

/// The error for a snapshot that no master answered: a refusal (an ACL, a wrong type)
/// as it is, otherwise "no quorum" naming every master and its failure (exit 69).
fn nobody_answered(masters: &[Master], failures: Vec<Failure>) -> dlock::Error {
    let mut whys = Vec::with_capacity(failures.len());
    for (master, failure) in masters.iter().zip(failures) {
        match failure.error {
            Some(err) if !err.is_transient() => return err,
            _ => whys.push(format!("{}: {}", master.label, failure.message)),
        }
    }
    dlock::Error::NoQuorum {
        name: None,
        needed: masters.len() / 2 + 1,
        reached: 0,
        nodes: masters.len(),
        failures: whys,
    }
}

/// Every lock asked for (by name, or found with `--match` on any master), as each master
/// sees it. Fails only when no master answers.
async fn snapshot_masters(masters: &[Master], args: &InspectArgs) -> dlock::Result<Vec<Across>> {
    let names: Vec<String> = match &args.pattern {
        None => args.names.clone(),
        Some(pattern) => {
            let found = on_every_master(masters, |client| {
                let pattern = pattern.clone();
                async move { client.find_locks(&pattern).await }
            })
            .await;
            if found.iter().all(Result::is_err) {
                return Err(nobody_answered(
                    masters,
                    found.into_iter().filter_map(Result::err).collect(),
                ));
            }
            let names: std::collections::BTreeSet<String> = found
                .into_iter()
                .flatten()
                .flatten()
                .map(|lock| lock.name)
                .collect();
            names.into_iter().collect()
        }
    };
    let mut locks = Vec::with_capacity(names.len());
    for name in names {
        let answers = on_every_master(masters, |client| {
            let name = name.clone();
            async move { client.inspect(&name).await }
        })
        .await;
        if answers.iter().all(Result::is_err) {
            return Err(nobody_answered(
                masters,
                answers.into_iter().filter_map(Result::err).collect(),
            ));
        }
        let views = masters
            .iter()
            .zip(answers)
            .map(|(master, answer)| {
                (
                    master.label.clone(),
                    answer.map_err(|failure| failure.message),
                )
            })
            .collect();
        locks.push(Across { name, views });
    }
    Ok(locks)
}

impl Across {
    /// The holder a majority of all masters agree on: its token and on how many it is.
    fn majority_holder(&self, quorum: usize) -> Option<(&dlock::Holder, usize)> {
        let holders: Vec<&dlock::Holder> = self
            .views
            .iter()
            .filter_map(|(_, view)| view.as_ref().ok())
            .filter(|lock| lock.kind == LockKind::Exclusive)
            .flat_map(|lock| lock.holders.first())
            .collect();
        holders.iter().find_map(|holder| {
            let count = holders.iter().filter(|h| h.token == holder.token).count();
            (count >= quorum).then_some((*holder, count))
        })
    }

    /// The largest fencing counter among the masters that answered.
    fn last_fence(&self) -> u64 {
        self.views
            .iter()
            .filter_map(|(_, view)| view.as_ref().ok())
            .map(|lock| lock.last_fence)
            .max()
            .unwrap_or(0)
    }
}

/// Several masters' views: per lock, the holder a majority agrees on, then each master's
/// own row; or one JSON object per lock with a `masters` array.
fn render_masters(locks: &[Across], nodes: usize, args: &InspectArgs, watching: bool) -> String {
    use std::fmt::Write;
    let quorum = nodes / 2 + 1;
    let mut out = String::new();
    if args.json {
        let objects: Vec<serde_json::Value> = locks
            .iter()
            .map(|lock| {
                let masters: Vec<serde_json::Value> = lock
                    .views
                    .iter()
                    .map(|(label, view)| match view {
                        Ok(info) => {
                            let mut object = to_json(info);
                            if let Some(map) = object.as_object_mut() {
                                map.remove("name");
                                map.insert("master".into(), label.clone().into());
                            }
                            object
                        }
                        Err(err) => serde_json::json!({ "master": label, "error": err }),
                    })
                    .collect();
                let holder = lock.majority_holder(quorum).map(|(holder, count)| {
                    let mut object = holder_json(holder);
                    if let Some(map) = object.as_object_mut() {
                        map.remove("remaining_ms");
                        map.insert("masters".into(), count.into());
                    }
                    object
                });
                serde_json::json!({
                    "name": lock.name,
                    "key": lock.views.iter().find_map(|(_, view)| view.as_ref().ok().map(|v| v.key.clone())),
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
        let answered = lock.views.iter().filter(|(_, view)| view.is_ok()).count();
        let verdict = match lock.majority_holder(quorum) {
            Some((holder, count)) => format!(
                "held by {}… ({}) on {count}",
                token_prefix(&holder.token),
                who(holder)
            ),
            None if lock
                .views
                .iter()
                .any(|(_, view)| view.as_ref().is_ok_and(|lock| !lock.holders.is_empty())) =>
            {
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
            "    {:<28} {:<10} {:>7} {:>9} {:>8}",
            "MASTER", "KIND", "HOLDERS", "LEASE", "FENCE"
        );
        for (label, view) in &lock.views {
            match view {
                Ok(info) => {
                    let _ = writeln!(
                        out,
                        "    {:<28} {:<10} {:>7} {:>9} {:>8}",
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

/// Who a holder is: a `dlock` process (host, pid, start) or another client's label.
fn who(holder: &dlock::Holder) -> String {
    match holder.label.as_deref().and_then(DlockHolder::parse) {
        Some(h) => format!("dlock pid {} on {}, started {}", h.pid, h.host, h.started),
        None => holder
            .label
            .clone()
            .unwrap_or_else(|| "another client".into()),
    }
}

/// A holder's line under its lock: token prefix, who, owner, lease left.
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
    format!(
        "{}…  {}{owner}  ({left})",
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

/// A live view's top: clear the screen, go home, say when.
fn watch_header(out: &mut String) {
    use std::fmt::Write;
    let _ = write!(out, "\x1b[2J\x1b[H");
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
    let _ = writeln!(
        out,
        "{:<32} {:<10} {:>7} {:>9} {:>8} {:>6}",
        "NAME", "KIND", "HOLDERS", "LEASE", "FENCE", "QUEUED"
    );
    if locks.is_empty() {
        let _ = writeln!(out, "(no locks)");
    }
    for lock in locks {
        let _ = writeln!(
            out,
            "{:<32} {:<10} {:>7} {:>9} {:>8} {:>6}",
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
        "kind": lock.kind.to_string(),
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
    })
}

/// The first characters of a token's random part (after any holder label).
fn token_prefix(token: &str) -> String {
    token
        .rsplit('/')
        .next()
        .unwrap_or(token)
        .chars()
        .take(8)
        .collect()
}

/// A holder label written by the `dlock` CLI: `dlock@host:pid:start`.
struct DlockHolder {
    host: String,
    pid: u32,
    started: String,
}

impl DlockHolder {
    fn parse(label: &str) -> Option<DlockHolder> {
        let rest = label.strip_prefix("dlock@")?;
        let mut parts = rest.rsplitn(3, ':');
        let started: u64 = parts.next()?.parse().ok()?;
        let pid = parts.next()?.parse().ok()?;
        let host = parts.next()?.to_string();
        Some(DlockHolder {
            host,
            pid,
            started: utc(UNIX_EPOCH + Duration::from_secs(started)),
        })
    }
}

/// `YYYY-MM-DD HH:MM:SSZ` (UTC), without a date crate: days to civil date (H. Hinnant).
fn utc(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01 00:00:00Z");
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(1_795_420_800)),
            "2026-11-23 08:00:00Z"
        );
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29 00:00:00Z"
        );
    }

    #[test]
    fn dlock_labels_are_parsed() {
        let holder = DlockHolder::parse("dlock@web-1.example:4242:0").unwrap();
        assert_eq!((holder.host.as_str(), holder.pid), ("web-1.example", 4242));
        assert!(DlockHolder::parse("someone-else").is_none());
    }
}

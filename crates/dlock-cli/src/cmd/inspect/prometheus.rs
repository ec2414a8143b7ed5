//! `dlock inspect --prometheus`: the locks as the Prometheus text exposition format, for
//! node_exporter's textfile collector or a scrape by a cron job.

use std::fmt::Write;

use dlock::{LockInfo, RedlockInfo};

use crate::holder::{token_prefix, who};

/// The metric families, in the order they are printed: name, help, and the value of one
/// lock (`None`: no sample, e.g. no lease on a free lock).
type Family = (&'static str, &'static str, fn(&LockInfo) -> Option<f64>);

const FAMILIES: [Family; 5] = [
    (
        "dlock_lock_held",
        "Whether the lock is held (1) or free (0).",
        |lock| Some(if lock.holders.is_empty() { 0.0 } else { 1.0 }),
    ),
    (
        "dlock_lock_holders",
        "Holds of the lock: one per hold (readers, permits, a reentrant owner's nested holds).",
        |lock| Some(lock.holders.len() as f64),
    ),
    (
        "dlock_lock_lease_remaining_seconds",
        "The lock key's remaining lease; absent when free or without expiry.",
        |lock| lock.remaining.map(|d| d.as_secs_f64()),
    ),
    (
        "dlock_lock_queue_length",
        "Waiters in the lock's queue (fair mutex, write lock, semaphore).",
        |lock| Some(lock.queued as f64),
    ),
    (
        "dlock_lock_last_fence",
        "The last fencing token drawn for the lock (0 if never).",
        |lock| Some(lock.last_fence as f64),
    ),
];

const INFO: (&str, &str) = (
    "dlock_lock_info",
    "The lock's kind now (free, exclusive, reentrant, read, semaphore), as a label; always 1.",
);

const HOLDER: (&str, &str) = (
    "dlock_lock_holder_lease_remaining_seconds",
    "One series per hold, naming its holder (token prefix, and who: a dlock process's host, pid and start, or the client's label): a new series for every hold; the hold's remaining lease, +Inf without expiry.",
);

/// One deployment's locks.
pub fn render(locks: &[LockInfo]) -> String {
    let views: Vec<(Option<&str>, &LockInfo)> = locks.iter().map(|lock| (None, lock)).collect();
    let mut out = String::new();
    families(&mut out, &views);
    out
}

/// Several independent masters' views (Redlock): each master's series carry a `master`
/// label, and `dlock_lock_quorum_held` says whether a majority agrees on one holder.
pub fn render_masters(locks: &[RedlockInfo]) -> String {
    let mut out = String::new();
    let mut views = Vec::new();
    for lock in locks {
        for view in &lock.masters {
            if let Ok(info) = &view.info {
                views.push((Some(view.master.as_str()), info));
            }
        }
    }
    families(&mut out, &views);
    header(
        &mut out,
        "dlock_lock_quorum_held",
        "Whether a majority of the Redlock masters agree on one holder (1) or not (0).",
    );
    for lock in locks {
        let held = lock.majority_holder().is_some();
        let held = if held { 1.0 } else { 0.0 };
        sample(
            &mut out,
            "dlock_lock_quorum_held",
            &[("lock", lock.name.clone())],
            held,
        );
    }
    header(
        &mut out,
        "dlock_master_up",
        "Whether the master answered the inspection (1) or not (0).",
    );
    let mut masters: Vec<(&str, bool)> = Vec::new();
    for view in locks.iter().flat_map(|lock| &lock.masters) {
        match masters.iter_mut().find(|(label, _)| *label == view.master) {
            Some((_, up)) => *up &= view.info.is_ok(),
            None => masters.push((&view.master, view.info.is_ok())),
        }
    }
    for (master, up) in masters {
        let up = if up { 1.0 } else { 0.0 };
        sample(
            &mut out,
            "dlock_master_up",
            &[("master", master.to_string())],
            up,
        );
    }
    out
}

fn families(out: &mut String, views: &[(Option<&str>, &LockInfo)]) {
    // A lock named twice, or two holds that show alike, would repeat a series, which a
    // scraper refuses: each series once.
    let mut written = std::collections::HashSet::new();
    let mut once = |out: &mut String, name: &str, labels: &[(&str, String)], value: f64| {
        let key: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        if written.insert((name.to_string(), key)) {
            sample(out, name, labels, value);
        }
    };
    let (name, help) = INFO;
    header(out, name, help);
    for (master, lock) in views {
        let mut labels = labels(lock, *master);
        labels.push(("kind", lock.kind.to_string()));
        once(out, name, &labels, 1.0);
    }
    for (name, help, value) in FAMILIES {
        header(out, name, help);
        for (master, lock) in views {
            if let Some(value) = value(lock) {
                once(out, name, &labels(lock, *master), value);
            }
        }
    }
    let (name, help) = HOLDER;
    header(out, name, help);
    for (master, lock) in views {
        for holder in &lock.holders {
            let mut labels = labels(lock, *master);
            labels.push(("token", token_prefix(&holder.token)));
            labels.push(("holder", who(holder)));
            let left = holder.remaining.map_or(f64::INFINITY, |d| d.as_secs_f64());
            once(out, name, &labels, left);
        }
    }
}

/// A lock's series labels: its name (and the master, over several): stable while the
/// lock changes hands or kind, so each is one series over time.
fn labels(lock: &LockInfo, master: Option<&str>) -> Vec<(&'static str, String)> {
    let mut labels = vec![("lock", lock.name.clone())];
    if let Some(master) = master {
        labels.push(("master", master.to_string()));
    }
    labels
}

fn header(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
}

fn sample(out: &mut String, name: &str, labels: &[(&str, String)], value: f64) {
    let labels: Vec<String> = labels
        .iter()
        .map(|(key, value)| format!("{key}=\"{}\"", escape(value)))
        .collect();
    let value = if value == f64::INFINITY {
        "+Inf".to_string()
    } else {
        value.to_string()
    };
    let _ = writeln!(out, "{name}{{{}}} {value}", labels.join(","));
}

/// A label value as the text format needs it: backslash, double quote and line feed
/// escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("two\nlines"), "two\\nlines");
        let mut out = String::new();
        sample(&mut out, "m", &[("lock", "x\"y".into())], f64::INFINITY);
        assert_eq!(out, "m{lock=\"x\\\"y\"} +Inf\n");
    }
}

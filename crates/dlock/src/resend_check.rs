//! A test hook, hidden from the docs: "every script is safe to run twice", checked.
//!
//! When enabled, every script call is sent a second time right after the first, as a
//! resend after a lost reply would be, and the keys the call names (all a script may
//! touch) are read before and after the second run. A second run must change nothing;
//! what it changed is recorded as a violation. Leases restarted by the second run (a key's
//! remaining time, a lease end in milliseconds inside a value) are allowed to move.
//!
//! The switch is per process: a test binary that enables it runs all its scripts twice.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::backend::Connection;

static ENABLED: AtomicBool = AtomicBool::new(false);
static FINDINGS: Mutex<Report> = Mutex::new(Report {
    checked: BTreeSet::new(),
    violations: Vec::new(),
});

/// How far a restarted lease may move a number between the two runs: a remaining time
/// in ms, or a lease end in server ms.
const LEASE_SLACK_MS: u64 = 10_000;

/// What the check found so far.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The names of the scripts that were run twice and compared.
    pub checked: BTreeSet<String>,
    /// One line per second run that changed something: the script and the difference.
    pub violations: Vec<String>,
}

/// Runs every script of this process twice from now on, comparing the state each time.
pub fn enable() {
    ENABLED.store(true, Ordering::SeqCst);
}

/// What has been checked and found so far.
pub fn report() -> Report {
    FINDINGS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// One key as it is now: `(its type and value, its remaining time in ms)`.
pub(crate) type KeyState = (String, i64);

/// Reads every key in `keys`: its type, value and remaining time. A read that fails is
/// recorded as its error (and compares equal only to the same error).
pub(crate) async fn snapshot(conn: &mut Connection, keys: &[Vec<u8>]) -> Vec<KeyState> {
    let mut states = Vec::with_capacity(keys.len());
    for key in keys {
        let state = read_key(conn, key)
            .await
            .unwrap_or_else(|err| (format!("error: {err}"), 0));
        states.push(state);
    }
    states
}

async fn read_key(conn: &mut Connection, key: &[u8]) -> redis::RedisResult<KeyState> {
    let kind: String = redis::cmd("TYPE").arg(key).query_async(conn).await?;
    let value = match kind.as_str() {
        "none" => String::new(),
        "string" => {
            let value: Vec<u8> = redis::cmd("GET").arg(key).query_async(conn).await?;
            String::from_utf8_lossy(&value).into_owned()
        }
        "hash" => {
            let mut fields: Vec<(Vec<u8>, Vec<u8>)> =
                redis::cmd("HGETALL").arg(key).query_async(conn).await?;
            fields.sort();
            let fields: Vec<String> = fields
                .iter()
                .map(|(f, v)| {
                    format!(
                        "{}={}",
                        String::from_utf8_lossy(f),
                        String::from_utf8_lossy(v)
                    )
                })
                .collect();
            fields.join(" ")
        }
        "zset" => {
            let members: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(conn)
                .await?;
            let members: Vec<String> = members
                .iter()
                .map(|(m, score)| format!("{}@{score:.0}", String::from_utf8_lossy(m)))
                .collect();
            members.join(" ")
        }
        "list" => {
            let items: Vec<Vec<u8>> = redis::cmd("LRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .query_async(conn)
                .await?;
            let items: Vec<String> = items
                .iter()
                .map(|i| String::from_utf8_lossy(i).into_owned())
                .collect();
            items.join(" ")
        }
        "set" => {
            let mut members: Vec<Vec<u8>> =
                redis::cmd("SMEMBERS").arg(key).query_async(conn).await?;
            members.sort();
            let members: Vec<String> = members
                .iter()
                .map(|m| String::from_utf8_lossy(m).into_owned())
                .collect();
            members.join(" ")
        }
        other => format!("(a {other})"),
    };
    let pttl: i64 = redis::cmd("PTTL").arg(key).query_async(conn).await?;
    Ok((format!("{kind} {value}"), pttl))
}

/// Records whether the second run of `script` left the keys as the first one did.
pub(crate) fn compare(script: &str, once: &[KeyState], twice: &[KeyState]) {
    let mut findings = FINDINGS.lock().unwrap_or_else(|p| p.into_inner());
    findings.checked.insert(script.to_string());
    if let Some(difference) = difference(once, twice) {
        findings
            .violations
            .push(format!("the {script} script, run again: {difference}"));
    }
}

/// The first difference between two snapshots that a restarted lease does not explain.
fn difference(once: &[KeyState], twice: &[KeyState]) -> Option<String> {
    for (i, ((before, ttl_before), (after, ttl_after))) in once.iter().zip(twice).enumerate() {
        let lease_moved = (*ttl_before >= 0) == (*ttl_after >= 0)
            && ttl_before.abs_diff(*ttl_after) <= LEASE_SLACK_MS;
        if !same_but_lease_ends(before, after) || !(ttl_before == ttl_after || lease_moved) {
            return Some(format!(
                "key {} was {before:?} (pttl {ttl_before}), is {after:?} (pttl {ttl_after})",
                i + 1
            ));
        }
    }
    (once.len() != twice.len()).then(|| "a different number of keys".to_string())
}

/// Equal, except for numbers that look like a lease end in server milliseconds (13 or 14
/// digits) moved by a restarted lease. Fences (server microseconds, 16 digits) and
/// counters must match exactly.
fn same_but_lease_ends(a: &str, b: &str) -> bool {
    let (a, b) = (chunks(a), chunks(b));
    a.len() == b.len()
        && a.iter().zip(&b).all(|(x, y)| {
            x == y
                || match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(x), Ok(y)) => {
                        let lease_end =
                            |n: u64| (1_000_000_000_000..100_000_000_000_000).contains(&n);
                        lease_end(x) && lease_end(y) && x.abs_diff(y) <= LEASE_SLACK_MS
                    }
                    _ => false,
                }
        })
}

/// Splits text into runs of digits and single other characters.
fn chunks(text: &str) -> Vec<&str> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    while start < bytes.len() {
        let digits = bytes[start..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let len = if digits > 0 {
            digits
        } else {
            text[start..].chars().next().map_or(1, char::len_utf8)
        };
        chunks.push(&text[start..start + len]);
        start += len;
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(value: &str, pttl: i64) -> KeyState {
        (value.to_string(), pttl)
    }

    #[test]
    fn a_restarted_lease_is_no_difference() {
        let once = [state("hash h:abc=1732480000000|12", 4000)];
        let twice = [state("hash h:abc=1732480000012|12", 4012)];
        assert_eq!(difference(&once, &twice), None);
    }

    #[test]
    fn a_counter_moved_or_a_field_gone_is_a_difference() {
        let fence = |f: &str| [state(&format!("string {f}"), -1)];
        assert!(difference(&fence("1732480000000001"), &fence("1732480000000002")).is_some());
        assert!(difference(&fence("7"), &fence("8")).is_some());
        let holds = |h: &str| [state(&format!("hash count={h} h:a=1"), 5000)];
        assert!(difference(&holds("2"), &holds("1")).is_some());
        assert!(difference(&[state("string t", 5000)], &[state("none ", -2)]).is_some());
    }
}

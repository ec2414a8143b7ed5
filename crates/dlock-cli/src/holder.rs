//! Who holds a lock, in words: the short token form and the holder a `dlock` label names,
//! shared by `inspect`'s table and JSON and by its Prometheus text.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Who a holder is: a `dlock` process (host, pid, start) or another client's label.
pub fn who(holder: &dlock::Holder) -> String {
    match holder.label.as_deref().and_then(DlockHolder::parse) {
        Some(h) => format!("dlock pid {} on {}, started {}", h.pid, h.host, h.started),
        None => holder
            .label
            .clone()
            .unwrap_or_else(|| "another client".into()),
    }
}

/// A short form of a token that still tells one client's holds apart: after any holder
/// label, for dlock's form (`<tag>.<random>`, both hex, and a queued waiter's
/// `~<ttl>[~<N>]`) the client tag and the first 8 digits of the random part; for any other
/// token its first 8 characters (never more: a string lock's token releases it).
pub fn token_prefix(token: &str) -> String {
    match dlock::token_tag_and_random(token) {
        Some((tag, random)) if tag.len() <= 16 => {
            format!("{tag}.{}", &random[..random.len().min(8)])
        }
        // Another client's token: its first 8 characters, whatever they are.
        _ => token.chars().take(8).collect(),
    }
}

/// A holder label written by the `dlock` CLI: `dlock@host:pid:start`.
pub struct DlockHolder {
    pub host: String,
    pub pid: u32,
    /// When the process started, as [`utc`] writes it.
    pub started: String,
}

impl DlockHolder {
    pub fn parse(label: &str) -> Option<DlockHolder> {
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
pub fn utc(time: SystemTime) -> String {
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
    fn a_token_prefix_tells_one_clients_holds_apart() {
        assert_eq!(
            token_prefix("dlock@h:1:2/0a1b2c3d.0123456789abcdef~30000"),
            "0a1b2c3d.01234567"
        );
        assert_eq!(
            token_prefix("0a1b2c3d.fedcba9876543210"),
            "0a1b2c3d.fedcba98"
        );
        assert_eq!(token_prefix("someone-elses-token"), "someone-");
        // Another client's token with a dot: still only its first 8 characters.
        assert_eq!(token_prefix("averylongsecretvalue.v1"), "averylon");
        // ... and with a '/': no label, and nothing after the first 8.
        assert_eq!(token_prefix("my-very-secret-token/abc"), "my-very-");
        assert_eq!(token_prefix("xyz.def~1"), "xyz.def~");
    }

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

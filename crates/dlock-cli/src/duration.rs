//! Humane durations: `250ms`, `30s`, `5m`, `1h`, `1d`, `1.5s`, `1m30s`.

use std::time::Duration;

/// A lease flag's value (`--ttl`): a duration within the library's lease limits.
pub fn ttl(text: &str) -> Result<Duration, String> {
    within(text, dlock::MIN_TTL, dlock::MAX_TTL)
}

/// The library's lease limits in words (`10ms to 24h`), for the help of the flags that
/// set a lease: the CLI never states them itself.
pub fn ttl_range() -> String {
    format!(
        "{} to {}",
        dlock::humane(dlock::MIN_TTL),
        dlock::humane(dlock::MAX_TTL)
    )
}

/// The library's waiter-lease limits in words (`100ms to 24h`), for `--waiter-lease`.
pub fn waiter_lease_range() -> String {
    format!(
        "{} to {}",
        dlock::humane(dlock::MIN_WAITER_LEASE),
        dlock::humane(dlock::MAX_TTL)
    )
}

/// `--waiter-lease`: a duration within the library's waiter-lease limits.
pub fn waiter_lease(text: &str) -> Result<Duration, String> {
    within(text, dlock::MIN_WAITER_LEASE, dlock::MAX_TTL)
}

/// A duration from `min` to `max`. Checked while parsing, so that clap names the flag and
/// echoes the value as the user wrote it (`0s`, not `0ms`), with the same words for `0`
/// and `0s`.
fn within(text: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let duration = parse(text)?;
    if duration < min || duration > max {
        return Err(format!(
            "out of range; use {} to {}",
            dlock::humane(min),
            dlock::humane(max)
        ));
    }
    Ok(duration)
}

/// The units [`parse`] takes, for help texts and errors.
pub const UNITS: &str = "ms, s, m, h or d";

/// Parses a humane duration. Every number needs a unit (`ms`, `s`, `m`, `h`, `d`: a day
/// for cron's intervals), but for a bare zero, which is zero in any unit. Errors do not
/// repeat the text: clap prints it with the flag.
pub fn parse(text: &str) -> Result<Duration, String> {
    let hint = format!("use a number with a unit ({UNITS}), e.g. 250ms, 30s, 5m, 1h, 1d or 1m30s");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(format!("empty duration; {hint}"));
    }
    if rest.chars().all(|c| c == '0') {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let unit_len = rest[number_len..]
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len() - number_len);
        let (number, unit) = (
            &rest[..number_len],
            &rest[number_len..number_len + unit_len],
        );
        let value: f64 = number
            .parse()
            .map_err(|_| format!("not a duration; {hint}"))?;
        let seconds_per_unit = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            _ => return Err(format!("not a duration; {hint}")),
        };
        total = Duration::try_from_secs_f64(value * seconds_per_unit)
            .ok()
            .and_then(|part| total.checked_add(part))
            .ok_or_else(|| format!("out of range; {hint}"))?;
        rest = &rest[number_len + unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_humane_forms() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse("1d12h"), Ok(Duration::from_secs(129_600)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "10",
            "s",
            "10x",
            "1dd",
            "1day",
            "1..2s",
            "-1s",
            "1e400h",
            "10000000000000000000s10000000000000000000s",
            "99999999999999999999999h",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in "\\PC{0,40}|[0-9.]{1,25}(ms|s|m|h|d)([0-9.]{1,25}(ms|s|m|h|d))?") {
            let _ = parse(&text);
        }
    }
}

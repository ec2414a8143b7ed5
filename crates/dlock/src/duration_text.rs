//! Durations written for people (`250ms`, `1.5s`, `1h30m`): every limit and wait the
//! library, and the CLI through it, names in a message.

/// Formats a duration for people: `250ms`, `1.5s`, `5m`, `1h30m`, `24h`.
pub fn humane(duration: std::time::Duration) -> String {
    let ms = duration.as_millis();
    if ms < 1_000 {
        if ms == 0 && !duration.is_zero() {
            return format!("{}µs", duration.as_micros());
        }
        return format!("{ms}ms");
    }
    if ms < 60_000 {
        let tenths = (ms + 50) / 100;
        return if tenths.is_multiple_of(10) {
            format!("{}s", tenths / 10)
        } else {
            format!("{}.{}s", tenths / 10, tenths % 10)
        };
    }
    let secs = duration.as_secs();
    let (hours, minutes, seconds) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut text = String::new();
    if hours > 0 {
        text += &format!("{hours}h");
    }
    if minutes > 0 {
        text += &format!("{minutes}m");
    }
    if seconds > 0 && hours == 0 {
        text += &format!("{seconds}s");
    }
    text
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::humane;

    #[test]
    fn durations_print_humanely() {
        for (duration, text) in [
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1003), "1s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(300), "5m"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(5400), "1h30m"),
            (Duration::from_secs(86400), "24h"),
            (Duration::from_micros(5), "5µs"),
            (Duration::ZERO, "0ms"),
        ] {
            assert_eq!(humane(duration), text);
        }
        assert!(!humane(Duration::MAX).is_empty());
    }
}

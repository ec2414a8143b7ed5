//! Which Redis deployment a command talks to, and the `--redis` values split into URLs.

/// Which Redis deployment the command talks to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Topology {
    /// The one server of `--redis` (or of `bench --spawn`).
    #[default]
    SingleNode,
    /// The Redis Cluster of `--cluster`.
    Cluster,
    /// The master that the sentinels of `--sentinel` name for `--service`.
    Sentinel,
    /// The independent masters of `--redis` given more than once (or a list in
    /// DLOCK_REDIS): the plain mutex granted by a majority of them.
    Redlock,
}

/// `--redis` values as given (repeated flags, or one value with several URLs), one URL
/// each. A comma separates URLs only where a new URL begins (`,redis://`, `,rediss://`,
/// `,unix://`...), so a comma inside a password stays part of it.
pub fn split_urls(values: &[String]) -> Vec<String> {
    let mut urls = Vec::new();
    for value in values {
        let mut current = String::new();
        for (index, piece) in value.split(',').enumerate() {
            if index > 0 && starts_a_url(piece) {
                urls.push(std::mem::take(&mut current));
            } else if index > 0 {
                current.push(',');
            }
            current.push_str(piece);
        }
        urls.push(current);
    }
    let urls: Vec<String> = urls
        .into_iter()
        .map(|url| url.trim().trim_end_matches(',').trim_end().to_string())
        .collect();
    if urls.iter().all(String::is_empty) {
        // Nothing but blanks: left as given, for the URL check to refuse.
        return urls.into_iter().take(1).collect();
    }
    urls.into_iter().filter(|url| !url.is_empty()).collect()
}

/// True when `text` begins with a URL scheme: letters, digits, `+`, `-` or `.`, then `://`.
fn starts_a_url(text: &str) -> bool {
    let text = text.trim_start();
    text.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

#[cfg(test)]
mod tests {
    fn split(values: &[&str]) -> Vec<String> {
        super::split_urls(&values.iter().map(|v| v.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn several_redis_urls_are_split_where_a_new_url_begins() {
        assert_eq!(split(&["redis://a:1"]), ["redis://a:1"]);
        assert_eq!(
            split(&["redis://a:1,rediss://b:2, redis://c:3,"]),
            ["redis://a:1", "rediss://b:2", "redis://c:3"]
        );
        assert_eq!(
            split(&["redis://a:1", "redis://b:2,redis://c:3"]),
            ["redis://a:1", "redis://b:2", "redis://c:3"]
        );
        // A comma inside a password does not start a URL.
        assert_eq!(
            split(&["redis://u:pa,ss@a:1,redis://b:2"]),
            ["redis://u:pa,ss@a:1", "redis://b:2"]
        );
        // Blanks alone stay, for the URL check to refuse.
        assert_eq!(split(&[""]), [""]);
    }
}

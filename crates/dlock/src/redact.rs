//! Passwords kept out of messages and logs: every URL dlock names in an error or an event
//! goes through [`redact`].

/// The URL with any password replaced, for messages and logs: `user:password@` and the
/// `pass=` / `password=` query parameters of unix-socket URLs.
pub fn redact(url: &str) -> String {
    let url = redact_userinfo(url);
    match url.split_once('?') {
        Some((base, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((key, _)) if key == "pass" || key == "password" => format!("{key}=***"),
                    _ => param.to_string(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
        None => url,
    }
}

fn redact_userinfo(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme_end + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Several URLs for a message, passwords hidden.
pub(crate) fn describe_urls(urls: &[String]) -> String {
    urls.iter()
        .map(|url| redact(url))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(
            super::redact("redis://u:secret@h:1/0"),
            "redis://u:***@h:1/0"
        );
        assert_eq!(super::redact("redis://h:1"), "redis://h:1");
        assert_eq!(super::redact("redis://:pw@h"), "redis://:***@h");
        assert_eq!(
            super::redact("redis+unix:///tmp/r.sock?db=1&pass=S3CRET"),
            "redis+unix:///tmp/r.sock?db=1&pass=***"
        );
        assert_eq!(
            super::redact("unix:///s?password=x"),
            "unix:///s?password=***"
        );
    }
}

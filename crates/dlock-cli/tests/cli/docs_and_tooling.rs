//! What comes with the binary: completions and man pages, the help's option order, the
//! docs' install lines and links, and the test script's summary and status.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::{code, output};

/// `dlock completions SHELL` and `dlock man` come from the clap definitions, need no Redis
/// (the URL here reaches nothing), and work: bash completes a subcommand and its flags from
/// the generated script; the man page renders the command and its subcommands; pages
/// written to a directory that does not exist are an I/O error (74), said.
#[test]
fn completions_and_man_pages_are_generated_without_redis() {
    let offline = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_dlock"));
        command.env("DLOCK_REDIS", "redis://127.0.0.1:1");
        command
    };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("dlock.bash");
    let out = output(offline().args(["completions", "bash"]));
    assert_eq!(out.status.code(), Some(0));
    std::fs::write(&script, &out.stdout).unwrap();
    let complete = |words: &str| {
        let probe = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _dlock dlock \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; echo \"${{COMPREPLY[*]}}\"",
            script.display()
        );
        let out = output(Command::new("bash").args(["-c", &probe]));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let subcommands = complete("dlock ru");
    assert!(
        subcommands.split_whitespace().any(|w| w == "run"),
        "{subcommands}"
    );
    let flags = complete("dlock run job --wai");
    assert!(
        flags.split_whitespace().any(|w| w == "--waiter-lease"),
        "{flags}"
    );
    // Negative control: the probe does not complete whatever it is given.
    let nothing = complete("dlock zzz");
    assert!(!nothing.contains("run"), "{nothing}");
    // The watchdog's internal subcommand is never offered.
    let everything = complete("dlock ''");
    assert!(everything.contains("inspect"), "{everything}");
    assert!(!everything.contains("__watch-group"), "{everything}");
    for shell in ["zsh", "fish"] {
        let out = output(offline().args(["completions", shell]));
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains("waiter-lease"), "{shell}");
        assert!(!script.contains("__watch-group"), "{shell}");
    }
    assert_eq!(code(offline().args(["completions", "tcsh"])), 64);

    let out = output(offline().arg("man"));
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains(".TH dlock 1"), "{page}");
    assert!(page.contains("inspect"), "{page}");
    let pages = dir.path().join("man1");
    std::fs::create_dir(&pages).unwrap();
    let out = output(offline().args(["man", "--out-dir"]).arg(&pages));
    assert_eq!(out.status.code(), Some(0));
    let run_page = std::fs::read_to_string(pages.join("dlock-run.1")).unwrap();
    assert!(run_page.contains("waiter"), "{run_page}");
    assert!(
        !pages.join("dlock-__watch-group.1").exists(),
        "internal commands have no page"
    );
    let out = output(
        offline()
            .args(["man", "--out-dir"])
            .arg(dir.path().join("missing")),
    );
    assert_eq!(out.status.code(), Some(74));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write the manual pages"));
}

// Issue 36, part 4: the CLI's rough edges (the rest are in lock_commands, exit_codes,
// inspect and broken_output).

#[test]
fn every_install_line_in_the_docs_uses_the_lock_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        files.push(entry.unwrap().path());
    }
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        files.push(entry.unwrap().path().join("README.md"));
    }
    let mut seen = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("cargo install")) {
            seen += 1;
            assert!(line.contains("--locked"), "{}: {line}", file.display());
        }
    }
    assert!(seen > 0, "the README says how to install dlock");
}

#[test]
fn the_test_script_ends_with_its_summary_and_keeps_its_status() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    // A stand-in for cargo that prints what nextest prints for a failed run.
    let fake = dir.path().join("cargo");
    std::fs::write(
        &fake,
        r#"#!/bin/sh
case "$*" in
  "nextest --version") echo "cargo-nextest 0.9.0"; exit 0 ;;
  *--doc*) echo "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured"; exit 0 ;;
  *--features*) echo "     Summary [   1.000s] 1 test run: 1 passed, 0 skipped"; exit 0 ;;
esac
echo "        PASS [   0.100s] dlock-cli::cli one"
echo "        FAIL [   0.200s] dlock-cli::cli two"
echo "------------"
echo "     Summary [  10.000s] 3 tests run: 2 passed, 1 failed, 4 skipped"
echo "        FAIL [   0.200s] dlock-cli::cli two"
echo "error: test run failed" >&2
exit 100
"#,
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap()
    );
    // Both streams in one, as a terminal shows them.
    let out = Command::new("bash")
        .arg("-c")
        .arg("\"$0\" 2>&1")
        .arg(root.join("scripts/test.sh"))
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(100), "the runner's status is kept");
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    // 2 + 1 (metrics) + 12 (doc tests) passed; 4 skipped + 1 ignored doc test.
    assert!(
        last.contains("15 passed") && last.contains("1 failed") && last.contains("5 skipped"),
        "the summary is the last line: {text}"
    );

    // A run that fails before any test (a build error) says so on its last line too,
    // rather than a clean-looking "0 failed".
    std::fs::write(
        &fake,
        r#"#!/bin/sh
case "$*" in
  "nextest --version") echo "cargo-nextest 0.9.0"; exit 0 ;;
  *--doc*) echo "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured"; exit 0 ;;
  *--features*) echo "     Summary [   1.000s] 1 test run: 1 passed, 0 skipped"; exit 0 ;;
esac
echo "error[E0308]: mismatched types" >&2
exit 101
"#,
    )
    .unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg("\"$0\" 2>&1")
        .arg(root.join("scripts/test.sh"))
        .env(
            "PATH",
            format!(
                "{}:{}",
                dir.path().display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(101), "the runner's status is kept");
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    assert!(last.contains("the run failed (exit 101)"), "{text}");
}

#[test]
fn a_subcommand_lists_its_own_options_before_the_global_ones() {
    // Each subcommand that talks to Redis, with options of its own that must come first.
    for (subcommand, own) in [
        ("elect", &["--value", "--ttl", "--kill-after"][..]),
        ("run", &["--ttl", "--wait", "--fair", "--also"]),
        ("acquire", &["--ttl", "--json"]),
        ("release", &["--fair", "--force"]),
        ("extend", &["--ttl"]),
        ("inspect", &["--json", "--watch"]),
        ("guarded", &["--fair", "--json"]),
        ("bench", &["--duration", "--json"]),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
            .args([subcommand, "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        // Where the option's own line starts (`  -n, --no-wait` or `      --ttl <TTL>`),
        // not a mention of it in a description.
        let at = |option: &str| {
            let mut offset = 0;
            for line in help.split_inclusive('\n') {
                let listed = line
                    .trim_start()
                    .split([' ', ','])
                    .any(|word| word == option);
                if line.starts_with("  ") && line.trim_start().starts_with('-') && listed {
                    return offset;
                }
                offset += line.len();
            }
            panic!("{subcommand}: {option} listed in {help}")
        };
        let heading = help
            .find("Global options")
            .unwrap_or_else(|| panic!("{subcommand}: a global options heading in {help}"));
        for own in own {
            assert!(
                at(own) < heading,
                "{subcommand}: {own} before the global options: {help}"
            );
        }
        for global in ["--redis", "--cluster", "--prefix", "--quiet"] {
            assert!(
                at(global) > heading,
                "{subcommand}: {global} under its heading: {help}"
            );
        }
    }
}

/// Every package the docs and scripts name (`-p NAME`, `--package NAME`, `cargo install
/// --locked NAME`, `cargo add NAME`, `-F NAME/feature`) is one of this workspace's packages,
/// by its registry name (docs/decisions.md, "Published names"): a renamed package leaves
/// no command behind that cargo would refuse or, worse, answer with someone else's crate.
#[test]
fn every_package_the_docs_and_scripts_name_is_in_the_workspace() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut packages = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let manifest = std::fs::read_to_string(entry.unwrap().path().join("Cargo.toml")).unwrap();
        let name = manifest
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|rest| rest.strip_suffix('"'))
            .expect("a [package] name");
        packages.push(name.to_string());
    }
    assert!(packages.iter().any(|p| p == "dlock-redis"), "{packages:?}");
    let mut files = vec![root.join("README.md"), root.join(".ci/run")];
    for dir in ["docs", "scripts"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            files.push(entry.unwrap().path());
        }
    }
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let crate_dir = entry.unwrap().path();
        files.push(crate_dir.join("README.md"));
        if let Ok(examples) = std::fs::read_dir(crate_dir.join("examples")) {
            files.extend(examples.map(|e| e.unwrap().path()).filter(|p| p.is_file()));
        }
    }
    let mut named = 0;
    // decisions.md is the record of what was, old names included (`cargo add dlock`).
    files.retain(|f| !f.ends_with("docs/decisions.md"));
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let words: Vec<&str> = text
            .split(|c: char| c.is_whitespace() || "`()[],;'\"".contains(c))
            .filter(|w| !w.is_empty())
            .collect();
        for (i, pair) in words.windows(2).enumerate() {
            let name = match pair[0] {
                "-p" | "--package" | "add" => pair[1],
                "--locked" if i > 0 && words[i - 1] == "install" && pair[1] != "--path" => pair[1],
                "-F" | "--features" if pair[1].contains('/') => pair[1].split('/').next().unwrap(),
                _ => continue,
            };
            if !name.starts_with("dlock") || name.contains('$') {
                continue;
            }
            named += 1;
            assert!(
                packages.iter().any(|p| p == name),
                "{} names the package `{name}`, which is not one of {packages:?}",
                file.display()
            );
        }
    }
    assert!(
        named > 10,
        "the docs name the packages they build ({named} found)"
    );
}

// Issue 36, part 3: the README is the front door and docs/ the guide; their links hold.

/// The README is the front door: short enough to read (the rest is the guide in docs/).
#[test]
fn the_readme_stays_a_front_door() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let lines = readme.lines().count();
    assert!(
        lines < 300,
        "README.md has {lines} lines: move detail into docs/"
    );
}

/// Every relative link in the README, the guide (`docs/*.md`) and the crates' registry
/// pages (`crates/*/README.md`) names a file that exists, and a `#anchor` on a link to a
/// markdown file names one of its headings: moving text between pages must not leave a
/// reader at a dead end.
#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "crates"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            } else if path.join("README.md").is_file() {
                files.push(path.join("README.md"));
            }
        }
    }
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let (links, broken) = check_links(file, &text);
        checked += links;
        problems.extend(
            broken
                .into_iter()
                .map(|p| format!("{}: {p}", file.display())),
        );
    }
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
    assert!(
        checked > 50,
        "the docs link to each other ({checked} links found)"
    );
}

/// The negative control: the scan reports a link to a missing file, an anchor no heading
/// of the target has, and a missing anchor on the page itself, and leaves alone what is
/// not a link (code blocks, code spans, web addresses).
#[test]
fn the_link_check_reports_a_broken_link_and_a_broken_anchor() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("guide.md"),
        "# Guide\n\n## Present heading: with `code`, (and) punctuation\n\n## Twice\n\n## Twice\n",
    )
    .unwrap();
    let page = dir.path().join("page.md");
    let text = "\
# Page

## Local one

[fine](guide.md#present-heading-with-code-and-punctuation), [second of two](guide.md#twice-1),
[here](#local-one), [web](https://example.com/missing.md), [dir](.).
[gone](missing.md) and [no such heading](guide.md#absent-heading), [nor here](#nowhere).
A code span is no link: `[x](span.md)`, nor is a fenced block:

```text
[y](fenced.md)
```
[ref]: also-missing.md
";
    let (links, broken) = check_links(&page, text);
    assert_eq!(
        broken,
        [
            "missing.md: no such file",
            "guide.md#absent-heading: no such heading",
            "#nowhere: no such heading",
            "also-missing.md: no such file",
        ],
        "{broken:?}"
    );
    assert_eq!(links, 9, "every link outside code is checked");
}

/// Checks the relative links of the markdown `text` of `file`: returns how many links it
/// found and a line per broken one.
fn check_links(file: &Path, text: &str) -> (usize, Vec<String>) {
    let dir = file.parent().unwrap();
    let mut broken = Vec::new();
    let mut links = 0;
    for target in link_targets(text) {
        links += 1;
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        // An anchor alone points into the page itself.
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path)
        };
        if !path.is_empty() && !resolved.exists() {
            broken.push(format!("{target}: no such file"));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if resolved.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let page = if path.is_empty() {
            text.to_string()
        } else {
            std::fs::read_to_string(&resolved).unwrap()
        };
        if !heading_slugs(&page).iter().any(|slug| slug == anchor) {
            broken.push(format!("{target}: no such heading"));
        }
    }
    (links, broken)
}

/// The targets of the inline links (`[text](target "title")`) and reference definitions
/// (`[name]: target`) outside fenced blocks and code spans.
fn link_targets(text: &str) -> Vec<String> {
    let prose = prose_outside_code(text);
    let mut targets = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let end = rest.find([')', '\n']).unwrap_or(rest.len());
        let target = rest[..end].split_whitespace().next().unwrap_or_default();
        targets.push(target.trim_matches(['<', '>']).to_string());
        rest = &rest[end..];
    }
    for line in prose.lines() {
        let line = line.trim_start();
        if let (true, Some((_, target))) = (line.starts_with('['), line.split_once("]: ")) {
            targets.push(
                target
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
    targets
}

/// The text with fenced code blocks removed and code spans blanked (a span may run over
/// a line break, as it may in markdown).
fn prose_outside_code(text: &str) -> String {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            prose.push('\n');
        } else if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    let mut out = String::with_capacity(prose.len());
    let mut rest = prose.as_str();
    while let Some(at) = rest.find('`') {
        out.push_str(&rest[..at]);
        let ticks = rest[at..].len() - rest[at..].trim_start_matches('`').len();
        let fence = &rest[at..at + ticks];
        let after = &rest[at + ticks..];
        // A run of backticks closes at the next run of the same length; unmatched, it
        // is a literal backtick.
        match find_run(after, ticks) {
            Some(close) => {
                out.push(' ');
                rest = &after[close + ticks..];
            }
            None => {
                out.push_str(fence);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Where the next run of exactly `ticks` backticks starts in `text`.
fn find_run(text: &str, ticks: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'`' {
            let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
            if run == ticks {
                return Some(i);
            }
            i += run;
        } else {
            i += 1;
        }
    }
    None
}

/// The anchors GitHub gives the headings of a markdown page: lowercased, punctuation
/// dropped (letters, digits, `-` and `_` stay), spaces turned into `-`, and a repeated
/// heading numbered (`-1`, `-2`, ...).
fn heading_slugs(text: &str) -> Vec<String> {
    let mut slugs: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let hashes = line.len() - line.trim_start_matches('#').len();
        if fenced || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let heading = line[hashes..].trim().trim_end_matches('#').trim();
        let base: String = heading
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let repeats = slugs
            .iter()
            .filter(|s| {
                **s == base
                    || s.strip_prefix(&format!("{base}-"))
                        .is_some_and(|n| n.parse::<u32>().is_ok())
            })
            .count();
        slugs.push(if repeats == 0 {
            base
        } else {
            format!("{base}-{repeats}")
        });
    }
    slugs
}

/// Every help screen, as a terminal of `columns` shows it (COLUMNS stands for the terminal:
/// the output here is a pipe).
fn help_at(columns: Option<usize>, args: &[&str]) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dlock"));
    command.args(args).arg("--help").env_remove("COLUMNS");
    if let Some(columns) = columns {
        command.env("COLUMNS", columns.to_string());
    }
    let out = output(&mut command);
    assert_eq!(out.status.code(), Some(0), "{args:?}");
    String::from_utf8(out.stdout).unwrap()
}

const SUBCOMMANDS: [&[&str]; 12] = [
    &[],
    &["run"],
    &["acquire"],
    &["release"],
    &["extend"],
    &["elect"],
    &["leader"],
    &["guarded"],
    &["inspect"],
    &["bench"],
    &["completions"],
    &["man"],
];

/// The help fits 80 and 100 columns, and a wider terminal gets 100 (long lines are hard to
/// read); no two blank lines in a row; the prose after the options (HOW IT WORKS, EXIT
/// CODES, ...) is wrapped in the source within 80 columns, so that clap never breaks its
/// lines again into a ragged edge (the same text at 80 columns as at 100).
#[test]
fn help_reads_tidily_at_80_and_100_columns() {
    let epilogue = |help: &str| -> String {
        let start = help
            .lines()
            .position(|line| {
                line.ends_with(':')
                    && !line.starts_with(' ')
                    && line
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c == ' ' || c == ':')
            })
            .unwrap_or(usize::MAX);
        help.lines().skip(start).collect::<Vec<_>>().join("\n")
    };
    for args in SUBCOMMANDS {
        for (columns, width) in [
            (Some(80), 80),
            (Some(100), 100),
            (Some(200), 100),
            (None, 100),
        ] {
            let help = help_at(columns, args);
            for line in help.lines() {
                assert!(
                    line.chars().count() <= width,
                    "{args:?} at {columns:?} columns: a line of {}:\n{line}",
                    line.chars().count()
                );
                assert_eq!(line, line.trim_end(), "{args:?}: trailing blanks");
            }
            assert!(
                !help.contains("\n\n\n"),
                "{args:?}: two blank lines:\n{help}"
            );
        }
        assert_eq!(
            epilogue(&help_at(Some(80), args)),
            epilogue(&help_at(Some(100), args)),
            "{args:?}: the epilogue is wrapped again at 80 columns"
        );
    }
    // The prose is there to compare (not an empty epilogue on both sides).
    assert!(epilogue(&help_at(Some(80), &["run"])).contains("HOW IT WORKS"));
}

/// `[env: NAME]`, never `[env: NAME=]` (unset) nor `[env: NAME=VALUE]`: the value of
/// DLOCK_REDIS and the others may hold a password, and --help is pasted into tickets.
#[test]
fn help_names_environment_variables_without_their_values() {
    for set in [false, true] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_dlock"));
        command.args(["run", "--help"]);
        for var in [
            "DLOCK_REDIS",
            "DLOCK_CLUSTER",
            "DLOCK_SENTINEL",
            "DLOCK_SERVICE",
            "DLOCK_PREFIX",
            "DLOCK_REPLICAS",
            "DLOCK_REPLICA_TIMEOUT",
            "DLOCK_TLS_CA",
        ] {
            command.env_remove(var);
        }
        if set {
            command
                .env("DLOCK_REDIS", "redis://app:s3cret-pw@db:6379")
                .env("DLOCK_SERVICE", "mymaster-s3cret")
                .env("DLOCK_PREFIX", "s3cret-prefix:");
        }
        let help = crate::common::flat(&String::from_utf8(output(&mut command).stdout).unwrap());
        assert!(
            !help.contains("s3cret"),
            "a variable's value in --help:\n{help}"
        );
        assert!(
            !help.contains("=]"),
            "an empty variable shown as NAME=:\n{help}"
        );
        for var in [
            "DLOCK_REDIS",
            "DLOCK_SERVICE",
            "DLOCK_PREFIX",
            "DLOCK_TLS_KEY",
        ] {
            assert!(help.contains(&format!("[env: {var}]")), "{var}:\n{help}");
        }
    }
}

/// `completions` and `man` never connect: their help leaves out the dozen Redis options
/// (which every other subcommand lists under their heading), and the pages and scripts
/// they generate still describe the options where they apply.
#[test]
fn completions_and_man_help_leave_out_the_redis_options() {
    for args in [&["completions"][..], &["man"]] {
        let help = help_at(None, args);
        for global in [
            "Global options",
            "--redis",
            "--cluster",
            "--prefix",
            "DLOCK_",
        ] {
            assert!(
                !help.contains(global),
                "{args:?} --help lists {global}:\n{help}"
            );
        }
    }
    assert!(help_at(None, &["run"]).contains("--redis <URL>"));
    let page = output(Command::new(env!("CARGO_BIN_EXE_dlock")).args(["man"]));
    assert!(String::from_utf8_lossy(&page.stdout).contains("DLOCK_REDIS"));
    let script = output(Command::new(env!("CARGO_BIN_EXE_dlock")).args(["completions", "bash"]));
    assert!(String::from_utf8_lossy(&script.stdout).contains("--redis"));
    // Still accepted there (a DLOCK_REDIS in the environment must not break them).
    assert_eq!(
        code(Command::new(env!("CARGO_BIN_EXE_dlock")).args([
            "completions",
            "bash",
            "--redis",
            "redis://127.0.0.1:1"
        ])),
        0
    );
}

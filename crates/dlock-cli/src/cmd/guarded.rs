//! `dlock guarded`: one Redis command on the lock's data, applied only while a hold is
//! held (the library's guarded writes), with its reply printed for shell scripts.

use clap::Args;
use dlock::redis::Value;
use dlock::{Guarded, LockOptions};

use crate::hold::{lock_of, KindArgs, Locks};

/// The text `dlock guarded --help` ends with.
pub const HELP: &str = "\
EXAMPLES:
    # Inside `dlock run`, the command gets the name and token of its hold:
    dlock run job -- sh -c '
      n=$(dlock guarded \"$DLOCK_NAME\" \"$DLOCK_TOKEN\" GET count)
      dlock guarded \"$DLOCK_NAME\" \"$DLOCK_TOKEN\" SET count $((${n:-0} + 1))'
    # With a token from `dlock acquire`:
    read token fence < <(dlock acquire job)
    dlock guarded job \"$token\" HSET status state running
    dlock guarded --json job \"$token\" HGETALL status

The data key KEY is stored as {NAME}:data:KEY (with --prefix P:
{PNAME}:data:KEY; a name with a hash tag keeps it: {t}:job stores
{t}/4/:job:data:KEY), in the lock's hash slot. The command runs only if TOKEN
still holds NAME (checked by the same script on the server); otherwise nothing
is applied and dlock exits 77. Commands: any of GET SET INCRBY HSET HGETALL
RPUSH SADD ZADD DEL PEXPIRE ... that take one key (`dlock guarded --commands`
lists them). The reply is printed one value a line (nothing for a missing value;
an empty line for one inside an array), or as JSON (use --json for values that
are not single lines of text). A nested `dlock` inside `dlock run` finds the
same server and prefix only through the environment (DLOCK_REDIS, DLOCK_PREFIX,
...), not through flags given to `dlock run`, and needs the kind flag the lock
was taken with (--read, --permits N, ...). Flags may come anywhere; a value that
starts with '-' and is not a number goes after `--`: `dlock guarded job T SADD s
-- -x`. Send one command at a time per token: a resend after a dropped
connection is recognised only as the token's latest write. Integers beyond 2^53
come back rounded (Lua's numbers); GET the key for the exact value.

EXIT CODES:
    0    applied; the reply is printed
    64   invalid arguments (a command outside the list, an empty key, DEL with
         several keys, several --redis masters)
    65   NAME is held by another kind of lock: pass the kind flag TOKEN was
         taken with (--read, --write, --permits N); nothing was applied
    69   Redis unreachable
    74   standard output is closed (nothing was applied), or the reply could not
         be written (the command WAS applied)
    76   Redis refused the command (the data key holds another type, a value is
         not a number, wrong arguments, an ACL, maxmemory); the hold is
         untouched
    77   TOKEN does not hold NAME (expired, released or taken): nothing was
         applied";

#[derive(Args, Debug, Clone)]
pub struct GuardedArgs {
    /// Lock name
    #[arg(required_unless_present = "commands")]
    pub name: Option<String>,
    /// The hold's token: printed by `dlock acquire`, given to `dlock run`'s command as
    /// DLOCK_TOKEN
    #[arg(required_unless_present = "commands")]
    pub token: Option<String>,
    #[command(flatten)]
    pub kind: KindArgs,
    /// Print the reply as JSON (null for a missing value)
    #[arg(long)]
    pub json: bool,
    /// List the commands a guarded write may run, and exit
    #[arg(long, conflicts_with_all = ["name", "token", "command", "key", "args", "json"])]
    pub commands: bool,
    /// The Redis command, e.g. INCRBY (`--commands` lists them)
    #[arg(required_unless_present = "commands")]
    pub command: Option<String>,
    /// The data key (stored beside the lock in its slot: {NAME}:data:KEY for a name without a hash tag)
    #[arg(required_unless_present = "commands")]
    pub key: Option<String>,
    /// The command's arguments after the key (a negative number is an argument; any other
    /// value that starts with '-' goes after `--`)
    #[arg(allow_negative_numbers = true)]
    pub args: Vec<String>,
}

impl GuardedArgs {
    /// Everything that can be checked without Redis (nothing for `--commands`).
    pub fn check(&self, prefix: &str) -> dlock::Result<()> {
        if self.commands {
            return Ok(());
        }
        dlock::check_name(prefix, self.name.as_deref().unwrap_or_default())?;
        crate::hold::check_token(self.token.as_deref())?;
        self.kind.check()?;
        self.batch().check()
    }

    /// Applies the command while the hold is held (see [`guarded`]).
    pub async fn run(&self, locks: &Locks) -> dlock::Result<i32> {
        guarded(locks, self).await
    }

    /// The batch of the one command given.
    pub fn batch(&self) -> Guarded {
        Guarded::new().command(
            self.command.as_deref().unwrap_or_default(),
            self.key.as_deref().unwrap_or_default(),
            &self.args,
        )
    }
}

/// Applies the command while the hold is held and prints its reply; `Lost` (exit 77)
/// with nothing applied when it is not.
async fn guarded(locks: &Locks, args: &GuardedArgs) -> dlock::Result<i32> {
    // (A closed stdout was refused before connecting: see `needs_stdout`.)
    let (name, token) = (
        args.name.as_deref().unwrap_or_default(),
        args.token.as_deref().unwrap_or_default(),
    );
    let lock = lock_of(locks, &args.kind, name, LockOptions::default())?;
    let replies = lock.apply_token(token, &args.batch()).await?;
    let reply = replies.into_iter().next().unwrap_or(Value::Nil);
    let text = if args.json {
        json(&reply).to_string() + "\n"
    } else {
        let mut lines = String::new();
        plain(&reply, &mut lines, 0);
        lines
    };
    let code = crate::exit::emit(&text);
    if code == crate::exit::IO_ERROR {
        eprintln!("dlock: the command was applied; only its reply was not printed (do not apply it again)");
    }
    Ok(code)
}

/// `--commands`: the commands a guarded write may run, one a line (no Redis needed).
pub fn list_commands() -> i32 {
    crate::exit::emit(&(dlock::GUARDED_COMMANDS.join("\n") + "\n"))
}

/// A reply as lines: a value a line, an array's elements each on their own; nothing for
/// a missing value, but an empty line for one inside an array (`HMGET`), which keeps the
/// others on their lines.
fn plain(reply: &Value, out: &mut String, depth: usize) {
    match reply {
        Value::Nil if depth == 0 => {}
        Value::Nil => out.push('\n'),
        Value::Array(items) | Value::Set(items) => {
            items.iter().for_each(|item| plain(item, out, depth + 1))
        }
        Value::Map(pairs) => pairs.iter().for_each(|(key, value)| {
            plain(key, out, depth + 1);
            plain(value, out, depth + 1);
        }),
        other => {
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
}

fn json(reply: &Value) -> serde_json::Value {
    match reply {
        Value::Nil => serde_json::Value::Null,
        Value::Int(n) => (*n).into(),
        Value::Double(x) => (*x).into(),
        Value::Boolean(b) => (*b).into(),
        Value::Array(items) | Value::Set(items) => items.iter().map(json).collect(),
        Value::Map(pairs) => pairs
            .iter()
            .map(|(key, value)| serde_json::Value::Array(vec![json(key), json(value)]))
            .collect(),
        other => scalar(other).into(),
    }
}

fn scalar(reply: &Value) -> String {
    match reply {
        Value::Int(n) => n.to_string(),
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        Value::Okay => "OK".to_string(),
        Value::Double(x) => x.to_string(),
        Value::Boolean(b) => b.to_string(),
        other => format!("{other:?}"),
    }
}

//! dlock's Lua scripts and the one way they are run: through the client's connection,
//! resent once over a dropped connection (every script is safe to run twice), with the
//! server's refusals and DLOCKTYPE replies turned into typed errors in one place.

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::resend_check;

/// A script with the name its errors are reported under, in two forms: announcing
/// releases with `PUBLISH`, and with `SPUBLISH` for a cluster's sharded pub/sub (the
/// channel is in the lock's slot, so the script may publish on it).
pub(crate) struct LuaScript {
    name: &'static str,
    /// The files it was made of (paths relative to `src/`): its libraries, then its body.
    files: &'static [&'static str],
    /// The source, for `EVAL` in an acknowledged pipeline (see [`Call::run`]).
    code: String,
    plain: redis::Script,
    sharded: redis::Script,
    /// The script grants or extends a hold (it answers `{1, ...}` when it did): for a lock
    /// with `LockOptions::replicas`, it is sent together with a `WAIT` (see
    /// [`Call::run`]).
    grants: bool,
    /// Its body runs under `answer` (see [`LuaScript::new`]).
    wrapped: bool,
    /// A positive number it answers is a grant ([`Form::fence_alone`]).
    fence_alone: bool,
}

/// One of the library's scripts as it sends it (to a server without sharded pub/sub), for
/// tests that run it beside a model of it: see [`crate::__library_scripts`].
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryScript {
    /// The name its errors are reported under, unique among the library's scripts.
    pub name: &'static str,
    /// The files it is made of (paths relative to the crate's `src/`): its libraries, then
    /// its body.
    pub files: &'static [&'static str],
    /// The text sent: the helpers the body uses, then the body.
    pub code: String,
    /// It grants or extends holds (sent with a `WAIT` when replicas must acknowledge).
    pub grants: bool,
    /// Its body runs under `answer` (`lua/answer.lua`); an unwrapped one answers its
    /// refusals itself.
    pub wrapped: bool,
}

impl LibraryScript {
    /// The file of its body.
    pub fn body(&self) -> &'static str {
        self.files.last().copied().unwrap_or_default()
    }
}

/// Builds a `LazyLock<LuaScript>` from the shared libraries (`lua/answer.lua`,
/// `lua/fencing.lua`, `lua/prelude.lua`) and the given files (paths relative to `src/`):
/// every file but the last is a library of helpers, the last is the script's body. `bare`
/// leaves the shared libraries but `answer.lua` out (a bare script that draws fences names
/// `fencing.lua` itself). Only the helpers the body uses are sent, and the body runs under
/// `answer` (see [`LuaScript::new`]), but for `unwrapped`: a bare script whose body words
/// its own refusals (`worded` of `answer.lua`) and raises nothing a server can refuse. A
/// `grant unwrapped` script (the mutex's acquire) may also answer a grant as its bare
/// fence, a positive number, instead of `{1, fence}` (see [`Form::fence_alone`]).
macro_rules! lua_script {
    (grant unwrapped $name:literal, $($file:literal),+ $(,)?) => {
        $crate::script::lua_script!(@split (true, false, true), $name, ["lua/answer.lua"], $($file),+)
    };
    (unwrapped $name:literal, $($file:literal),+ $(,)?) => {
        $crate::script::lua_script!(@split (false, false, false), $name, ["lua/answer.lua"], $($file),+)
    };
    (grant bare $name:literal, $($file:literal),+ $(,)?) => {
        $crate::script::lua_script!(@split (true, true, false), $name, ["lua/answer.lua"], $($file),+)
    };
    (grant $name:literal, $($file:literal),+ $(,)?) => {
        $crate::script::lua_script!(@split (true, true, false), $name, ["lua/answer.lua", "lua/fencing.lua", "lua/prelude.lua"], $($file),+)
    };
    (bare $name:literal, $($file:literal),+ $(,)?) => {
        $crate::script::lua_script!(@split (false, true, false), $name, ["lua/answer.lua"], $($file),+)
    };
    ($name:literal, $($file:literal),+ $(,)?) => {
        $crate::script::lua_script!(@split (false, true, false), $name, ["lua/answer.lua", "lua/fencing.lua", "lua/prelude.lua"], $($file),+)
    };
    // Moves files to the libraries until one is left: the body. The form is (grants,
    // wrapped, fence_alone).
    (@split $form:tt, $name:literal, [$($library:literal),*], $next:literal, $($rest:literal),+) => {
        $crate::script::lua_script!(@split $form, $name, [$($library,)* $next], $($rest),+)
    };
    (@split ($grants:literal, $wrapped:literal, $fence_alone:literal), $name:literal, [$($library:literal),*], $body:literal) => {
        std::sync::LazyLock::new(|| {
            $crate::script::LuaScript::new(
                $name,
                &[$($library,)* $body],
                concat!("" $(, $crate::script::lua_script!(@src $library))*),
                $crate::script::lua_script!(@src $body),
                $crate::script::Form {
                    grants: $grants,
                    wrapped: $wrapped,
                    fence_alone: $fence_alone,
                },
            )
        })
    };
    (@src $file:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/", $file))
    };
}
pub(crate) use lua_script;

/// How a script is made and what its replies mean.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Form {
    /// It grants or extends holds (`lua_script!(grant ..)`), answering `{1, ...}` when it
    /// did.
    pub grants: bool,
    /// Its body runs under `answer` (all but `lua_script!(unwrapped ..)`).
    pub wrapped: bool,
    /// A positive number it answers is a grant too, with that fence
    /// (`lua_script!(grant unwrapped ..)`: a reply table costs the server about a tenth of
    /// a fenced grant; docs/decisions.md).
    pub fence_alone: bool,
}

impl LuaScript {
    /// A script of `body` after the helpers of `libraries` it uses, made as `form` says.
    ///
    /// Redis runs a script's whole text on every call, and each `local function` it
    /// passes costs a closure: the shared libraries' fifty helpers cost about 2 µs of the
    /// server's one thread per call, whether the script calls them or not. So only the
    /// helpers the body names are sent, with the helpers they name in turn
    /// ([`used_helpers`]).
    ///
    /// A wrapped body runs as a function under `answer` (`lua/answer.lua`, among
    /// `libraries`): what it raises is returned as the script's error reply, in the same
    /// words on every server (Redis 6.2 cannot send a raised error table). An unwrapped
    /// one is sent as it is, and answers its refusals itself.
    pub fn new(
        name: &'static str,
        files: &'static [&'static str],
        libraries: &str,
        body: &str,
        form: Form,
    ) -> LuaScript {
        let body = match form.wrapped {
            true => under_answer(body),
            false => body.to_string(),
        };
        let code = used_helpers(libraries, &body) + &body;
        let code = code.as_str();
        LuaScript {
            name,
            files,
            code: code.to_string(),
            plain: redis::Script::new(code),
            // Every announcement in the scripts is written `'PUBLISH'`.
            sharded: redis::Script::new(&code.replace("'PUBLISH'", "'SPUBLISH'")),
            grants: form.grants,
            wrapped: form.wrapped,
            fence_alone: form.fence_alone,
        }
    }

    /// The source of the form to run on `backend`.
    fn code(&self, backend: &Backend) -> String {
        match backend.sharded_pubsub() {
            true => self.code.replace("'PUBLISH'", "'SPUBLISH'"),
            false => self.code.clone(),
        }
    }

    /// The form to run on `backend`.
    pub fn for_backend(&self, backend: &Backend) -> &redis::Script {
        match backend.sharded_pubsub() {
            true => &self.sharded,
            false => &self.plain,
        }
    }

    /// What the library's script catalogue tells of it ([`crate::catalog`]).
    pub fn source(&self) -> LibraryScript {
        LibraryScript {
            name: self.name,
            files: self.files,
            code: self.code.clone(),
            grants: self.grants,
            wrapped: self.wrapped,
        }
    }

    /// Starts a call: add keys and arguments, then [`Call::run`].
    pub fn call(&self) -> Call<'_> {
        Call {
            script: self,
            // Most calls have a few of each: room for them without regrowing.
            keys: Vec::with_capacity(4),
            args: Vec::with_capacity(4),
            resend_before: None,
        }
    }
}

/// One script's call as the library makes it: the script, and its `KEYS` and `ARGV`
/// composed from Rust values in the order its `.lua` reads them. Each script has one
/// wrapper beside its `.lua` (in its kind's `scripts.rs`) that implements it, and every
/// caller, the test door ([`crate::__scripts`]) included, goes through that wrapper: a
/// script's positional arguments are written down once.
pub(crate) trait ScriptCall {
    /// The reply, as the library reads it.
    type Reply: redis::FromRedisValue;

    /// The script sent.
    fn script(&self) -> &'static LuaScript;

    /// Adds this call's keys and arguments to `call`, in the script's order.
    fn compose<'a>(&self, call: Call<'a>) -> Call<'a>;

    /// The call, ready to run (or to adjust first, e.g. [`Call::resend_within`]).
    fn call(&self) -> Call<'static> {
        self.compose(self.script().call())
    }

    /// Runs the call on `on` (see [`Call::run`]).
    async fn run(&self, on: &impl Target) -> Result<Self::Reply> {
        self.call().run(on).await
    }
}

/// A library script's call for a test crate ([`crate::__scripts`]): what the library
/// would send, run on the test's own connection.
#[doc(hidden)]
pub trait LibraryCall {
    /// The script, keys and arguments the library sends for this call.
    fn composed(&self) -> Composed;
}

impl<S: ScriptCall> LibraryCall for S {
    fn composed(&self) -> Composed {
        self.call().composed()
    }
}

/// A script call as the library composes it, in the form sent to a server without sharded
/// pub/sub (as [`crate::__library_scripts`] lists it). Not a stable API.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Composed {
    /// The script's name (as in [`LibraryScript::name`]).
    pub name: &'static str,
    /// The text sent (as in [`LibraryScript::code`]).
    pub code: String,
    /// `KEYS`, in order.
    pub keys: Vec<Vec<u8>>,
    /// `ARGV`, in order.
    pub args: Vec<Vec<u8>>,
}

impl Composed {
    /// `EVAL code numkeys keys... args...`: the call as one command, for a connection of
    /// either kind (`cmd.query(&mut conn)` or `cmd.query_async(&mut conn)`).
    pub fn eval(&self) -> redis::Cmd {
        let mut eval = redis::cmd("EVAL");
        eval.arg(&self.code)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        eval
    }

    /// `EVALSHA`, then `EVAL` when the server does not have the script yet (`NOSCRIPT`):
    /// as the library sends it (without its resend after a dropped connection, or a
    /// `WAIT`).
    pub async fn run<T: redis::FromRedisValue>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> redis::RedisResult<T> {
        match self.eval_sha().query_async(conn).await {
            Err(err) if is_no_script(&err) => self.eval().query_async(conn).await,
            reply => reply,
        }
    }

    /// [`Composed::run`] on a blocking connection.
    pub fn run_blocking<T: redis::FromRedisValue>(
        &self,
        conn: &mut impl redis::ConnectionLike,
    ) -> redis::RedisResult<T> {
        match self.eval_sha().query(conn) {
            Err(err) if is_no_script(&err) => self.eval().query(conn),
            reply => reply,
        }
    }

    fn eval_sha(&self) -> redis::Cmd {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg(redis::Script::new(&self.code).get_hash())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        eval
    }
}

fn is_no_script(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// One prepared script call.
pub(crate) struct Call<'a> {
    script: &'a LuaScript,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
    /// After this instant a dropped connection is not followed by a resend (see
    /// [`Call::resend_within`]).
    resend_before: Option<std::time::Instant>,
}

impl Call<'_> {
    /// The call as the test door hands it out (the form without sharded pub/sub).
    pub fn composed(&self) -> Composed {
        Composed {
            name: self.script.name,
            code: self.script.code.clone(),
            keys: self.keys.clone(),
            args: self.args.clone(),
        }
    }

    pub fn key<T: redis::ToRedisArgs>(mut self, key: T) -> Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub fn arg<T: redis::ToRedisArgs>(mut self, arg: T) -> Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// Resends after a dropped connection only if the connection is back while a record
    /// the script leaves for its resend still lives: `record_life` from now, counted as a
    /// lease is (less the drift allowance; [`ResendGate`]). For a script that grants
    /// nothing and is safe to run twice only while that record lives (a guarded batch's,
    /// a forced release's). Otherwise the call fails with the dropped connection's error:
    /// whether it ran is unknown.
    pub fn resend_within(mut self, record_life: std::time::Duration) -> Self {
        let now = std::time::Instant::now();
        self.resend_before = Some(crate::lease::valid_until(now, record_life));
        self
    }

    /// `EVALSHA` (or, `by_hash` false, `EVAL` with the source, which also loads it) of
    /// `backend`'s form of the script with this call's keys and arguments.
    fn eval(&self, backend: &Backend, by_hash: bool) -> redis::Cmd {
        // Sized up front: built for every request, a command grown argument by argument
        // reallocated its buffer several times.
        let parts = self.keys.iter().chain(&self.args);
        let (count, bytes) = parts.fold((3, 64), |(count, bytes), part| {
            (count + 1, bytes + part.len())
        });
        let mut eval = match by_hash {
            true => {
                let mut eval = redis::Cmd::with_capacity(count, bytes);
                eval.arg("EVALSHA")
                    .arg(self.script.for_backend(backend).get_hash());
                eval
            }
            false => {
                let code = self.script.code(backend);
                let mut eval = redis::Cmd::with_capacity(count, bytes + code.len());
                eval.arg("EVAL").arg(code);
                eval
            }
        };
        eval.arg(self.keys.len()).arg(&self.keys).arg(&self.args);
        eval
    }

    /// Sends `request(by_hash)` on `conn`, and with the source when the server does not
    /// have the script yet (NOSCRIPT).
    async fn send<T: redis::FromRedisValue, R: Request>(
        &self,
        conn: &mut crate::backend::Connection,
        request: impl Fn(bool) -> R,
    ) -> redis::RedisResult<T> {
        let reply = Self::send_once(conn, &request).await;
        if reply.is_ok() && resend_check::enabled() {
            // Boxed: the test suite's check would otherwise grow every call's future.
            Box::pin(self.check_resend(conn, &request)).await;
        }
        reply.map_err(one_server_error)
    }

    /// As a resend after a lost reply would: the same request again, which must change
    /// nothing (the suite's resend check, see [`resend_check`]).
    async fn check_resend<R: Request>(
        &self,
        conn: &mut crate::backend::Connection,
        request: &impl Fn(bool) -> R,
    ) {
        let once = resend_check::snapshot(conn, &self.keys).await;
        let _ = Self::send_once::<redis::Value, R>(conn, request).await;
        let twice = resend_check::snapshot(conn, &self.keys).await;
        resend_check::compare(self.script.name, &once, &twice);
    }

    async fn send_once<T: redis::FromRedisValue, R: Request>(
        conn: &mut crate::backend::Connection,
        request: &impl Fn(bool) -> R,
    ) -> redis::RedisResult<T> {
        match request(true).query(conn).await {
            Err(err) if is_no_script(&err) => request(false).query(conn).await,
            reply => reply,
        }
    }

    /// Runs the script on `backend`'s connection, as is (no `WAIT`): the renewer's batches.
    /// One command, not a pipeline of one: a pipeline costs the client more per call.
    pub async fn run_on<T: redis::FromRedisValue>(
        &self,
        backend: &Backend,
    ) -> redis::RedisResult<T> {
        self.send(&mut backend.connection(), |by_hash| {
            self.eval(backend, by_hash)
        })
        .await
    }

    /// Runs the script. A request that met a dropped connection is sent once more on the
    /// reconnected one (every dlock script may run twice: acquires recognise their own
    /// token, releases and extends compare it); timeouts are not retried here.
    ///
    /// For a lock with `LockOptions::replicas`, a script that grants or extends is sent in
    /// one pipeline with `WAIT count timeout`: both on one connection, in order, so the
    /// `WAIT` covers exactly this write (on a cluster, on the node that ran it). When the
    /// script granted and too few replicas acknowledged, the call fails with
    /// [`Error::NotReplicated`]; the caller gives the hold back.
    pub async fn run<T: redis::FromRedisValue>(&self, on: &impl Target) -> Result<T> {
        let backend = on.backend();
        let replicas = on.replicas().filter(|_| self.script.grants);
        let Some(replicas) = replicas else {
            let gate = self.resend_before.map(|deadline| ResendGate {
                deadline,
                backend,
                key: self.keys.first().map_or(&[][..], Vec::as_slice),
            });
            return resent_once(self.script.name, gate, || self.run_on(backend))
                .await
                .map_err(|err| script_error(self.script.name, err));
        };
        // A script with a resend deadline grants nothing (a guarded batch), so it never
        // comes here.
        debug_assert!(self.resend_before.is_none());
        // Boxed: only grants and extends with replica acknowledgement come here, and
        // inline this branch would grow every call's future.
        let (reply, acknowledged) = Box::pin(resent_once(self.script.name, None, || {
            self.with_wait(backend, replicas)
        }))
        .await
        .map_err(|err| script_error(self.script.name, err))?;
        let granted = match &reply {
            redis::Value::Array(items) => matches!(items.first(), Some(redis::Value::Int(1))),
            redis::Value::Int(fence) => self.script.fence_alone && *fence > 0,
            _ => false,
        };
        if granted && acknowledged < replicas.count {
            let key = self
                .keys
                .first()
                .map(|k| String::from_utf8_lossy(k).into_owned());
            let name = key.unwrap_or_default();
            crate::observe::not_replicated(&name, replicas.count, acknowledged);
            return Err(Error::NotReplicated {
                name,
                wanted: replicas.count,
                acknowledged,
            });
        }
        redis::from_redis_value(reply)
            .map_err(|err| script_error(self.script.name, redis::RedisError::from(err)))
    }

    /// The script and a `WAIT` in one pipeline on a connection for acknowledged writes;
    /// the script is loaded (with `EVAL`, in the same pipeline) when the server does not
    /// have it yet. Returns the script's reply and how many replicas acknowledged.
    pub async fn with_wait(
        &self,
        backend: &Backend,
        replicas: crate::options::Replicas,
    ) -> redis::RedisResult<(redis::Value, u32)> {
        self.send(&mut backend.acknowledged().await?, |by_hash| {
            let mut pipeline = redis::pipe();
            pipeline.add_command(self.eval(backend, by_hash));
            pipeline
                .cmd("WAIT")
                .arg(replicas.count)
                .arg(replicas.timeout.as_millis().max(1) as u64);
            pipeline
        })
        .await
    }
}

/// A request a script call sends: its `EVALSHA` alone, or in a pipeline with a `WAIT`.
trait Request {
    fn query<T: redis::FromRedisValue>(
        &self,
        conn: &mut crate::backend::Connection,
    ) -> impl std::future::Future<Output = redis::RedisResult<T>>;
}

// The redis crate's futures as they are: an `async fn` around each would be a layer more
// of future to build and copy on every call.
impl Request for redis::Cmd {
    fn query<T: redis::FromRedisValue>(
        &self,
        conn: &mut crate::backend::Connection,
    ) -> impl std::future::Future<Output = redis::RedisResult<T>> {
        self.query_async(conn)
    }
}

impl Request for redis::Pipeline {
    fn query<T: redis::FromRedisValue>(
        &self,
        conn: &mut crate::backend::Connection,
    ) -> impl std::future::Future<Output = redis::RedisResult<T>> {
        self.query_async(conn)
    }
}

/// Where a script runs: a backend, and the replica acknowledgement that the handle's
/// grants and extends wait for. The client handle implements it; scripts know no handle.
pub(crate) trait Target {
    /// The deployment the script runs on.
    fn backend(&self) -> &Backend;
    /// What grants and extends wait for (`LockOptions::replicas`), if anything.
    fn replicas(&self) -> Option<crate::options::Replicas>;
}

/// A pipeline's error wraps the failing command's own; with the script the only command
/// that can fail, its error is unwrapped, so its code (`DLOCKTYPE`, `NOPERM`, ...) reads
/// as it would outside a pipeline.
fn one_server_error(err: redis::RedisError) -> redis::RedisError {
    match err.clone().into_server_errors() {
        Some(errors) if errors.len() == 1 => redis::RedisError::from(errors[0].1.clone()),
        _ => err,
    }
}

/// When a request that is safe to run twice only for a while may be sent again: the
/// connection is back (a read of `key`, routed as the request is), and `deadline` has not
/// passed then. Checked after the reconnection, not before it: a reconnect can take
/// seconds (connect timeouts, retries), and the resend runs only once it is done.
pub(crate) struct ResendGate<'a> {
    pub deadline: std::time::Instant,
    pub backend: &'a Backend,
    pub key: &'a [u8],
}

impl ResendGate<'_> {
    async fn open(&self) -> bool {
        let mut exists = redis::cmd("EXISTS");
        exists.arg(self.key);
        let reconnected = exists
            .query_async::<i64>(&mut self.backend.connection())
            .await
            .is_ok();
        reconnected && std::time::Instant::now() < self.deadline
    }
}

/// Sends a request, and once more on the reconnected connection when the first met a
/// dropped one (when a `gate` is given, only if it opens). Only for requests that are
/// safe to run twice (while the gate is open); timeouts are not resent (the caller's wait
/// decides).
pub(crate) async fn resent_once<T, F, Fut>(
    what: &str,
    gate: Option<ResendGate<'_>>,
    send: F,
) -> redis::RedisResult<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = redis::RedisResult<T>>,
{
    let reply = send().await;
    match &reply {
        Err(err) if !err.is_timeout() && (err.is_connection_dropped() || err.is_io_error()) => {
            if let Some(gate) = gate {
                if !gate.open().await {
                    tracing::debug!(request = what, error = %err, "connection dropped, and not back before the resend's deadline");
                    return reply;
                }
            }
            tracing::debug!(request = what, error = %err, "connection dropped; sending again");
            send().await
        }
        _ => reply,
    }
}

/// Maps a script's error: DLOCKTYPE (see prelude.lua) becomes [`Error::WrongType`], an
/// unexpected reply shape a bug report, the rest as any Redis error.
fn script_error(name: &str, err: redis::RedisError) -> Error {
    // Usually the error code itself; a DLOCKTYPE re-raised through pcall may arrive
    // behind a position ("ERR user_script:12: DLOCKTYPE ...").
    let text = match (err.code(), err.detail()) {
        (Some("DLOCKTYPE"), Some(detail)) => Some(detail.to_string()),
        (_, Some(detail)) => detail
            .find("DLOCKTYPE ")
            .map(|at| detail[at + "DLOCKTYPE ".len()..].to_string()),
        _ => None,
    };
    if let Some(wrong_type) = text.as_deref().and_then(parse_wrong_type) {
        return wrong_type;
    }
    if err.kind() == redis::ErrorKind::UnexpectedReturnType || err.kind() == redis::ErrorKind::Parse
    {
        return Error::unexpected_reply(format!("{name} script: {err}"));
    }
    Error::from_redis(&format!("the {name} script"), err)
}

/// `<found> <wanted> <key>[ script: ...]` → WrongType.
fn parse_wrong_type(detail: &str) -> Option<Error> {
    let detail = match detail.rfind(" script: ") {
        Some(at) => &detail[..at],
        None => detail,
    };
    let mut parts = detail.splitn(3, ' ');
    let (found, wanted, key) = (parts.next()?, parts.next()?, parts.next()?);
    Some(Error::WrongType {
        key: key.to_string(),
        what: found_not_wanted(Some(found), wanted),
    })
}

/// `body` as the function `answer` runs (see `lua/answer.lua`). A script's body is a Lua
/// chunk, which is a function already: its `return`s and `local`s mean the same inside one.
pub(crate) fn under_answer(body: &str) -> String {
    let newline = if body.ends_with('\n') { "" } else { "\n" };
    format!("return answer(function()\n{body}{newline}end)\n")
}

/// The helpers of `libraries` that `body` uses, directly or through other helpers, in
/// the libraries' order, each with the comment above it.
///
/// A library holds only top-level `local` definitions (`local function name(..)` or
/// `local name = ..`), each starting at column 0 and ending where the next one's comment
/// or definition starts; anything else at column 0 but `end` or `}` is refused (a
/// statement there would run in every script, and dropping it would change what one
/// does). A name is used when it appears as a word outside a comment: a word that only
/// looks like one (in a string) keeps a helper needlessly, never drops one.
pub(crate) fn used_helpers(libraries: &str, body: &str) -> String {
    let definitions = definitions(libraries);
    let mut used = vec![false; definitions.len()];
    let mut pending: Vec<&str> = words(body).collect();
    while let Some(word) = pending.pop() {
        // Each name is defined once (checked in `definitions`).
        if let Some(at) = definitions.iter().position(|(name, _)| *name == word) {
            if !used[at] {
                used[at] = true;
                pending.extend(words(definitions[at].1));
            }
        }
    }
    definitions
        .iter()
        .zip(used)
        .filter(|(_, used)| *used)
        .map(|((_, text), _)| *text)
        .collect()
}

/// The definitions of `libraries`, as (name, text). Panics on a library that is not made
/// of definitions only, or that defines a name twice: the scripts are fixed at build time
/// and every one is built by the tests.
fn definitions(libraries: &str) -> Vec<(&str, &str)> {
    let lines: Vec<&str> = libraries.split_inclusive('\n').collect();
    let is_comment = |line: &str| line.trim_start().starts_with("--");
    // Where each definition starts: its `local` line, or the comment lines right above it.
    let mut starts = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        if line.starts_with("local ") {
            let mut start = at;
            while start > 0 && is_comment(lines[start - 1]) && !starts.contains(&(start - 1)) {
                start -= 1;
            }
            starts.push(start);
        }
    }
    let offset = |line: usize| lines[..line].iter().map(|l| l.len()).sum::<usize>();
    let header = &lines[..starts.first().copied().unwrap_or(lines.len())];
    assert!(
        header
            .iter()
            .all(|line| line.trim().is_empty() || is_comment(line)),
        "a Lua library starts with something other than comments and definitions"
    );
    let mut definitions: Vec<(&str, &str)> = Vec::new();
    for (nth, &start) in starts.iter().enumerate() {
        let end = starts.get(nth + 1).copied().unwrap_or(lines.len());
        let text = &libraries[offset(start)..offset(end)];
        let mut own = lines[start..end].iter().skip_while(|line| is_comment(line));
        let first = own.next().expect("a definition has its `local` line");
        for line in own {
            let top_level = !line.starts_with([' ', '\t', '\n', '\r']);
            assert!(
                !top_level || line.starts_with("end") || line.starts_with('}') || is_comment(line),
                "a statement at the top level of a Lua library: {line}"
            );
        }
        let declared = first["local ".len()..].trim_start();
        let declared = declared.strip_prefix("function ").unwrap_or(declared);
        let name = words(declared)
            .next()
            .expect("a `local` line names what it defines");
        assert!(
            definitions.iter().all(|(other, _)| *other != name),
            "the Lua libraries of one script define `{name}` twice"
        );
        definitions.push((name, text));
    }
    definitions
}

/// The words (Lua names and numbers) of `code` outside its comments (no dlock script has
/// `--` inside a string).
fn words(code: &str) -> impl Iterator<Item = &str> {
    code.lines()
        .map(|line| line.split("--").next().unwrap_or(""))
        .flat_map(|line| line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|word| !word.is_empty())
}

/// Words for what a key holds.
fn describe(kind: &str) -> String {
    match kind {
        "string" => {
            "a string (a dlock mutex, fair mutex or write lock, or another client's lock)".into()
        }
        "counter" => "an integer fencing counter".into(),
        "text" => "a string that is not a number".into(),
        "huge" => "a fencing counter at or beyond 2^53 (fences stay below it to stay exact)".into(),
        "queue" => "a dlock waiter queue (a sorted set)".into(),
        "reentrant" => "a dlock reentrant mutex".into(),
        "read" => "the read holds of a dlock read-write lock".into(),
        "semaphore" => "the permits of a dlock semaphore".into(),
        "entries" => "dlock read holds or semaphore permits".into(),
        "hash" => "a hash that dlock did not write".into(),
        // Redis's own types (list, set, stream, ...), found where a lock should be: data
        // dlock never writes there.
        "zset" => "a Redis sorted set".into(),
        other => format!("a Redis {other}"),
    }
}

/// [`Error::WrongType`]'s words: what the key holds (`None`: it could not be told), and
/// what the lock needs there.
pub(crate) fn found_not_wanted(found: Option<&str>, wanted: &str) -> String {
    let found = found.map_or_else(|| "another type of value".to_string(), describe);
    format!("{found}, not {}", describe_wanted(wanted))
}

/// Words for what a script needs at a key: a found kind's words, but for the wanted
/// kinds no key is found holding ('lock', 'hash').
fn describe_wanted(wanted: &str) -> String {
    match wanted {
        // A forced release takes any kind away.
        "lock" => "a lock of any dlock kind".into(),
        // The renewal of a hold kept in a hash.
        "hash" => "the hash of a dlock reentrant mutex, read holds or semaphore permits".into(),
        // A reader and a writer both need a read-write lock's keys (its read holds, or
        // its write hold's string): a writer is not to be told of read holds.
        "read" => "a dlock read-write lock".into(),
        other => describe(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_type_words_name_what_is_there_in_words() {
        assert_eq!(
            found_not_wanted(Some("list"), "lock"),
            "a Redis list, not a lock of any dlock kind"
        );
        assert_eq!(
            found_not_wanted(Some("zset"), "read"),
            "a Redis sorted set, not a dlock read-write lock"
        );
        assert!(found_not_wanted(Some("semaphore"), "hash").ends_with("semaphore permits"));
        assert_eq!(
            found_not_wanted(None, "reentrant"),
            "another type of value, not a dlock reentrant mutex"
        );
    }

    #[test]
    fn wrong_type_detail_is_parsed_with_or_without_the_script_suffix() {
        for detail in [
            "read string my lock",
            "read string my lock script: 0123abcd, on @user_script:12.",
        ] {
            match parse_wrong_type(detail) {
                Some(Error::WrongType { key, what }) => {
                    assert_eq!(key, "my lock");
                    assert!(what.starts_with("the read holds"), "{what}");
                    assert!(!what.contains("delete") && !what.contains("remove"));
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// Every library set a script is built from: made of definitions only, each name
    /// defined once (the checks `definitions` makes when a script is built).
    #[test]
    fn the_libraries_are_definitions_only() {
        let shared = concat!(
            include_str!("lua/fencing.lua"),
            include_str!("lua/prelude.lua")
        );
        let sets = [
            shared.to_string(),
            format!("{shared}{}", include_str!("lua/entries.lua")),
            format!(
                "{shared}{}{}",
                include_str!("lua/entries.lua"),
                include_str!("renew/holds.lua")
            ),
            format!(
                "{shared}{}{}{}",
                include_str!("queue/queue.lua"),
                include_str!("lua/entries.lua"),
                include_str!("rwlock/rwlock.lua")
            ),
            format!(
                "{}{}",
                include_str!("mutex/bare.lua"),
                include_str!("lua/fencing.lua")
            ),
        ];
        for set in sets {
            assert!(definitions(&set).len() > 10);
        }
    }

    #[test]
    fn a_script_gets_the_helpers_it_names_and_theirs() {
        let libraries = "-- header\n\nlocal A = 1\n\n-- uses A\nlocal function a()\n  return A\nend\n\
                         -- unused\nlocal function b()\n  return 2\nend\n-- c, which b() would not call\n\
                         local function c(x)\n  return a() + x -- not b()\nend\n";
        let kept = used_helpers(libraries, "return c(1) -- b()\n");
        assert_eq!(
            kept,
            "local A = 1\n\n-- uses A\nlocal function a()\n  return A\nend\n\
             -- c, which b() would not call\nlocal function c(x)\n  return a() + x -- not b()\nend\n"
        );
        assert_eq!(used_helpers(libraries, "return 1"), "");
    }

    #[test]
    #[should_panic(expected = "top level")]
    fn a_statement_in_a_library_is_refused() {
        used_helpers(
            "local function a()\nend\nredis.call('DEL', KEYS[1])\n",
            "return a()",
        );
    }
}

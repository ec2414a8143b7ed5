//! A TCP proxy on loopback between a client and a `redis-server`, for faults the kernel
//! here cannot inject (no `tc netem`): replies lost together with their connection,
//! replies delayed, a silent partition (black hole), a stalled link (pause) and a node
//! that is down but quick to tell (refuse).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// Forwards every connection made to [`Proxy::url`] to a server's port.
///
/// Faults can be switched on and off at any time, on every connection at once:
/// - [`Proxy::drop_next_replies`]: a reply lost with its connection;
/// - [`Proxy::delay_replies`]: replies late;
/// - [`Proxy::black_hole`]: nothing passes, nothing is answered, nothing is closed;
/// - [`Proxy::pause`] / [`Proxy::resume`]: nothing passes until resumed, then all of it;
/// - [`Proxy::refuse`]: every connection closed at once.
///
/// When several are on, [`Proxy::refuse`] wins over [`Proxy::black_hole`], which wins over
/// [`Proxy::pause`]; delays add to a pause.
///
/// Dropping it stops accepting, resumes a pause and closes black-holed connections (so that
/// none of its threads waits forever); other connections end with their peers.
pub struct Proxy {
    port: u16,
    state: Arc<State>,
}

type Matcher = fn(&[u8]) -> bool;

/// Server-to-client chunks on their way to the delivery thread, each with when it is due.
type Delayed = mpsc::Sender<(Instant, Vec<u8>)>;

struct State {
    /// Server-to-client reads still to swallow, each closing its connection.
    drop_replies: AtomicU32,
    /// Which replies count (all when `None`).
    matcher: Mutex<Option<Matcher>>,
    /// Replies swallowed so far.
    dropped: AtomicU32,
    /// How long every server-to-client byte is held back, in microseconds.
    delay_us: AtomicU64,
    stopped: AtomicBool,
    /// The switches and the open connections, under one lock so that a connection is
    /// never admitted past a switch being thrown.
    control: Mutex<Control>,
    /// Signalled whenever a switch changes or a connection is silenced, for the threads
    /// waiting out a pause.
    changed: Condvar,
    /// Per-connection threads still running.
    threads: AtomicUsize,
}

#[derive(Default)]
struct Control {
    paused: bool,
    black_hole: bool,
    refusing: bool,
    /// Open connections by id; each removes itself when its client-to-server thread ends.
    conns: HashMap<u64, Arc<Conn>>,
    next_id: u64,
}

/// One client connection, with handles to its sockets for closing it from outside.
struct Conn {
    client: TcpStream,
    /// `None` for a connection accepted into a black hole: the server never hears of it.
    server: Option<TcpStream>,
    /// Nothing passes any more (black-holed or closed); what arrives is read and dropped.
    silenced: AtomicBool,
}

impl Conn {
    /// Stops all traffic and wakes every thread of the connection: their reads end.
    fn close(&self) {
        self.silenced.store(true, Ordering::Release);
        let _ = self.client.shutdown(Shutdown::Both);
        if let Some(server) = &self.server {
            let _ = server.shutdown(Shutdown::Both);
        }
    }
}

impl Proxy {
    /// Starts forwarding a free loopback port to `127.0.0.1:target_port`.
    pub fn start(target_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy port");
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(State {
            drop_replies: AtomicU32::new(0),
            matcher: Mutex::new(None),
            dropped: AtomicU32::new(0),
            delay_us: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            control: Mutex::new(Control::default()),
            changed: Condvar::new(),
            threads: AtomicUsize::new(0),
        });
        let shared = state.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if shared.stopped.load(Ordering::Acquire) {
                    return;
                }
                match client {
                    Ok(client) => admit(&shared, client, target_port),
                    // E.g. out of file descriptors: wait for some to be freed rather than
                    // spin on an error that persists.
                    Err(_) => thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Proxy { port, state }
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The proxy's own port on 127.0.0.1 (e.g. for a server to announce itself by).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The next `n` replies the server sends (on any connection) are swallowed, and the
    /// connection each one was meant for is closed: the command ran, the client never
    /// hears of it.
    pub fn drop_next_replies(&self, n: u32) {
        *self.state.matcher.lock().unwrap() = None;
        self.state.drop_replies.store(n, Ordering::Release);
    }

    /// Like [`Proxy::drop_next_replies`], counting only replies for which `matches` is
    /// true (e.g. the grants of an acquire script); others pass.
    pub fn drop_next_replies_where(&self, n: u32, matches: fn(&[u8]) -> bool) {
        *self.state.matcher.lock().unwrap() = Some(matches);
        self.state.drop_replies.store(n, Ordering::Release);
    }

    /// How many replies were swallowed so far.
    pub fn dropped(&self) -> u32 {
        self.state.dropped.load(Ordering::Acquire)
    }

    /// Holds every reply back by `delay` from when the server sent it (zero: no delay).
    /// Replies keep their order; the delay applies to what the server sends from now on.
    pub fn delay_replies(&self, delay: Duration) {
        self.state
            .delay_us
            .store(delay.as_micros() as u64, Ordering::Release);
    }

    /// A silent network partition while `on`: connections are still accepted and what
    /// clients send is read, but nothing is forwarded in either direction, nothing is
    /// answered and nothing is closed, so a client only finds out through its own
    /// timeouts. Connections open when it starts go silent too, and what they had held
    /// back (a pause, a delay) is lost.
    ///
    /// Turned off, new connections work again, and every connection caught in the black
    /// hole is closed (rather than resumed: the server may have dropped it meanwhile, and
    /// a client that sees a dead connection reconnects, as after a real partition).
    pub fn black_hole(&self, on: bool) {
        let mut control = self.state.lock();
        control.black_hole = on;
        for conn in control.conns.values() {
            if on {
                conn.silenced.store(true, Ordering::Release);
            } else if conn.silenced.load(Ordering::Acquire) {
                conn.close();
            }
        }
        // Wakes threads waiting out a pause: what they hold is now to be dropped.
        self.state.changed.notify_all();
    }

    /// Stalls the link: from now on nothing passes in either direction, on every
    /// connection, until [`Proxy::resume`]. Nothing is lost: the proxy holds what it read
    /// from a client and reads no more from it (so the client's writes end up blocked once
    /// the socket buffers are full), and holds the server's replies. New connections are
    /// accepted and held too (the server sees them connect, nothing more).
    pub fn pause(&self) {
        self.state.lock().paused = true;
    }

    /// Ends a [`Proxy::pause`]: everything held is delivered, in order (replies still
    /// delayed by [`Proxy::delay_replies`] when their delay is over).
    pub fn resume(&self) {
        self.state.lock().paused = false;
        self.state.changed.notify_all();
    }

    /// A node that is down but quick to tell, while `on`: every open connection is closed
    /// now, and each new one as soon as it is accepted, so clients see their connection
    /// end at once (unlike [`Proxy::black_hole`]). Turned off, new connections work again.
    pub fn refuse(&self, on: bool) {
        let mut control = self.state.lock();
        control.refusing = on;
        if on {
            for conn in control.conns.values() {
                conn.close();
            }
        }
        self.state.changed.notify_all();
    }

    /// Connections open through the proxy (including black-holed ones).
    #[cfg(test)]
    fn open_connections(&self) -> usize {
        self.state.lock().conns.len()
    }

    /// Connections taken in so far (not counting refused ones).
    #[cfg(test)]
    fn admitted(&self) -> u64 {
        self.state.lock().next_id
    }

    /// Threads serving connections that are still running.
    #[cfg(test)]
    fn connection_threads(&self) -> usize {
        self.state.threads.load(Ordering::Acquire)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::Release);
        {
            // Nobody is left to lift these: threads waiting on them would wait forever.
            let mut control = self.state.lock();
            control.paused = false;
            control.black_hole = false;
            for conn in control.conns.values() {
                if conn.silenced.load(Ordering::Acquire) {
                    conn.close();
                }
            }
            self.state.changed.notify_all();
        }
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Control> {
        // A panicking test thread must not take the proxy's other threads down with it.
        self.control
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits out a pause; true if a chunk of `conn` may pass now, false if it is to be
    /// dropped (the connection is black-holed or closed).
    fn pass(&self, conn: &Conn) -> bool {
        let mut control = self.lock();
        loop {
            if conn.silenced.load(Ordering::Acquire) {
                return false;
            }
            if !control.paused {
                return true;
            }
            control = self
                .changed
                .wait(control)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// Runs `work` on a thread of its own, counted in `threads` while it runs.
    fn spawn(self: &Arc<Self>, work: impl FnOnce() + Send + 'static) {
        struct Running(Arc<State>);
        impl Drop for Running {
            fn drop(&mut self) {
                self.0.threads.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.threads.fetch_add(1, Ordering::AcqRel);
        let running = Running(self.clone());
        thread::spawn(move || {
            let _running = running;
            work();
        });
    }
}

/// Takes a new client connection in, as the switches say: closed when refusing, read and
/// ignored in a black hole, otherwise forwarded to the server.
fn admit(state: &Arc<State>, client: TcpStream, target_port: u16) {
    {
        let mut control = state.lock();
        if control.refusing {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        if control.black_hole {
            let Ok(handle) = client.try_clone() else {
                return;
            };
            let conn = Arc::new(Conn {
                client: handle,
                server: None,
                silenced: AtomicBool::new(true),
            });
            let id = register(&mut control, conn.clone());
            let shared = state.clone();
            state.spawn(move || forward_requests(shared, conn, id, client, None));
            return;
        }
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let clones = (|| {
        Ok::<_, std::io::Error>((
            client.try_clone()?,
            client.try_clone()?,
            server.try_clone()?,
            server.try_clone()?,
        ))
    })();
    let Ok((client_handle, client_write, server_handle, server_write)) = clones else {
        let _ = (
            client.shutdown(Shutdown::Both),
            server.shutdown(Shutdown::Both),
        );
        return;
    };
    let conn = Arc::new(Conn {
        client: client_handle,
        server: Some(server_handle),
        silenced: AtomicBool::new(false),
    });
    let id = {
        // The switches again: one may have been thrown while this connected.
        let mut control = state.lock();
        if control.refusing {
            conn.close();
            return;
        }
        conn.silenced.store(control.black_hole, Ordering::Release);
        register(&mut control, conn.clone())
    };
    let shared = state.clone();
    let requests = conn.clone();
    state.spawn(move || forward_requests(shared, requests, id, client, Some(server_write)));
    // Server to client: may swallow a reply and cut the connection, or hold replies back
    // (a second thread writes each when its delay is over, so delays do not add up).
    let (delayed, due) = mpsc::channel::<(Instant, Vec<u8>)>();
    let shared = state.clone();
    let replies = conn.clone();
    state.spawn(move || deliver(shared, replies, due, client_write));
    let shared = state.clone();
    state.spawn(move || forward_replies(shared, conn, server, delayed));
}

fn register(control: &mut Control, conn: Arc<Conn>) -> u64 {
    let id = control.next_id;
    control.next_id += 1;
    control.conns.insert(id, conn);
    id
}

/// Client to server, until either side closes. A silenced connection is still read (as a
/// partition swallows what is sent into it) but nothing reaches the server.
fn forward_requests(
    state: Arc<State>,
    conn: Arc<Conn>,
    id: u64,
    mut from: TcpStream,
    mut to: Option<TcpStream>,
) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !state.pass(&conn) {
            continue;
        }
        let Some(to) = to.as_mut() else { continue };
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    // The client's close is traffic too: it waits out a pause, after what came before it.
    state.pass(&conn);
    // Ends the other threads of the connection: the reply reader sees its socket closed,
    // then the delivery thread its channel.
    conn.close();
    state.lock().conns.remove(&id);
}

/// Server to client, through the delivery thread, until either side closes.
fn forward_replies(state: Arc<State>, conn: Arc<Conn>, mut from: TcpStream, delayed: Delayed) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if conn.silenced.load(Ordering::Acquire) {
            // Lost in a black hole, and not counted as a dropped reply.
            continue;
        }
        let counts = match *state.matcher.lock().unwrap() {
            Some(matches) => matches(&buffer[..n]),
            None => true,
        };
        let swallow = counts
            && state
                .drop_replies
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                    left.checked_sub(1)
                })
                .is_ok();
        if swallow {
            state.dropped.fetch_add(1, Ordering::AcqRel);
            // Cut the connection now, whatever is still held back for it.
            conn.close();
            break;
        }
        // Through the delivery thread, so a delay switched off keeps the order.
        let due = Instant::now() + Duration::from_micros(state.delay_us.load(Ordering::Acquire));
        if delayed.send((due, buffer[..n].to_vec())).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    // The delivery thread closes the client side once it wrote what is held back (it
    // ends when `delayed` is dropped here).
}

/// Writes each chunk to the client once its delay is over and no pause holds it, in order.
fn deliver(
    state: Arc<State>,
    conn: Arc<Conn>,
    due: mpsc::Receiver<(Instant, Vec<u8>)>,
    mut to: TcpStream,
) {
    for (at, chunk) in due {
        let wait = at.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            thread::sleep(wait);
        }
        if !state.pass(&conn) {
            // Silenced: drop what comes until the reply reader ends.
            continue;
        }
        if to.write_all(&chunk).is_err() {
            break;
        }
    }
    // The server's close waits out a pause too, after the replies before it.
    state.pass(&conn);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::RedisServer;

    /// How long a check waits to conclude that nothing comes: the faults below hold
    /// traffic for good, so this only bounds the test's length, never decides its outcome.
    const SILENCE: Duration = Duration::from_millis(300);

    /// How long something that must come may take: far above what it takes, so that a
    /// loaded machine does not fail the test.
    const PATIENCE: Duration = Duration::from_secs(10);

    /// A connection through the proxy, each step bounded by `timeout`.
    fn connect(proxy: &Proxy, timeout: Duration) -> redis::RedisResult<redis::Connection> {
        let conn = redis::Client::open(proxy.url())?.get_connection_with_timeout(timeout)?;
        conn.set_read_timeout(Some(timeout))?;
        conn.set_write_timeout(Some(timeout))?;
        Ok(conn)
    }

    fn ping(conn: &mut redis::Connection) -> redis::RedisResult<String> {
        redis::cmd("PING").query(conn)
    }

    /// PING on a new connection (whose set-up already talks to the server).
    fn ping_new(proxy: &Proxy, timeout: Duration) -> redis::RedisResult<String> {
        ping(&mut connect(proxy, timeout)?)
    }

    /// A plain socket through the proxy, for exact control over what is sent and read.
    fn raw(proxy: &Proxy) -> TcpStream {
        TcpStream::connect(("127.0.0.1", proxy.port)).expect("connect to the proxy")
    }

    /// Reads as many bytes as `expected` has, and compares.
    fn expect_reply(stream: &mut TcpStream, expected: &str) {
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut reply = vec![0u8; expected.len()];
        stream.read_exact(&mut reply).expect("the reply comes");
        assert_eq!(String::from_utf8_lossy(&reply), expected);
    }

    fn assert_nothing_arrives(stream: &mut TcpStream) {
        stream.set_read_timeout(Some(SILENCE)).unwrap();
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            other => panic!("expected nothing within {SILENCE:?}, got {other:?}"),
        }
    }

    fn assert_closed(stream: &mut TcpStream) {
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            Ok(0) => {}
            Err(err)
                if !matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            other => panic!("expected the connection closed, got {other:?}"),
        }
    }

    /// Waits until the proxy has taken in `n` connections: it accepts in the background, and
    /// the switches apply from there.
    fn wait_admitted(proxy: &Proxy, n: u64) {
        crate::server::poll(
            "the proxy takes the connections in",
            PATIENCE,
            || match proxy.admitted() {
                admitted if admitted >= n => Ok(()),
                admitted => Err(format!("{admitted} of {n}")),
            },
        );
    }

    /// Once its clients are gone, the proxy keeps no connection and no thread for them.
    fn assert_all_threads_end(proxy: &Proxy) {
        crate::server::poll(
            "every connection through the proxy and its threads end",
            PATIENCE,
            || match (proxy.open_connections(), proxy.connection_threads()) {
                (0, 0) => Ok(()),
                (conns, threads) => Err(format!("{conns} connection(s), {threads} thread(s)")),
            },
        );
    }

    #[test]
    fn black_hole_answers_nothing_until_lifted_then_closes_what_it_caught() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let mut caught = connect(&proxy, PATIENCE).unwrap();
        assert_eq!(ping(&mut caught).unwrap(), "PONG", "no fault: answered");

        proxy.black_hole(true);
        caught.set_read_timeout(Some(SILENCE)).unwrap();
        let err = ping(&mut caught).unwrap_err();
        assert!(err.is_timeout(), "an open connection goes silent: {err}");
        let err = ping_new(&proxy, SILENCE).unwrap_err();
        assert!(err.is_timeout(), "a new connection is silent: {err}");
        let mut sent = raw(&proxy);
        sent.write_all(b"SET lost 1\r\n").unwrap();
        wait_admitted(&proxy, 3);
        assert_nothing_arrives(&mut sent);
        let lost: Option<String> = server.cmd(&["GET", "lost"]);
        assert_eq!(
            lost, None,
            "what is sent into the black hole never reaches the server"
        );
        let pong: String = server.cmd(&["PING"]);
        assert_eq!(pong, "PONG", "the server itself is fine");

        proxy.black_hole(false);
        assert_eq!(ping_new(&proxy, PATIENCE).unwrap(), "PONG");
        caught.set_read_timeout(Some(PATIENCE)).unwrap();
        let err = ping(&mut caught).unwrap_err();
        assert!(!err.is_timeout(), "a caught connection is closed: {err}");
        assert_closed(&mut sent);
        let lost: Option<String> = server.cmd(&["GET", "lost"]);
        assert_eq!(lost, None, "dropped, not held");

        drop((caught, sent));
        assert_all_threads_end(&proxy);
    }

    #[test]
    fn pause_holds_a_ping_until_resume() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let mut conn = connect(&proxy, PATIENCE).unwrap();
        assert_eq!(ping(&mut conn).unwrap(), "PONG", "no fault: answered");

        proxy.pause();
        conn.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let err = ping(&mut conn).unwrap_err();
        assert!(err.is_timeout(), "paused: no answer: {err}");

        proxy.resume();
        conn.set_read_timeout(Some(PATIENCE)).unwrap();
        // The late reply to the first PING is skipped by the client, then this one's comes.
        assert_eq!(
            ping(&mut conn).unwrap(),
            "PONG",
            "the same connection answers"
        );
        drop(conn);
        assert_all_threads_end(&proxy);
    }

    #[test]
    fn pause_holds_requests_and_replies_and_delivers_them_in_order() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let mut conn = raw(&proxy);
        conn.write_all(b"PING\r\n").unwrap();
        // No fault: answered.
        expect_reply(&mut conn, "+PONG\r\n");

        // Requests: held on their way to the server.
        proxy.pause();
        conn.write_all(b"INCR held\r\nINCR held\r\n").unwrap();
        assert_nothing_arrives(&mut conn);
        let held: Option<String> = server.cmd(&["GET", "held"]);
        assert_eq!(held, None, "the server has not seen the requests");
        proxy.resume();
        expect_reply(&mut conn, ":1\r\n:2\r\n");

        // Replies: the server answers during the pause, the client hears it after.
        conn.write_all(b"BLPOP list 0\r\n").unwrap();
        crate::server::poll("the BLPOP blocks on the server", PATIENCE, || match server
            .info_field("clients", "blocked_clients")?
            .as_str()
        {
            "1" => Ok(()),
            other => Err(format!("blocked_clients:{other}")),
        });
        // Delays add to a pause: this reply is due long before the resume.
        proxy.delay_replies(Duration::from_millis(100));
        proxy.pause();
        let _: i64 = server.cmd(&["RPUSH", "list", "x"]);
        let len: i64 = server.cmd(&["LLEN", "list"]);
        assert_eq!(len, 0, "the server has served the BLPOP");
        assert_nothing_arrives(&mut conn);
        proxy.resume();
        expect_reply(&mut conn, "*2\r\n$4\r\nlist\r\n$1\r\nx\r\n");

        drop(conn);
        assert_all_threads_end(&proxy);
    }

    #[test]
    fn delayed_replies_come_late_but_come() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let mut conn = raw(&proxy);
        proxy.delay_replies(Duration::from_secs(1));
        conn.write_all(b"PING\r\n").unwrap();
        assert_nothing_arrives(&mut conn);
        expect_reply(&mut conn, "+PONG\r\n");
        proxy.delay_replies(Duration::ZERO);
        conn.write_all(b"PING\r\n").unwrap();
        expect_reply(&mut conn, "+PONG\r\n");
        drop(conn);
        assert_all_threads_end(&proxy);
    }

    #[test]
    fn a_connection_closed_during_a_pause_ends_on_resume() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let mut conn = raw(&proxy);
        proxy.pause();
        conn.write_all(b"SET after-close 1\r\n").unwrap();
        drop(conn);
        wait_admitted(&proxy, 1);
        thread::sleep(SILENCE);
        let value: Option<String> = server.cmd(&["GET", "after-close"]);
        assert_eq!(value, None, "held during the pause");

        proxy.resume();
        crate::server::poll("the held SET reaches the server", PATIENCE, || match server
            .try_cmd::<Option<String>>(&["GET", "after-close"])?
        {
            Some(_) => Ok(()),
            None => Err("not set".into()),
        });
        assert_all_threads_end(&proxy);
    }

    #[test]
    fn refuse_closes_connections_at_once_until_lifted() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let mut before = connect(&proxy, PATIENCE).unwrap();
        assert_eq!(ping(&mut before).unwrap(), "PONG", "no fault: answered");

        proxy.refuse(true);
        // Timeouts far above "at once": failing with a timeout would be a black hole.
        let started = Instant::now();
        let err = ping(&mut before).unwrap_err();
        assert!(!err.is_timeout(), "an open connection is closed: {err}");
        let err = ping_new(&proxy, PATIENCE).unwrap_err();
        assert!(!err.is_timeout(), "a new connection is closed: {err}");
        assert!(started.elapsed() < PATIENCE, "failed without waiting");

        proxy.refuse(false);
        assert_eq!(ping_new(&proxy, PATIENCE).unwrap(), "PONG");
        drop(before);
        assert_all_threads_end(&proxy);
    }

    #[test]
    fn dropping_a_proxy_lifts_its_pause_and_its_black_hole() {
        let server = RedisServer::start();
        let paused = Proxy::start(server.port());
        let paused_state = paused.state.clone();
        let mut held = raw(&paused);
        // Taken in before the pause: one that is not yet when the proxy goes is never.
        held.write_all(b"PING\r\n").unwrap();
        expect_reply(&mut held, "+PONG\r\n");
        paused.pause();
        held.write_all(b"PING\r\n").unwrap();
        assert_nothing_arrives(&mut held);
        drop(paused);
        // An open connection goes on with its peers, what was held first.
        expect_reply(&mut held, "+PONG\r\n");

        let black_hole = Proxy::start(server.port());
        let black_hole_state = black_hole.state.clone();
        let mut caught = raw(&black_hole);
        caught.write_all(b"PING\r\n").unwrap();
        expect_reply(&mut caught, "+PONG\r\n");
        black_hole.black_hole(true);
        drop(black_hole);
        assert_closed(&mut caught);

        drop((held, caught));
        crate::server::poll("the dropped proxies' threads end", PATIENCE, || {
            match (
                paused_state.threads.load(Ordering::Acquire),
                black_hole_state.threads.load(Ordering::Acquire),
            ) {
                (0, 0) => Ok(()),
                threads => Err(format!("{threads:?} thread(s)")),
            }
        });
    }
}

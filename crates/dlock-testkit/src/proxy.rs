//! A TCP proxy on loopback between a client and a `redis-server`, for faults the kernel
//! here cannot inject (no `tc netem`): replies lost together with their connection, and
//! replies delayed.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

/// Forwards every connection made to [`Proxy::url`] to a server's port. Dropping it stops
/// accepting; connections already made end with their peers.
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
    matcher: std::sync::Mutex<Option<Matcher>>,
    /// Replies swallowed so far.
    dropped: AtomicU32,
    /// How long every server-to-client byte is held back, in microseconds.
    delay_us: AtomicU64,
    stopped: AtomicBool,
}

impl Proxy {
    /// Starts forwarding a free loopback port to `127.0.0.1:target_port`.
    pub fn start(target_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy port");
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(State {
            drop_replies: AtomicU32::new(0),
            matcher: std::sync::Mutex::new(None),
            dropped: AtomicU32::new(0),
            delay_us: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        });
        let shared = state.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if shared.stopped.load(Ordering::Acquire) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (Ok(client_read), Ok(server_write)) = (client.try_clone(), server.try_clone())
                else {
                    continue;
                };
                // Client to server: plain copy.
                thread::spawn(move || pump(client_read, server_write, None));
                // Server to client: may swallow a reply and cut the connection, or hold
                // replies back (a second thread writes each when its delay is over, so
                // delays do not add up).
                let state = shared.clone();
                let (delayed, due) = mpsc::channel::<(Instant, Vec<u8>)>();
                let Ok(client_write) = client.try_clone() else {
                    continue;
                };
                thread::spawn(move || deliver(due, client_write));
                thread::spawn(move || pump(server, client, Some((state, delayed))));
            }
        });
        Proxy { port, state }
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
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
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::Release);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, faults: Option<(Arc<State>, Delayed)>) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some((state, delayed)) = &faults {
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
                let _ = to.shutdown(Shutdown::Both);
                break;
            }
            // Through the delivery thread, so a delay switched off keeps the order.
            let due =
                Instant::now() + Duration::from_micros(state.delay_us.load(Ordering::Acquire));
            if delayed.send((due, buffer[..n].to_vec())).is_err() {
                break;
            }
            continue;
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    if faults.is_none() {
        let _ = to.shutdown(Shutdown::Both);
    }
    // Otherwise the delivery thread closes the client side once it wrote what is held
    // back (it ends when the sender in `faults` is dropped).
}

/// Writes each chunk to the client once its delay is over, in order.
fn deliver(due: mpsc::Receiver<(Instant, Vec<u8>)>, mut to: TcpStream) {
    for (at, chunk) in due {
        let wait = at.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            thread::sleep(wait);
        }
        if to.write_all(&chunk).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

//! A TCP proxy whose behaviour can be switched at runtime, to put in front of kube-apiserver
//! for some clients (nodeauth's controllers, in `cargo xtask chaos`) and break their
//! connections on purpose while everyone else talks to the apiserver directly.
//!
//! Modes ([`ProxyMode`]):
//! - `Pass`: bytes flow both ways.
//! - `Reset`: every open connection is closed, and new ones are closed as soon as accepted.
//! - `Stall`: bytes are held (nothing is lost), and new connections are held before the
//!   upstream is dialled; they flow again when the mode changes.
//! - `BlackHole`: connections are accepted and read, but nothing is forwarded or answered;
//!   a connection open while in this mode stays a black hole for good (as behind a dropped
//!   NAT entry): only a client that gives up on it and reconnects recovers.
//! - `Delay(d)`: each chunk is forwarded `d` late (or held, or dropped, if the mode turned to
//!   `Stall` or `Reset` meanwhile).
//!
//! TLS passes through untouched: clients verify the apiserver's certificate for
//! `127.0.0.1`, which the proxy also listens on.
//!
//! ```no_run
//! # async fn demo() -> Result<(), nodeauth_testenv::Error> {
//! use nodeauth_testenv::proxy::{Proxy, ProxyMode};
//! let cp = nodeauth_testenv::ControlPlane::shared()?;
//! let proxy = Proxy::start(cp.server()).await?;
//! // Give a client `proxy.url()` instead of `cp.server()`, then:
//! proxy.set_mode(ProxyMode::Stall);
//! proxy.set_mode(ProxyMode::Pass);
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::Error;

/// What the proxy does with connections right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward both ways.
    Pass,
    /// Close every connection, open or new.
    Reset,
    /// Hold the bytes; forward them once the mode changes.
    Stall,
    /// Accept and read, never forward or answer; open connections stay dead for good.
    BlackHole,
    /// Forward each chunk this late.
    Delay(Duration),
}

/// A running proxy (its tasks run on the tokio runtime it was started on; they end on drop).
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    mode: watch::Sender<ProxyMode>,
    open: Arc<AtomicUsize>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream` (`host:port`, or a URL
    /// such as `https://127.0.0.1:6443`), in [`ProxyMode::Pass`].
    pub async fn start(upstream: &str) -> Result<Self, Error> {
        let upstream = upstream
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| Error::io("binding the proxy".into(), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("reading the proxy's address".into(), e))?;
        let (mode, rx) = watch::channel(ProxyMode::Pass);
        let open = Arc::new(AtomicUsize::new(0));
        let accept = tokio::spawn(accept_loop(listener, upstream, rx, open.clone()));
        Ok(Self {
            addr,
            mode,
            open,
            accept,
        })
    }

    /// Where clients connect: `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:<port>`, for a kubeconfig.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Switches the mode; open connections follow at once.
    pub fn set_mode(&self, mode: ProxyMode) {
        self.mode.send_replace(mode);
    }

    /// The mode in force.
    pub fn mode(&self) -> ProxyMode {
        *self.mode.borrow()
    }

    /// Closes every open connection and goes back to `Pass`.
    pub async fn reset(&self) {
        self.set_mode(ProxyMode::Reset);
        // Let every connection task see it before passing again.
        for _ in 0..100 {
            if self.open_connections() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.set_mode(ProxyMode::Pass);
    }

    /// Connections open right now (client side accepted, not yet closed).
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Connection tasks end when they see Reset or the mode sender gone.
        self.mode.send_replace(ProxyMode::Reset);
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: String,
    mode: watch::Receiver<ProxyMode>,
    open: Arc<AtomicUsize>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = client.set_nodelay(true);
        let (upstream, mode, open) = (upstream.clone(), mode.clone(), open.clone());
        tokio::spawn(async move {
            open.fetch_add(1, Ordering::SeqCst);
            connection(client, &upstream, mode).await;
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// One client connection, until either side closes or the mode is `Reset`.
async fn connection(client: TcpStream, upstream: &str, mut mode: watch::Receiver<ProxyMode>) {
    let mut initial = *mode.borrow_and_update();
    // A connection opened during a stall is held too: the upstream is dialled once it ends
    // (so a client can ride out an upstream that is down meanwhile).
    while initial == ProxyMode::Stall {
        if mode.changed().await.is_err() {
            return;
        }
        initial = *mode.borrow_and_update();
    }
    match initial {
        ProxyMode::Reset => return,
        ProxyMode::BlackHole => {
            black_hole(client, mode).await;
            return;
        }
        _ => {}
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let dead = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let up = pump(cr, sw, mode.clone(), dead.clone());
    let down = pump(sr, cw, mode.clone(), dead.clone());
    let watch_mode = async {
        loop {
            if mode.changed().await.is_err() {
                return;
            }
            match *mode.borrow_and_update() {
                ProxyMode::Reset => return,
                ProxyMode::BlackHole => dead.store(true, Ordering::SeqCst),
                _ => {}
            }
        }
    };
    // Dropping the halves closes both sockets.
    tokio::select! {
        () = up => {}
        () = down => {}
        () = watch_mode => {}
    }
}

/// Reads and discards everything until the client closes or the mode is `Reset`.
async fn black_hole(mut client: TcpStream, mut mode: watch::Receiver<ProxyMode>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            r = client.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            changed = mode.changed() => {
                if changed.is_err() || *mode.borrow_and_update() == ProxyMode::Reset {
                    return;
                }
            }
        }
    }
}

/// Copies one direction, obeying the mode for each chunk.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut mode: watch::Receiver<ProxyMode>,
    dead: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        // A chunk waits out one delay at most; the mode is read again after it (a stall or a
        // reset that began meanwhile holds or drops it too).
        let mut delayed = false;
        loop {
            let now = *mode.borrow_and_update();
            match now {
                ProxyMode::Pass => break,
                ProxyMode::Reset => return,
                ProxyMode::BlackHole => {
                    dead.store(true, Ordering::SeqCst);
                    break;
                }
                ProxyMode::Delay(_) if delayed => break,
                ProxyMode::Delay(d) => {
                    tokio::time::sleep(d).await;
                    delayed = true;
                }
                ProxyMode::Stall => {
                    if mode.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
        if dead.load(Ordering::SeqCst) {
            continue;
        }
        if to
            .write_all(buf.get(..n).unwrap_or_default())
            .await
            .is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback; returns its address.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if s.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    /// Sends `msg` and reads the echo, or `None` after `wait`.
    async fn round_trip(s: &mut TcpStream, msg: &[u8], wait: Duration) -> Option<Vec<u8>> {
        s.write_all(msg).await.ok()?;
        let mut got = vec![0u8; msg.len()];
        match tokio::time::timeout(wait, s.read_exact(&mut got)).await {
            Ok(Ok(_)) => Some(got),
            _ => None,
        }
    }

    const SHORT: Duration = Duration::from_millis(300);
    const LONG: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn passes_then_resets_every_connection() {
        let proxy = Proxy::start(&echo().await.to_string()).await.unwrap();
        let mut a = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut a, b"ping", LONG).await.unwrap(), b"ping");
        assert_eq!(proxy.open_connections(), 1);
        proxy.reset().await;
        let mut buf = [0u8; 4];
        let closed = tokio::time::timeout(LONG, a.read(&mut buf)).await.unwrap();
        assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
        // Back to passing: a new connection works.
        let mut b = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut b, b"pong", LONG).await.unwrap(), b"pong");
    }

    #[tokio::test]
    async fn reset_mode_closes_new_connections_too() {
        let proxy = Proxy::start(&echo().await.to_string()).await.unwrap();
        proxy.set_mode(ProxyMode::Reset);
        let mut a = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut a, b"x", SHORT).await, None);
    }

    #[tokio::test]
    async fn stall_holds_bytes_and_delivers_them_later() {
        let proxy = Proxy::start(&echo().await.to_string()).await.unwrap();
        let mut a = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(round_trip(&mut a, b"1", LONG).await.is_some());
        proxy.set_mode(ProxyMode::Stall);
        assert_eq!(round_trip(&mut a, b"2", SHORT).await, None);
        proxy.set_mode(ProxyMode::Pass);
        let mut got = [0u8; 1];
        tokio::time::timeout(LONG, a.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"2", "the stalled byte arrives once passing again");
        // A connection opened during a stall dials the upstream once it ends.
        proxy.set_mode(ProxyMode::Stall);
        let mut b = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut b, b"3", SHORT).await, None);
        proxy.set_mode(ProxyMode::Pass);
        tokio::time::timeout(LONG, b.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"3");
    }

    #[tokio::test]
    async fn black_hole_swallows_for_good_new_connections_recover() {
        let proxy = Proxy::start(&echo().await.to_string()).await.unwrap();
        let mut a = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(round_trip(&mut a, b"1", LONG).await.is_some());
        proxy.set_mode(ProxyMode::BlackHole);
        assert_eq!(round_trip(&mut a, b"2", SHORT).await, None);
        let mut b = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut b, b"3", SHORT).await, None);
        proxy.set_mode(ProxyMode::Pass);
        // Connections that saw the black hole stay dead; a new one works.
        assert_eq!(round_trip(&mut a, b"4", SHORT).await, None);
        assert_eq!(round_trip(&mut b, b"5", SHORT).await, None);
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut c, b"6", LONG).await.unwrap(), b"6");
    }

    #[tokio::test]
    async fn delay_forwards_late() {
        let proxy = Proxy::start(&echo().await.to_string()).await.unwrap();
        let mut a = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.set_mode(ProxyMode::Delay(Duration::from_millis(200)));
        let t0 = std::time::Instant::now();
        assert!(round_trip(&mut a, b"1", LONG).await.is_some());
        // Both directions are delayed.
        assert!(
            t0.elapsed() >= Duration::from_millis(400),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(proxy.mode(), ProxyMode::Delay(Duration::from_millis(200)));
    }

    #[tokio::test]
    async fn a_stall_begun_during_a_delay_holds_the_delayed_bytes() {
        // An upstream that only reads, so what crosses the proxy is seen one way.
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Proxy::start(&upstream.local_addr().unwrap().to_string())
            .await
            .unwrap();
        let mut a = TcpStream::connect(proxy.addr()).await.unwrap();
        let (mut server, _) = tokio::time::timeout(LONG, upstream.accept())
            .await
            .unwrap()
            .unwrap();
        proxy.set_mode(ProxyMode::Delay(Duration::from_millis(300)));
        a.write_all(b"1").await.unwrap();
        // The byte is inside its delay now; the stall begins before the delay ends.
        tokio::time::sleep(Duration::from_millis(100)).await;
        proxy.set_mode(ProxyMode::Stall);
        let mut got = [0u8; 1];
        assert!(
            tokio::time::timeout(Duration::from_secs(1), server.read_exact(&mut got))
                .await
                .is_err(),
            "a delayed byte went through a stall"
        );
        proxy.set_mode(ProxyMode::Pass);
        tokio::time::timeout(LONG, server.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"1");
    }
}

//! A TCP proxy in front of a server (PostgreSQL) that a test cuts and restores: refusing new
//! connections (nothing listens on its port), accepting and closing them at once, or accepting
//! them and never answering, and in every case closing the connections already established.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How the proxy treats connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Nothing listens: connections are refused.
    Refuse,
    /// Connections are accepted and closed at once.
    Close,
    /// Connections are accepted and held, never answered (a half-dead network path).
    Stall,
}

/// A running proxy.
pub struct TcpProxy {
    /// The address to connect to instead of the target.
    pub addr: SocketAddr,
    target: SocketAddr,
    accepting: Mutex<Option<JoinHandle<()>>>,
    piping: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// Connections held by [`Cut::Stall`], closed at the next change.
    stalled: Arc<Mutex<Vec<TcpStream>>>,
}

impl TcpProxy {
    /// A proxy to `target`, forwarding.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let proxy = Self { addr, target, accepting: Mutex::new(None), piping: Arc::default(), stalled: Arc::default() };
        proxy.serve(listener, None);
        proxy
    }

    fn serve(&self, listener: TcpListener, cut: Option<Cut>) {
        let (target, piping, stalled) = (self.target, self.piping.clone(), self.stalled.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                match cut {
                    Some(Cut::Close) => {
                        drop(client);
                        continue;
                    }
                    Some(Cut::Stall) => {
                        stalled.lock().unwrap().push(client);
                        continue;
                    }
                    _ => {}
                }
                let pipe = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                piping.lock().unwrap().push(pipe);
            }
        });
        if let Some(old) = self.accepting.lock().unwrap().replace(task) {
            old.abort();
        }
    }

    /// Stops forwarding: closes every established connection, and refuses or closes new ones.
    pub async fn cut(&self, how: Cut) {
        if let Some(task) = self.accepting.lock().unwrap().take() {
            task.abort();
        }
        for pipe in self.piping.lock().unwrap().drain(..) {
            pipe.abort();
        }
        self.stalled.lock().unwrap().clear();
        // The aborted accept loop drops its listener; wait until the port is free again.
        tokio::task::yield_now().await;
        match how {
            Cut::Close | Cut::Stall => {
                let listener = bind_again(self.addr).await;
                self.serve(listener, Some(how));
            }
            // Until the aborted accept loop has dropped the listener, a connection could still
            // be accepted.
            Cut::Refuse => {
                for _ in 0..200 {
                    if TcpStream::connect(self.addr).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                panic!("{} still accepts connections", self.addr);
            }
        }
    }

    /// Forwards again, on the same port.
    pub async fn restore(&self) {
        if let Some(task) = self.accepting.lock().unwrap().take() {
            task.abort();
        }
        self.stalled.lock().unwrap().clear();
        tokio::task::yield_now().await;
        let listener = bind_again(self.addr).await;
        self.serve(listener, None);
    }
}

/// Binds `addr` again once the aborted accept loop has released it.
async fn bind_again(addr: SocketAddr) -> TcpListener {
    for _ in 0..200 {
        match TcpListener::bind(addr).await {
            Ok(listener) => return listener,
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
        }
    }
    panic!("cannot bind {addr} again");
}

//! A TCP proxy between the MCP client and the server that can cut every open
//! connection at once: the client's event stream (and any request in flight) drops
//! as it would when a network path breaks, and the client reconnects through the same
//! proxy.

use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct Proxy {
    addr: SocketAddr,
    cuts: watch::Sender<u64>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (cuts, _) = watch::channel(0u64);
        let task = {
            let cuts = cuts.clone();
            tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    let mut cut = cuts.subscribe();
                    cut.borrow_and_update();
                    tokio::spawn(async move {
                        let Ok(mut outbound) = TcpStream::connect(upstream).await else {
                            return; // upstream down: the client sees the connection close
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                            _ = cut.changed() => {}
                        }
                        // Dropping both sockets closes them.
                    });
                }
            })
        };
        Proxy { addr, cuts, task }
    }

    /// `http://PROXY{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Closes every connection open now; later connections are forwarded as before.
    pub fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

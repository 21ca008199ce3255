//! A small HTTPS server on loopback for `send_file`'s URL source: a self-signed
//! certificate (rcgen) for `127.0.0.1`, `127.0.0.2`, `::1` and `localhost`, written
//! as a PEM the server's config trusts (`files.fetch_ca_file`); canned answers per
//! path; a count of the requests each path got and of every connection accepted, so
//! a test can show that a refused URL never reached it.
//!
//! It listens on one port of `127.0.0.1`, `127.0.0.2` and `[::1]` (where the machine
//! has IPv6), so an address the server's guard should refuse is one that would
//! answer.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A canned answer: status, extra headers, body.
type Answer = (u16, Vec<(String, String)>, Vec<u8>);

#[derive(Default)]
struct Routes {
    answers: HashMap<String, Answer>,
    hits: HashMap<String, usize>,
}

pub struct TestHttps {
    port: u16,
    routes: Arc<Mutex<Routes>>,
    connections: Arc<AtomicUsize>,
    dir: tempfile::TempDir,
}

impl TestHttps {
    /// Starts the listeners and their accept loops (tokio tasks of the test's runtime).
    pub async fn start() -> TestHttps {
        let names = ["127.0.0.1", "127.0.0.2", "::1", "localhost"].map(str::to_owned);
        let cert = rcgen::generate_simple_self_signed(names.to_vec()).expect("a test certificate");
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::write(dir.path().join("ca.pem"), cert.cert.pem()).expect("write ca.pem");
        let key = tokio_rustls::rustls::pki_types::PrivateKeyDer::Pkcs8(
            cert.signing_key.serialize_der().into(),
        );
        let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
        let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .expect("the test certificate and key");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

        let first = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let port = first.local_addr().unwrap().port();
        let mut listeners = vec![first];
        for ip in ["127.0.0.2", "::1"] {
            let addr = SocketAddr::new(ip.parse().unwrap(), port);
            if let Ok(listener) = TcpListener::bind(addr).await {
                listeners.push(listener);
            }
        }
        let routes = Arc::new(Mutex::new(Routes::default()));
        let connections = Arc::new(AtomicUsize::new(0));
        for listener in listeners {
            let (acceptor, routes, connections) =
                (acceptor.clone(), routes.clone(), connections.clone());
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    connections.fetch_add(1, Ordering::SeqCst);
                    let (acceptor, routes) = (acceptor.clone(), routes.clone());
                    tokio::spawn(async move {
                        if let Ok(tls) = acceptor.accept(tcp).await {
                            let _ = answer(tls, &routes).await;
                        }
                    });
                }
            });
        }
        TestHttps {
            port,
            routes,
            connections,
            dir,
        }
    }

    /// Answers `GET path` with `status`, `headers` and `body` from now on.
    pub fn serve(&self, path: &str, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        let headers = headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.routes
            .lock()
            .unwrap()
            .answers
            .insert(path.to_owned(), (status, headers, body.to_vec()));
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `https://127.0.0.1:{port}{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// The PEM of the certificate (its own CA).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// How many requests `path` got, on any address.
    pub fn hits(&self, path: &str) -> usize {
        self.routes
            .lock()
            .unwrap()
            .hits
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// How many connections the listeners accepted, on any address.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// Reads one request head and writes the canned answer of its path (404 without one).
async fn answer<S>(mut stream: S, routes: &Mutex<Routes>) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let (status, headers, body) = {
        let mut routes = routes.lock().unwrap();
        *routes.hits.entry(path.clone()).or_default() += 1;
        routes
            .answers
            .get(&path)
            .cloned()
            .unwrap_or((404, Vec::new(), b"not found".to_vec()))
    };
    let mut out = format!(
        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    stream.write_all(out.as_bytes()).await?;
    stream.write_all(&body).await?;
    stream.shutdown().await
}

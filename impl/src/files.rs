//! Where `send_file`'s bytes come from: a path under the operator's directories
//! ([`FileSources::read_path`]) or an `https` URL behind the SSRF guard
//! ([`FileSources::fetch_url`]), each capped, hashed and sniffed ([`Loaded`]). The
//! decisions without IO (which addresses, which names, what the bytes are) are
//! `mc_adapters::files`'.
//!
//! # Paths
//! A path is absolute, and lies under one of `files.allowed_dirs` twice over: first
//! as written, with `.` and `..` resolved lexically (a path outside is refused before
//! anything is opened, so no device or FIFO outside is ever opened), then as what was
//! opened. It is opened with `O_PATH` (which opens no device and never blocks), its
//! real path read from `/proc/self/fd/N` and checked against the canonical
//! directories (so a symlink, a `..` through a symlink or a directory swapped since
//! the first check cannot escape), its type read with `fstat` (a regular file only),
//! and only then opened for reading through that same descriptor
//! (`/proc/self/fd/N`, `O_NONBLOCK | O_NOCTTY | O_CLOEXEC`).
//!
//! A path outside is `forbidden` whether it exists or not. `not_found` is answered
//! only for a path whose written form is under a directory; one limit remains: the
//! target of a symlink placed inside a directory is `not_found` when it is missing
//! and `forbidden` when it exists outside, so whoever can create symlinks in an
//! allowed directory can learn whether a path outside exists (not read it).
//!
//! # URLs
//! `https` only, no user info; the host's addresses are judged by
//! [`mc_adapters::files::fetch_allowed`] before a connection: a literal address
//! here (reqwest does not resolve one), a name in the client's resolver, which hands
//! reqwest only the allowed addresses (so the address checked is the address
//! connected to: no DNS-rebinding gap). Redirects: at most [`MAX_REDIRECTS`], each
//! `https`, its literal host judged here and its name resolved by the same resolver.
//! No proxy; connect timeout [`CONNECT_TIMEOUT`], whole request [`FETCH_TIMEOUT`].
//! A `Content-Length` over the cap is refused before the body is read; the body is
//! read in chunks and dropped once past the cap.

use anyhow::Context as _;
use mc_adapters::files::ipnet::IpNet;
use mc_adapters::files::{fetch_allowed, file_name, sniff, under_roots, FilesConfig, Sniffed};
use mc_adapters::write_rule::ToolError;
use sha2::{Digest, Sha256};
use std::fmt;
use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The most redirects a fetch follows.
pub const MAX_REDIRECTS: usize = 5;
/// How long a fetch waits for a TCP and TLS connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a whole fetch may take, redirects and body included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(60);
/// The file name of a fetched file whose URL's last segment names none.
pub const FALLBACK_FILE_NAME: &str = "file";

/// A file's bytes and what they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    /// All of it (at most the cap).
    pub bytes: Vec<u8>,
    /// The path's last component, or the URL's last path segment percent-decoded
    /// ([`FALLBACK_FILE_NAME`] when it names none), through
    /// [`mc_adapters::files::file_name`].
    pub file_name: String,
    /// The SHA-256 of `bytes`, lowercase hex.
    pub sha256: String,
    /// The content type, message type and an image's dimensions, from the bytes.
    pub sniffed: Sniffed,
}

impl Loaded {
    fn new(bytes: Vec<u8>, file_name: String) -> Loaded {
        Loaded {
            sha256: format!("{:x}", Sha256::digest(&bytes)),
            sniffed: sniff(&bytes),
            file_name,
            bytes,
        }
    }
}

/// `send_file`'s sources, from `[files]`: the allowed directories, the cap and the
/// fetching client.
#[derive(Clone)]
pub struct FileSources {
    /// `files.allowed_dirs` with `.` and `..` resolved lexically, each that is the
    /// same directory as its canonical form: the first check.
    written_roots: Vec<PathBuf>,
    /// `files.allowed_dirs` canonicalized at start: the check of what was opened.
    roots: Vec<PathBuf>,
    max_bytes: u64,
    fetch_urls: bool,
    allow: Arc<Vec<IpNet>>,
    client: reqwest::Client,
}

impl fmt::Debug for FileSources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileSources")
            .field("roots", &self.roots)
            .field("max_bytes", &self.max_bytes)
            .field("fetch_urls", &self.fetch_urls)
            .field("allow", &self.allow)
            .finish_non_exhaustive()
    }
}

impl FileSources {
    /// The sources `config` describes: each allowed directory canonicalized, and the
    /// fetching client built (no proxy, the guarded resolver, the redirect policy,
    /// the timeouts, `fetch_ca_file`'s roots besides the system's).
    ///
    /// # Errors
    /// An allowed directory that cannot be canonicalized (missing, unreadable) or is
    /// not a directory; a `fetch_ca_file` that cannot be read or holds no PEM
    /// certificate; a client reqwest cannot build.
    pub fn new(config: &FilesConfig) -> anyhow::Result<FileSources> {
        let mut roots = Vec::with_capacity(config.allowed_dirs.len());
        let mut written_roots = Vec::with_capacity(config.allowed_dirs.len());
        for dir in &config.allowed_dirs {
            let real = std::fs::canonicalize(dir)
                .with_context(|| format!("files.allowed_dirs: {}", dir.display()))?;
            anyhow::ensure!(
                real.is_dir(),
                "files.allowed_dirs: {} is not a directory",
                dir.display()
            );
            // The directory as written (`..` taken lexically) serves the first check
            // only when it is that directory: after a symlink, `link/..` is not the
            // text's parent, and a wider first check would tell whether a path
            // outside exists.
            let written = lexical(dir);
            if std::fs::canonicalize(&written).is_ok_and(|w| w == real) {
                written_roots.push(written);
            }
            roots.push(real);
        }
        let allow = Arc::new(config.fetch_allow_networks.clone());
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .https_only(true)
            .dns_resolver(GuardedResolver {
                allow: allow.clone(),
            })
            .redirect(redirect_policy(allow.clone()))
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(FETCH_TIMEOUT);
        if let Some(path) = &config.fetch_ca_file {
            let pem = std::fs::read(path)
                .with_context(|| format!("files.fetch_ca_file: {}", path.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("files.fetch_ca_file: {}", path.display()))?;
            anyhow::ensure!(
                !certs.is_empty(),
                "files.fetch_ca_file: {} holds no PEM certificate",
                path.display()
            );
            builder = builder.tls_certs_merge(certs);
        }
        let client = builder.build().context("the send_file fetching client")?;
        Ok(FileSources {
            written_roots,
            roots,
            max_bytes: config.max_bytes,
            fetch_urls: config.fetch_urls,
            allow,
            client,
        })
    }

    /// `files.max_bytes`: the cap every read and fetch keeps to, whatever cap the
    /// caller gives.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The file at `path` (absolute), if it is a regular file under one of the
    /// allowed directories (the module docs say how that is checked) and at most
    /// `cap` bytes (and `files.max_bytes`).
    ///
    /// # Errors
    /// `invalid_params`: no directory is allowed, `path` is relative, or it is not a
    /// regular file (a directory, a FIFO, a device…); `forbidden`: outside the
    /// allowed directories (missing or not), or not readable; `not_found`: nothing at
    /// a path under them; `too_large`: over the cap.
    pub async fn read_path(&self, path: &str, cap: u64) -> Result<Loaded, ToolError> {
        if self.roots.is_empty() {
            return Err(ToolError::Invalid(
                "send_file from a path is off: the operator allows no directory \
                 (files.allowed_dirs)"
                    .to_owned(),
            ));
        }
        let written = Path::new(path);
        if !written.is_absolute() {
            return Err(ToolError::Invalid(format!(
                "{path:?} is not an absolute path"
            )));
        }
        let name = file_name(path).map_err(ToolError::Invalid)?;
        let cap = cap.min(self.max_bytes);
        let normal = lexical(written);
        if !under_roots(&normal, &self.written_roots) && !under_roots(&normal, &self.roots) {
            return Err(outside(path));
        }
        let roots = self.roots.clone();
        let owned = path.to_owned();
        let bytes = tokio::task::spawn_blocking(move || read_under(&owned, &roots, cap))
            .await
            .map_err(|e| ToolError::Upstream(format!("reading {path:?} failed: {e}")))??;
        Ok(Loaded::new(bytes, name))
    }

    /// The body of `url` (`https`), fetched behind the SSRF guard (the module docs),
    /// at most `cap` bytes (and `files.max_bytes`).
    ///
    /// # Errors
    /// `invalid_params`: fetching is off (`files.fetch_urls = false`), the URL does
    /// not parse, is not `https` or carries user info, or a redirect leads to one
    /// that is not `https`; `forbidden`: the host (or a redirect's) is or resolves
    /// only to addresses the guard refuses (the message names the address and its
    /// block); `too_large`: a `Content-Length` or a body over the cap; `upstream`:
    /// no answer (DNS, connection, TLS, timeout), more than [`MAX_REDIRECTS`]
    /// redirects, or a status other than 2xx (named).
    pub async fn fetch_url(&self, url: &str, cap: u64) -> Result<Loaded, ToolError> {
        if !self.fetch_urls {
            return Err(ToolError::Invalid(
                "send_file from a URL is off: the operator turned it off (files.fetch_urls)"
                    .to_owned(),
            ));
        }
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| ToolError::Invalid(format!("{url:?} is not a URL: {e}")))?;
        check_url(&parsed, &self.allow)?;
        let name = url_file_name(&parsed);
        let cap = cap.min(self.max_bytes);
        let mut response = self
            .client
            .get(parsed)
            .send()
            .await
            .map_err(|e| fetch_error(url, &e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(ToolError::Upstream(format!("{url} answered {status}")));
        }
        if let Some(length) = response.content_length() {
            if length > cap {
                return Err(too_large(url, cap));
            }
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| fetch_error(url, &e))? {
            if (bytes.len() + chunk.len()) as u64 > cap {
                return Err(too_large(url, cap));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Loaded::new(bytes, name))
    }
}

/// `path` with `.` dropped and `..` taking off the component before it (never above
/// the root), without touching the file system.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn outside(path: &str) -> ToolError {
    ToolError::Forbidden(format!(
        "{path:?} is outside the directories send_file may read (files.allowed_dirs)"
    ))
}

fn too_large(source: &str, cap: u64) -> ToolError {
    ToolError::TooLarge(format!(
        "{source} is larger than {cap} bytes (files.max_bytes)"
    ))
}

/// The blocking part of [`FileSources::read_path`]: open with `O_PATH`, check the
/// real path and the type, reopen through the descriptor for reading, read at most
/// `cap` + 1 bytes.
fn read_under(path: &str, roots: &[PathBuf], cap: u64) -> Result<Vec<u8>, ToolError> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| open_error(path, &e))?;
    let fd_path = format!("/proc/self/fd/{}", handle.as_raw_fd());
    let real = std::fs::read_link(&fd_path)
        .map_err(|e| ToolError::Upstream(format!("cannot tell what {path:?} is: {e}")))?;
    if !under_roots(&real, roots) {
        return Err(outside(path));
    }
    let metadata = handle
        .metadata()
        .map_err(|e| ToolError::Upstream(format!("cannot tell what {path:?} is: {e}")))?;
    if !metadata.is_file() {
        return Err(ToolError::Invalid(format!(
            "{path:?} is not a regular file"
        )));
    }
    if metadata.len() > cap {
        return Err(too_large(&format!("{path:?}"), cap));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(&fd_path)
        .map_err(|e| open_error(path, &e))?;
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::Upstream(format!("reading {path:?} failed: {e}")))?;
    if bytes.len() as u64 > cap {
        return Err(too_large(&format!("{path:?}"), cap));
    }
    Ok(bytes)
}

fn open_error(path: &str, e: &std::io::Error) -> ToolError {
    match e.kind() {
        std::io::ErrorKind::NotFound => ToolError::NotFound(format!("no file at {path:?}")),
        std::io::ErrorKind::PermissionDenied => {
            ToolError::Forbidden(format!("{path:?} cannot be read: {e}"))
        }
        _ => ToolError::Invalid(format!("{path:?} cannot be opened: {e}")),
    }
}

/// The scheme, user info and (for a literal address) host of a URL to fetch or
/// redirect to.
fn check_url(url: &reqwest::Url, allow: &[IpNet]) -> Result<(), ToolError> {
    if url.scheme() != "https" {
        return Err(ToolError::Invalid(format!(
            "{url} is not an https URL: send_file fetches https only"
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ToolError::Invalid(format!(
            "{}: a URL to fetch carries no user info",
            url.host_str().unwrap_or_default()
        )));
    }
    let ip = match url.host() {
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
        Some(url::Host::Domain(_)) => return Ok(()),
        None => return Err(ToolError::Invalid(format!("{url} names no host"))),
    };
    fetch_allowed(ip, allow).map_err(ToolError::Forbidden)
}

/// The URL's last path segment, percent-decoded, as a file name.
fn url_file_name(url: &reqwest::Url) -> String {
    let last = url
        .path_segments()
        .and_then(|mut segments| segments.next_back())
        .unwrap_or_default();
    let decoded = percent_encoding::percent_decode_str(last).decode_utf8_lossy();
    file_name(&decoded).unwrap_or_else(|_| FALLBACK_FILE_NAME.to_owned())
}

/// A refusal of the guard (resolver or redirect policy), carried through reqwest's
/// error to [`fetch_error`].
#[derive(Debug)]
struct Guarded(ToolError);

impl fmt::Display for Guarded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.message())
    }
}

impl std::error::Error for Guarded {}

/// reqwest's error as a tool error: the guard's own refusal when it is in the chain,
/// else `upstream` with every cause.
fn fetch_error(url: &str, error: &reqwest::Error) -> ToolError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut causes = Vec::new();
    while let Some(e) = source {
        if let Some(Guarded(refusal)) = e.downcast_ref::<Guarded>() {
            return refusal.clone();
        }
        causes.push(e.to_string());
        source = e.source();
    }
    if error.is_timeout() {
        return ToolError::Upstream(format!("fetching {url} timed out: {}", causes.join(": ")));
    }
    ToolError::Upstream(format!("fetching {url} failed: {}", causes.join(": ")))
}

/// The fetching client's resolver: the system's (`getaddrinfo` through
/// `tokio::net::lookup_host`), keeping only the addresses
/// [`fetch_allowed`] admits.
struct GuardedResolver {
    allow: Arc<Vec<IpNet>>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow = self.allow.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (kept, refused) = guard_addresses(&host, found, &allow);
            if kept.is_empty() {
                return Err(Box::new(Guarded(ToolError::Forbidden(refused))) as _);
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The addresses `host` resolved to that a fetch may connect to, and the refusal to
/// answer when there is none (naming each address refused and why).
fn guard_addresses(
    host: &str,
    found: Vec<SocketAddr>,
    allow: &[IpNet],
) -> (Vec<SocketAddr>, String) {
    let mut reasons = Vec::new();
    let kept: Vec<SocketAddr> = found
        .into_iter()
        .filter(|addr| match fetch_allowed(addr.ip(), allow) {
            Ok(()) => true,
            Err(e) => {
                reasons.push(e);
                false
            }
        })
        .collect();
    let refused = if reasons.is_empty() {
        format!("{host} resolves to no address")
    } else {
        format!(
            "{host} resolves to no address send_file may fetch from: {}",
            reasons.join("; ")
        )
    };
    (kept, refused)
}

/// At most [`MAX_REDIRECTS`] redirects, each to an `https` URL without user info
/// whose literal host the guard admits (a name goes through [`GuardedResolver`]).
fn redirect_policy(allow: Arc<Vec<IpNet>>) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > MAX_REDIRECTS {
            let refusal = ToolError::Upstream(format!(
                "more than {MAX_REDIRECTS} redirects, the last to {}",
                attempt.url()
            ));
            return attempt.error(Guarded(refusal));
        }
        match check_url(attempt.url(), &allow) {
            Ok(()) => attempt.follow(),
            Err(refusal) => {
                let refusal = match refusal {
                    ToolError::Forbidden(m) => {
                        ToolError::Forbidden(format!("a redirect to {}: {m}", attempt.url()))
                    }
                    ToolError::Invalid(m) => ToolError::Invalid(format!("a redirect: {m}")),
                    other => other,
                };
                attempt.error(Guarded(refusal))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    //! The path tests run on tokio's paused clock, the FIFO test on a thread of its
    //! own; the fetches on the real clock (real sockets and reqwest's timers: on the paused clock a fetch's
    //! timeouts would fire as soon as it waits on the network).
    use super::*;
    use std::net::TcpListener;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A 3×2 PNG's signature and IHDR (what sniffing reads).
    const PNG_3X2: [u8; 33] = [
        0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, b'I', b'H', b'D', b'R', 0, 0,
        0, 3, 0, 0, 0, 2, 8, 6, 0, 0, 0, 0x0b, 0x6e, 0x4d, 0x8a,
    ];

    /// A temp dir with `root/` (the one allowed directory, holding `pic.png` and
    /// `notes.txt`) and `outside/secret`.
    struct Tree {
        dir: tempfile::TempDir,
        sources: FileSources,
    }

    impl Tree {
        fn new(max_bytes: u64) -> Tree {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join("root")).unwrap();
            std::fs::create_dir(dir.path().join("outside")).unwrap();
            std::fs::write(dir.path().join("root/pic.png"), PNG_3X2).unwrap();
            std::fs::write(dir.path().join("root/notes.txt"), "hello\n").unwrap();
            std::fs::write(dir.path().join("outside/secret"), "secret\n").unwrap();
            let sources = FileSources::new(&FilesConfig {
                allowed_dirs: vec![dir.path().join("root")],
                max_bytes,
                ..FilesConfig::default()
            })
            .unwrap();
            Tree { dir, sources }
        }

        fn path(&self, rel: &str) -> String {
            format!("{}/{rel}", self.dir.path().display())
        }

        async fn read(&self, rel: &str) -> Result<Loaded, ToolError> {
            self.sources.read_path(&self.path(rel), u64::MAX).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_file_under_a_root_is_read_with_its_hash_name_and_dimensions() {
        let tree = Tree::new(1 << 20);
        let loaded = tree.read("root/pic.png").await.unwrap();
        assert_eq!(loaded.bytes, PNG_3X2);
        assert_eq!(loaded.file_name, "pic.png");
        assert_eq!(loaded.sha256, format!("{:x}", Sha256::digest(PNG_3X2)));
        assert_eq!(loaded.sha256.len(), 64);
        assert_eq!(loaded.sniffed.mimetype, "image/png");
        assert_eq!(
            (loaded.sniffed.width, loaded.sniffed.height),
            (Some(3), Some(2))
        );
        // `.` and a `..` that stays inside are fine.
        let loaded = tree.read("root/./sub/../notes.txt").await;
        assert_eq!(
            loaded.unwrap_err(),
            ToolError::NotFound(format!(
                "no file at {:?}",
                tree.path("root/./sub/../notes.txt")
            ))
        );
        std::fs::create_dir(tree.dir.path().join("root/sub")).unwrap();
        let loaded = tree.read("root/./sub/../notes.txt").await.unwrap();
        assert_eq!(loaded.bytes, b"hello\n");
        assert_eq!(loaded.sniffed.mimetype, "text/plain; charset=utf-8");
    }

    #[tokio::test(start_paused = true)]
    async fn a_symlink_inside_a_root_to_a_file_inside_is_followed() {
        let tree = Tree::new(1 << 20);
        std::os::unix::fs::symlink(tree.path("root/notes.txt"), tree.path("root/link")).unwrap();
        assert_eq!(tree.read("root/link").await.unwrap().bytes, b"hello\n");
    }

    #[tokio::test(start_paused = true)]
    async fn a_symlink_inside_a_root_to_a_file_or_directory_outside_is_forbidden() {
        let tree = Tree::new(1 << 20);
        std::os::unix::fs::symlink(tree.path("outside/secret"), tree.path("root/link")).unwrap();
        std::os::unix::fs::symlink(tree.path("outside"), tree.path("root/dir")).unwrap();
        for rel in ["root/link", "root/dir/secret"] {
            assert_eq!(
                tree.read(rel).await.unwrap_err(),
                outside(&tree.path(rel)),
                "{rel}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn dot_dot_out_of_a_root_is_forbidden_whether_the_file_exists_or_not() {
        let tree = Tree::new(1 << 20);
        for rel in [
            "root/../outside/secret",
            "root/../outside/missing",
            "root/../secret",
        ] {
            let refused = tree.read(rel).await.unwrap_err();
            assert_eq!(refused, outside(&tree.path(rel)), "{rel}");
            assert_eq!(refused.kind(), "forbidden");
        }
        // Outside altogether, missing or not: the same answer.
        for path in ["/etc/passwd", "/no/such/file"] {
            assert_eq!(
                tree.sources.read_path(path, u64::MAX).await.unwrap_err(),
                outside(path)
            );
        }
        // A sibling whose name starts with the root's is outside too.
        std::fs::create_dir(tree.dir.path().join("rootx")).unwrap();
        std::fs::write(tree.dir.path().join("rootx/f"), "x").unwrap();
        assert_eq!(
            tree.read("rootx/f").await.unwrap_err(),
            outside(&tree.path("rootx/f"))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn magic_links_devices_and_sockets_reached_from_a_root_are_never_read() {
        let tree = Tree::new(1 << 20);
        let secret = std::fs::File::open(tree.path("outside/secret")).unwrap();
        let fd = std::os::unix::io::AsRawFd::as_raw_fd(&secret);
        let root = tree.path("root");
        // Spelt through /proc or /dev/fd: outside as written.
        for path in [
            format!("/proc/self/root{root}/notes.txt"),
            format!("/proc/self/fd/{fd}"),
            format!("/dev/fd/{fd}"),
        ] {
            assert_eq!(
                tree.sources.read_path(&path, u64::MAX).await.unwrap_err(),
                outside(&path)
            );
        }
        // Symlinked from inside: judged by what was opened.
        for (name, target) in [
            (
                "procroot",
                format!("/proc/self/root{}", tree.path("outside/secret")),
            ),
            ("procfd", format!("/proc/self/fd/{fd}")),
            ("devfd", format!("/dev/fd/{fd}")),
            ("zero", "/dev/zero".to_owned()),
            ("urandom", "/dev/urandom".to_owned()),
            ("environ", "/proc/self/environ".to_owned()),
        ] {
            std::os::unix::fs::symlink(&target, tree.path(&format!("root/{name}"))).unwrap();
            let rel = format!("root/{name}");
            assert_eq!(
                tree.read(&rel).await.unwrap_err(),
                outside(&tree.path(&rel))
            );
        }
        let _socket = std::os::unix::net::UnixListener::bind(tree.path("root/sock")).unwrap();
        assert_eq!(
            tree.read("root/sock").await.unwrap_err(),
            ToolError::Invalid(format!(
                "{:?} is not a regular file",
                tree.path("root/sock")
            ))
        );
        // A sparse terabyte is refused by its size, before a byte is read.
        std::fs::File::create(tree.path("root/sparse"))
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        assert_eq!(
            tree.read("root/sparse").await.unwrap_err().kind(),
            "too_large"
        );
    }

    /// On a thread of its own with its own runtime: were the open to block, the
    /// test fails after the guard and leaves the thread behind (a runtime's drop would
    /// wait for its blocking task for ever).
    #[test]
    fn a_fifo_under_a_root_is_not_a_regular_file_and_never_blocks() {
        let tree = Tree::new(1 << 20);
        let path = tree.path("root/fifo");
        let fifo = std::ffi::CString::new(path.clone()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let sources = tree.sources.clone();
        let fifo_path = path.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let _ = tx.send(runtime.block_on(sources.read_path(&fifo_path, u64::MAX)));
        });
        let read = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("reading a FIFO blocked");
        assert_eq!(
            read.unwrap_err(),
            ToolError::Invalid(format!("{path:?} is not a regular file"))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_directory_a_relative_path_and_a_missing_file_are_named() {
        let tree = Tree::new(1 << 20);
        std::fs::create_dir(tree.dir.path().join("root/d")).unwrap();
        assert_eq!(
            tree.read("root/d").await.unwrap_err().kind(),
            "invalid_params"
        );
        assert_eq!(
            tree.sources
                .read_path("root/pic.png", u64::MAX)
                .await
                .unwrap_err(),
            ToolError::Invalid("\"root/pic.png\" is not an absolute path".to_owned())
        );
        assert_eq!(
            tree.read("root/missing.png").await.unwrap_err(),
            ToolError::NotFound(format!("no file at {:?}", tree.path("root/missing.png")))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_allowed_directory_turns_paths_off() {
        let sources = FileSources::new(&FilesConfig::default()).unwrap();
        assert_eq!(
            sources
                .read_path("/etc/hostname", u64::MAX)
                .await
                .unwrap_err(),
            ToolError::Invalid(
                "send_file from a path is off: the operator allows no directory \
                 (files.allowed_dirs)"
                    .to_owned()
            )
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_file_over_the_callers_cap_or_the_configured_one_is_too_large() {
        let tree = Tree::new(1 << 20);
        let path = tree.path("root/pic.png");
        assert_eq!(
            tree.sources.read_path(&path, 32).await.unwrap_err(),
            ToolError::TooLarge(format!(
                "{path:?} is larger than 32 bytes (files.max_bytes)"
            ))
        );
        assert_eq!(
            tree.sources.read_path(&path, 33).await.unwrap().bytes.len(),
            33
        );
        let small = Tree::new(5);
        assert_eq!(
            small.read("root/notes.txt").await.unwrap_err().kind(),
            "too_large"
        );
        let exact = Tree::new(6);
        assert_eq!(
            exact.read("root/notes.txt").await.unwrap().bytes,
            b"hello\n"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_root_written_with_dot_dot_after_a_symlink_tells_nothing_of_its_lexical_parent() {
        // `allowed_dirs = ["<d>/link/.."]` with `link` -> `<d>/real/sub`: the directory
        // is `<d>/real`, not `<d>` as the text reads.
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("real/sub")).unwrap();
        std::fs::write(d.join("real/f"), "in").unwrap();
        std::fs::write(d.join("secret"), "out").unwrap();
        std::os::unix::fs::symlink(d.join("real/sub"), d.join("link")).unwrap();
        let sources = FileSources::new(&FilesConfig {
            allowed_dirs: vec![d.join("link/..")],
            ..FilesConfig::default()
        })
        .unwrap();
        let read = |p: PathBuf| {
            let sources = sources.clone();
            async move { sources.read_path(&p.display().to_string(), u64::MAX).await }
        };
        assert_eq!(read(d.join("real/f")).await.unwrap().bytes, b"in");
        // A root that is itself a symlink is still read through its written name.
        std::os::unix::fs::symlink(d.join("real"), d.join("rootlink")).unwrap();
        let through_link = FileSources::new(&FilesConfig {
            allowed_dirs: vec![d.join("rootlink")],
            ..FilesConfig::default()
        })
        .unwrap();
        let f = d.join("rootlink/f").display().to_string();
        assert_eq!(through_link.read_path(&f, 9).await.unwrap().bytes, b"in");
        // Outside, present or missing: the same answer.
        for rel in ["secret", "missing"] {
            let path = d.join(rel);
            assert_eq!(
                read(path.clone()).await.unwrap_err(),
                outside(&path.display().to_string()),
                "{rel}"
            );
        }
    }

    #[test]
    fn a_missing_allowed_directory_fails_the_start() {
        let config = FilesConfig {
            allowed_dirs: vec![PathBuf::from("/no/such/dir")],
            ..FilesConfig::default()
        };
        let error = FileSources::new(&config).unwrap_err();
        assert!(format!("{error:#}").starts_with("files.allowed_dirs: /no/such/dir: "));
    }

    /// A listener nothing should reach: `accepted_nothing` after the fetch returned
    /// (a connection the kernel accepted waits in its backlog).
    struct Trap(TcpListener);

    impl Trap {
        fn on(ip: &str) -> Trap {
            let listener = TcpListener::bind((ip, 0)).unwrap();
            listener.set_nonblocking(true).unwrap();
            Trap(listener)
        }

        fn port(&self) -> u16 {
            self.0.local_addr().unwrap().port()
        }

        fn assert_accepted_nothing(&self) {
            match self.0.accept() {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                other => panic!("the guarded address was connected to: {other:?}"),
            }
        }
    }

    fn public_sources() -> FileSources {
        FileSources::new(&FilesConfig::default()).unwrap()
    }

    #[tokio::test]
    async fn only_https_urls_without_user_info_are_fetched() {
        let sources = public_sources();
        for (url, message) in [
            (
                "http://example.org/a.png",
                "http://example.org/a.png is not an https URL: send_file fetches https only",
            ),
            (
                "file:///etc/passwd",
                "file:///etc/passwd is not an https URL: send_file fetches https only",
            ),
            (
                "https://user:pw@example.org/a.png",
                "example.org: a URL to fetch carries no user info",
            ),
        ] {
            assert_eq!(
                sources.fetch_url(url, u64::MAX).await.unwrap_err(),
                ToolError::Invalid(message.to_owned()),
                "{url}"
            );
        }
        assert_eq!(
            sources.fetch_url("not a url", 1).await.unwrap_err().kind(),
            "invalid_params"
        );
        let off = FileSources::new(&FilesConfig {
            fetch_urls: false,
            ..FilesConfig::default()
        })
        .unwrap();
        assert_eq!(
            off.fetch_url("https://example.org/", 1)
                .await
                .unwrap_err()
                .kind(),
            "invalid_params"
        );
    }

    #[tokio::test]
    async fn loopback_in_any_spelling_is_refused_before_any_connection() {
        let sources = public_sources();
        let trap = Trap::on("127.0.0.1");
        let port = trap.port();
        for host in [
            "127.0.0.1",
            "2130706433",
            "0x7f.1",
            "0177.0.0.1",
            "[::ffff:127.0.0.1]",
        ] {
            let url = format!("https://{host}:{port}/x");
            let refused = sources.fetch_url(&url, u64::MAX).await.unwrap_err();
            let shown = if host.starts_with('[') {
                "::ffff:127.0.0.1"
            } else {
                "127.0.0.1"
            };
            assert_eq!(
                refused,
                ToolError::Forbidden(format!(
                    "{shown} is a loopback address: send_file fetches only from public \
                     addresses (files.fetch_allow_networks allows others)"
                )),
                "{url}"
            );
        }
        trap.assert_accepted_nothing();
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_by_the_resolver_before_any_connection() {
        let sources = public_sources();
        let trap = Trap::on("127.0.0.1");
        let url = format!("https://localhost:{}/x", trap.port());
        let refused = sources.fetch_url(&url, u64::MAX).await.unwrap_err();
        let ToolError::Forbidden(message) = &refused else {
            panic!("{refused:?}");
        };
        assert!(
            message.starts_with("localhost resolves to no address send_file may fetch from: "),
            "{message}"
        );
        assert!(
            message.contains("127.0.0.1 is a loopback address"),
            "{message}"
        );
        trap.assert_accepted_nothing();
    }

    #[test]
    fn the_resolver_keeps_the_allowed_addresses_only() {
        let found: Vec<SocketAddr> = ["127.0.0.1:0", "93.184.215.14:0", "[::1]:0"]
            .map(|s| s.parse().unwrap())
            .to_vec();
        let (kept, _) = guard_addresses("h", found.clone(), &[]);
        assert_eq!(kept, vec![found[1]]);
        let (kept, refused) = guard_addresses("h", vec![found[0], found[2]], &[]);
        assert!(kept.is_empty());
        assert_eq!(
            refused,
            "h resolves to no address send_file may fetch from: 127.0.0.1 is a loopback \
             address: send_file fetches only from public addresses \
             (files.fetch_allow_networks allows others); ::1 is a loopback address: \
             send_file fetches only from public addresses (files.fetch_allow_networks \
             allows others)"
        );
        let allow = ["::1/128".parse().unwrap()];
        let (kept, _) = guard_addresses("h", found.clone(), &allow);
        assert_eq!(kept, vec![found[1], found[2]]);
        assert_eq!(
            guard_addresses("h", Vec::new(), &[]).1,
            "h resolves to no address"
        );
    }

    #[test]
    fn a_urls_file_name_is_its_last_segment_decoded() {
        for (url, name) in [
            ("https://h/a/b/report%20v2.pdf", "report v2.pdf"),
            ("https://h/a/b%2Fc.txt", "c.txt"),
            ("https://h/x.png?size=2#f", "x.png"),
            ("https://h/", FALLBACK_FILE_NAME),
            ("https://h", FALLBACK_FILE_NAME),
            ("https://h/a/..%2F..", FALLBACK_FILE_NAME),
        ] {
            assert_eq!(
                url_file_name(&reqwest::Url::parse(url).unwrap()),
                name,
                "{url}"
            );
        }
    }

    /// A loopback HTTPS server with a private CA: each path answers as its name says.
    struct Server {
        port: u16,
        ca_file: tempfile::NamedTempFile,
        /// Where `/redirect-out` points: a trap on 127.0.0.2 (loopback, not allowed).
        trap: Trap,
    }

    impl Server {
        async fn start() -> Server {
            use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
            use tokio_rustls::rustls;
            let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let ca_key = KeyPair::generate().unwrap();
            let ca = ca_params.self_signed(&ca_key).unwrap();
            let issuer = Issuer::from_params(&ca_params, &ca_key);
            let leaf_key = KeyPair::generate().unwrap();
            let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
                .unwrap()
                .signed_by(&leaf_key, &issuer)
                .unwrap();
            let ca_file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(ca_file.path(), ca.pem()).unwrap();
            let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            let config = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(
                    vec![leaf.der().clone()],
                    rustls::pki_types::PrivatePkcs8KeyDer::from(leaf_key.serialize_der()).into(),
                )
                .unwrap();
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let trap = Trap::on("127.0.0.2");
            let trap_port = trap.port();
            tokio::spawn(async move {
                loop {
                    let (tcp, _) = listener.accept().await.unwrap();
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        let Ok(mut tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let mut head = Vec::new();
                        let mut byte = [0u8; 1];
                        while !head.ends_with(b"\r\n\r\n") {
                            if tls.read(&mut byte).await.unwrap_or(0) == 0 {
                                return;
                            }
                            head.push(byte[0]);
                        }
                        let head = String::from_utf8_lossy(&head).into_owned();
                        let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
                        let answer = |status: &str, headers: &str, body: &[u8]| {
                            let mut out =
                                format!("HTTP/1.1 {status}\r\nconnection: close\r\n{headers}\r\n")
                                    .into_bytes();
                            out.extend_from_slice(body);
                            out
                        };
                        let location =
                            |to: String| format!("location: {to}\r\ncontent-length: 0\r\n");
                        let out = match path.as_str() {
                            "/pic.png" => answer(
                                "200 OK",
                                "content-type: text/html\r\ncontent-length: 33\r\n",
                                &PNG_3X2,
                            ),
                            "/redirect" => answer(
                                "302 Found",
                                &location(format!("https://127.0.0.1:{port}/pic.png")),
                                b"",
                            ),
                            "/redirect-out" => answer(
                                "302 Found",
                                &location(format!("https://127.0.0.2:{trap_port}/pic.png")),
                                b"",
                            ),
                            "/redirect-http" => answer(
                                "302 Found",
                                &location(format!("http://127.0.0.1:{port}/pic.png")),
                                b"",
                            ),
                            "/hops/0" => answer("200 OK", "content-length: 33\r\n", &PNG_3X2),
                            hops if hops.starts_with("/hops/") => {
                                let n: u32 = hops["/hops/".len()..].parse().unwrap();
                                answer("302 Found", &location(format!("/hops/{}", n - 1)), b"")
                            }
                            "/big" => {
                                // Claims a megabyte, sends ten bytes and holds the
                                // connection: only a refusal before reading returns.
                                let head = answer("200 OK", "content-length: 1048576\r\n", b"");
                                let _ = tls.write_all(&head).await;
                                let _ = tls.write_all(b"0123456789").await;
                                let _ = tls.flush().await;
                                std::future::pending::<()>().await;
                                unreachable!()
                            }
                            "/endless" => {
                                // No length: a body that never ends, in 1 KiB chunks.
                                let head = answer("200 OK", "", b"");
                                let _ = tls.write_all(&head).await;
                                let chunk = [b'a'; 1024];
                                while tls.write_all(&chunk).await.is_ok() {}
                                return;
                            }
                            _ => answer("404 Not Found", "content-length: 0\r\n", b""),
                        };
                        let _ = tls.write_all(&out).await;
                        let _ = tls.shutdown().await;
                    });
                }
            });
            Server {
                port,
                ca_file,
                trap,
            }
        }

        fn sources(&self, allow: &[&str], max_bytes: u64) -> FileSources {
            FileSources::new(&FilesConfig {
                fetch_allow_networks: allow.iter().map(|n| n.parse().unwrap()).collect(),
                fetch_ca_file: Some(self.ca_file.path().to_owned()),
                max_bytes,
                ..FilesConfig::default()
            })
            .unwrap()
        }

        fn url(&self, path: &str) -> String {
            format!("https://127.0.0.1:{}{path}", self.port)
        }
    }

    #[tokio::test]
    async fn an_allowed_server_is_fetched_and_its_bytes_sniffed_not_its_content_type() {
        let server = Server::start().await;
        let sources = server.sources(&["127.0.0.1/32"], 1 << 20);
        let loaded = sources
            .fetch_url(&server.url("/pic.png"), u64::MAX)
            .await
            .unwrap();
        assert_eq!(loaded.bytes, PNG_3X2);
        assert_eq!(loaded.file_name, "pic.png");
        assert_eq!(loaded.sha256, format!("{:x}", Sha256::digest(PNG_3X2)));
        assert_eq!(loaded.sniffed.mimetype, "image/png");
        assert_eq!(
            (loaded.sniffed.width, loaded.sniffed.height),
            (Some(3), Some(2))
        );
        // A redirect to an allowed address is followed; the name is the asked URL's.
        let loaded = sources
            .fetch_url(&server.url("/redirect"), u64::MAX)
            .await
            .unwrap();
        assert_eq!(
            (loaded.bytes.as_slice(), loaded.file_name.as_str()),
            (&PNG_3X2[..], "redirect")
        );
        assert_eq!(
            sources
                .fetch_url(&server.url("/nothing"), u64::MAX)
                .await
                .unwrap_err(),
            ToolError::Upstream(format!("{} answered 404 Not Found", server.url("/nothing")))
        );
    }

    #[tokio::test]
    async fn the_same_server_is_refused_without_the_allowlist() {
        let server = Server::start().await;
        let sources = server.sources(&[], 1 << 20);
        let refused = sources
            .fetch_url(&server.url("/pic.png"), u64::MAX)
            .await
            .unwrap_err();
        assert_eq!(refused.kind(), "forbidden");
        assert!(refused
            .message()
            .starts_with("127.0.0.1 is a loopback address"));
    }

    #[tokio::test]
    async fn a_redirect_to_a_loopback_address_not_allowed_is_refused_before_connecting() {
        let server = Server::start().await;
        let sources = server.sources(&["127.0.0.1/32"], 1 << 20);
        let refused = sources
            .fetch_url(&server.url("/redirect-out"), u64::MAX)
            .await
            .unwrap_err();
        let to = format!("https://127.0.0.2:{}/pic.png", server.trap.port());
        assert_eq!(
            refused,
            ToolError::Forbidden(format!(
                "a redirect to {to}: 127.0.0.2 is a loopback address: send_file fetches \
                 only from public addresses (files.fetch_allow_networks allows others)"
            ))
        );
        server.trap.assert_accepted_nothing();
    }

    #[tokio::test]
    async fn a_redirect_to_http_or_a_sixth_redirect_is_refused_and_a_fifth_followed() {
        let server = Server::start().await;
        let sources = server.sources(&["127.0.0.1/32"], 1 << 20);
        let refused = sources
            .fetch_url(&server.url("/redirect-http"), u64::MAX)
            .await
            .unwrap_err();
        assert_eq!(
            refused,
            ToolError::Invalid(format!(
                "a redirect: http://127.0.0.1:{}/pic.png is not an https URL: send_file \
                 fetches https only",
                server.port
            ))
        );
        // `/hops/N` redirects N times.
        let five = sources.fetch_url(&server.url("/hops/5"), u64::MAX).await;
        assert_eq!(five.unwrap().bytes, PNG_3X2);
        let refused = sources
            .fetch_url(&server.url("/hops/6"), u64::MAX)
            .await
            .unwrap_err();
        assert_eq!(
            refused,
            ToolError::Upstream(format!(
                "more than {MAX_REDIRECTS} redirects, the last to {}",
                server.url("/hops/0")
            ))
        );
    }

    #[tokio::test]
    async fn a_body_over_the_cap_is_refused_by_its_length_or_once_past_the_cap() {
        let server = Server::start().await;
        let sources = server.sources(&["127.0.0.1/32"], 4096);
        let url = server.url("/big");
        assert_eq!(
            sources.fetch_url(&url, u64::MAX).await.unwrap_err(),
            ToolError::TooLarge(format!("{url} is larger than 4096 bytes (files.max_bytes)"))
        );
        let url = server.url("/endless");
        assert_eq!(
            sources.fetch_url(&url, u64::MAX).await.unwrap_err(),
            ToolError::TooLarge(format!("{url} is larger than 4096 bytes (files.max_bytes)"))
        );
        // The caller's cap, when smaller, is the one kept.
        let url = server.url("/pic.png");
        let big = server.sources(&["127.0.0.1/32"], 1 << 20);
        assert_eq!(
            big.fetch_url(&url, 32).await.unwrap_err(),
            ToolError::TooLarge(format!("{url} is larger than 32 bytes (files.max_bytes)"))
        );
        assert_eq!(big.fetch_url(&url, 33).await.unwrap().bytes, PNG_3X2);
    }
}

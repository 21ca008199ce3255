//! `send_file`'s sources without IO: which addresses a fetch may connect to (the SSRF
//! guard: [`address_refused`], [`fetch_allowed`]), the file name a sent file carries
//! ([`file_name`]), what the bytes are ([`sniff`]: the content type from the bytes
//! alone, an image's dimensions from its header) and whether a real path lies under
//! one of the operator's directories ([`under_roots`]). `mc_server::files` reads the
//! paths and fetches the URLs with them.

pub use ipnet;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// Default `files.max_bytes`: 10 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// The `[files]` table: where `send_file` may take a file from (see the config
/// module's docs for each key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilesConfig {
    /// Absolute paths, as written (the server canonicalizes them at start); empty:
    /// no file is sent from a path.
    pub allowed_dirs: Vec<PathBuf>,
    /// The largest file read or fetched, in bytes; greater than zero.
    pub max_bytes: u64,
    /// Whether `https` URLs are fetched.
    pub fetch_urls: bool,
    /// Networks a fetch may reach although [`address_refused`] refuses them.
    pub fetch_allow_networks: Vec<IpNet>,
    /// A PEM file of root certificates trusted for fetches besides the system's;
    /// absolute (a relative one is resolved against the config file's directory).
    pub fetch_ca_file: Option<PathBuf>,
}

impl Default for FilesConfig {
    /// No directory, [`DEFAULT_MAX_FILE_BYTES`], URL fetches on, no allowed network,
    /// no added CA.
    fn default() -> Self {
        FilesConfig {
            allowed_dirs: Vec::new(),
            max_bytes: DEFAULT_MAX_FILE_BYTES,
            fetch_urls: true,
            fetch_allow_networks: Vec::new(),
            fetch_ca_file: None,
        }
    }
}

/// The IPv4 special-purpose blocks (IANA's registry, RFC 6890 and after) a fetch never
/// connects to, each with the reason named in a refusal. Everything else is public
/// unicast.
const V4_BLOCKS: [(Ipv4Net, &str); 15] = [
    (v4(0, 0, 0, 0, 8), "\"this network\""),
    (v4(10, 0, 0, 0, 8), "private"),
    (
        v4(100, 64, 0, 0, 10),
        "shared address space (carrier-grade NAT)",
    ),
    (v4(127, 0, 0, 0, 8), "loopback"),
    (v4(169, 254, 0, 0, 16), "link-local (cloud metadata)"),
    (v4(172, 16, 0, 0, 12), "private"),
    (v4(192, 0, 0, 0, 24), "IETF protocol assignments"),
    (v4(192, 0, 2, 0, 24), "documentation (TEST-NET-1)"),
    (v4(192, 88, 99, 0, 24), "6to4 relay anycast"),
    (v4(192, 168, 0, 0, 16), "private"),
    (v4(198, 18, 0, 0, 15), "benchmarking"),
    (v4(198, 51, 100, 0, 24), "documentation (TEST-NET-2)"),
    (v4(203, 0, 113, 0, 24), "documentation (TEST-NET-3)"),
    (v4(224, 0, 0, 0, 4), "multicast"),
    (v4(240, 0, 0, 0, 4), "reserved (and broadcast)"),
];

/// What an IPv6 block means for a fetch.
#[derive(Clone, Copy)]
enum V6Rule {
    /// Never fetched from, for this reason.
    Refused(&'static str),
    /// The last 32 bits are an IPv4 address that reaches the same host (IPv4-mapped,
    /// IPv4-compatible, NAT64's well-known prefix): judged as that address.
    EmbeddedLast32,
    /// 6to4: bits 16 to 47 are the IPv4 address of the site: judged as that address.
    Embedded6to4,
}

/// The IPv6 special-purpose blocks, in the order they are tried (the first that holds
/// the address decides: `::` and `::1` come before the IPv4-compatible `::/96`).
const V6_BLOCKS: [(Ipv6Net, V6Rule); 15] = [
    (
        v6([0, 0, 0, 0, 0, 0, 0, 0], 128),
        V6Rule::Refused("unspecified"),
    ),
    (
        v6([0, 0, 0, 0, 0, 0, 0, 1], 128),
        V6Rule::Refused("loopback"),
    ),
    (
        v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96),
        V6Rule::EmbeddedLast32,
    ),
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 96), V6Rule::EmbeddedLast32),
    (
        v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96),
        V6Rule::EmbeddedLast32,
    ),
    (
        v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),
        V6Rule::Refused("local-use NAT64"),
    ),
    (
        v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64),
        V6Rule::Refused("discard-only"),
    ),
    (
        v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32),
        V6Rule::Refused("Teredo"),
    ),
    (
        v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32),
        V6Rule::Refused("documentation"),
    ),
    (v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16), V6Rule::Embedded6to4),
    (
        v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
        V6Rule::Refused("unique local (private)"),
    ),
    (
        v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
        V6Rule::Refused("link-local"),
    ),
    (
        v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),
        V6Rule::Refused("site-local (private)"),
    ),
    (
        v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),
        V6Rule::Refused("multicast"),
    ),
    // Everything else in ::/8 (reserved by the IETF) that the rows above leave.
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 8), V6Rule::Refused("reserved")),
];

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), prefix)
}

const fn v6(s: [u16; 8], prefix: u8) -> Ipv6Net {
    Ipv6Net::new_assert(
        Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        prefix,
    )
}

/// Why `ip` may not be fetched from: the name of its special-purpose block
/// (`"loopback"`, `"private"`, `"link-local (cloud metadata)"`, …), or `None` for a
/// public unicast address. An IPv6 address that carries an IPv4 address reaching the
/// same host (IPv4-mapped `::ffff:0:0/96`, IPv4-compatible `::/96`, NAT64
/// `64:ff9b::/96`, 6to4 `2002::/16`) is judged by that IPv4 address, so
/// `::ffff:127.0.0.1` is `"loopback"` and `::ffff:8.8.8.8` is public.
pub fn address_refused(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(ip) => v4_refused(ip),
        IpAddr::V6(ip) => {
            let (_, rule) = V6_BLOCKS.iter().find(|(net, _)| net.contains(&ip))?;
            let o = ip.octets();
            match *rule {
                V6Rule::Refused(reason) => Some(reason),
                V6Rule::EmbeddedLast32 => v4_refused(Ipv4Addr::new(o[12], o[13], o[14], o[15])),
                V6Rule::Embedded6to4 => v4_refused(Ipv4Addr::new(o[2], o[3], o[4], o[5])),
            }
        }
    }
}

fn v4_refused(ip: Ipv4Addr) -> Option<&'static str> {
    V4_BLOCKS
        .iter()
        .find(|(net, _)| net.contains(&ip))
        .map(|(_, reason)| *reason)
}

/// Whether a fetch may connect to `ip`: a public address ([`address_refused`] says
/// `None`), or one inside a net of `allow` (the operator's
/// `files.fetch_allow_networks`, like Synapse's `url_preview_ip_range_whitelist`). An
/// IPv4-mapped address is also tried against `allow` as its IPv4 address, so
/// `127.0.0.1/32` admits `::ffff:127.0.0.1`.
///
/// # Errors
/// The address and why it is refused: `"127.0.0.2 is a loopback address: send_file
/// fetches only from public addresses (files.fetch_allow_networks allows others)"`.
pub fn fetch_allowed(ip: IpAddr, allow: &[IpNet]) -> Result<(), String> {
    let Some(reason) = address_refused(ip) else {
        return Ok(());
    };
    let canonical = ip.to_canonical();
    if allow
        .iter()
        .any(|net| net.contains(&ip) || net.contains(&canonical))
    {
        return Ok(());
    }
    Err(format!(
        "{ip} is a {reason} address: send_file fetches only from public addresses \
         (files.fetch_allow_networks allows others)"
    ))
}

/// The longest file name sent, in bytes (what most file systems keep).
pub const MAX_FILE_NAME_BYTES: usize = 255;

/// The file name a sent file carries (its Matrix `filename`), from a path or a URL's
/// last segment (already percent-decoded): the part after the last `/` or `\`, with
/// control characters (C0, DEL, C1) and the bidirectional formatting characters
/// (Unicode's `Bidi_Control`: U+061C, U+200E, U+200F, U+202A–U+202E,
/// U+2066–U+2069, which can make `gpj.exe` read as `exe.jpg`) removed rather than
/// refused (a name is a label, not a path: dropping them loses nothing the receiver
/// needs), then trimmed of whitespace and cut to [`MAX_FILE_NAME_BYTES`] bytes on a
/// character boundary.
///
/// # Errors
/// When nothing is left, or what is left is `.` or `..`.
pub fn file_name(raw: &str) -> Result<String, String> {
    let last = raw.rsplit(['/', '\\']).next().unwrap_or(raw);
    let kept: String = last.chars().filter(|&c| !is_stripped(c)).collect();
    let trimmed = kept.trim();
    let mut end = trimmed.len().min(MAX_FILE_NAME_BYTES);
    while !trimmed.is_char_boundary(end) {
        end -= 1;
    }
    match trimmed[..end].trim_end() {
        "" => Err(format!("{raw:?} names no file")),
        "." | ".." => Err(format!("{raw:?} is not a file name")),
        name => Ok(name.to_owned()),
    }
}

fn is_stripped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// What a file is, from its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sniffed {
    /// The content type (`image/png`, `text/plain; charset=utf-8`,
    /// `application/octet-stream`, …).
    pub mimetype: String,
    /// Which Matrix message type carries it.
    pub kind: MediaKind,
    /// An [`MediaKind::Image`]'s width in pixels; `None` for anything else.
    pub width: Option<u32>,
    /// An [`MediaKind::Image`]'s height in pixels; `None` for anything else.
    pub height: Option<u32>,
}

/// The Matrix message type a file is sent as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediaKind {
    /// `m.image`: an image clients render, whose dimensions were read.
    Image,
    /// `m.video`.
    Video,
    /// `m.audio`.
    Audio,
    /// `m.file`: anything else.
    File,
}

impl MediaKind {
    /// The `msgtype`: `m.image`, `m.video`, `m.audio` or `m.file`.
    pub fn msgtype(self) -> &'static str {
        match self {
            MediaKind::Image => "m.image",
            MediaKind::Video => "m.video",
            MediaKind::Audio => "m.audio",
            MediaKind::File => "m.file",
        }
    }
}

/// The image types Matrix clients render inline, sent as `m.image`.
const RENDERED_IMAGES: [&str; 5] = [
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "image/bmp",
];

/// The content type for bytes that are valid UTF-8 without NUL and match no signature.
pub const TEXT_PLAIN: &str = "text/plain; charset=utf-8";
/// The content type for anything else that matches no signature.
pub const OCTET_STREAM: &str = "application/octet-stream";

/// What `bytes` are, from the bytes alone (never a name or a `Content-Type` header):
/// the content type by the magic numbers the `infer` crate knows; with none,
/// [`TEXT_PLAIN`] for valid UTF-8 without NUL, else [`OCTET_STREAM`]. A PNG, JPEG,
/// GIF, WebP or BMP is an [`MediaKind::Image`] with its width and height read from
/// its header (`imagesize`); one whose header gives no size (or a zero one) is a
/// [`MediaKind::File`] of its type. Video and audio are by `infer`'s matcher type;
/// every other type is a [`MediaKind::File`].
pub fn sniff(bytes: &[u8]) -> Sniffed {
    let file = |mimetype: &str, kind| Sniffed {
        mimetype: mimetype.to_owned(),
        kind,
        width: None,
        height: None,
    };
    let Some(found) = infer::get(bytes) else {
        let text = std::str::from_utf8(bytes).is_ok_and(|s| !s.contains('\0'));
        return file(
            if text { TEXT_PLAIN } else { OCTET_STREAM },
            MediaKind::File,
        );
    };
    let mimetype = found.mime_type();
    let kind = match found.matcher_type() {
        infer::MatcherType::Video => MediaKind::Video,
        infer::MatcherType::Audio => MediaKind::Audio,
        infer::MatcherType::Image => {
            // imagesize is built for the rendered types only; the list says so too.
            let size = RENDERED_IMAGES
                .contains(&mimetype)
                .then(|| image_size(bytes))
                .flatten();
            if let Some((width, height)) = size {
                return Sniffed {
                    mimetype: mimetype.to_owned(),
                    kind: MediaKind::Image,
                    width: Some(width),
                    height: Some(height),
                };
            }
            MediaKind::File
        }
        _ => MediaKind::File,
    };
    file(mimetype, kind)
}

/// The width and height an image's header gives, both greater than zero and fitting
/// a `u32`.
fn image_size(bytes: &[u8]) -> Option<(u32, u32)> {
    let size = imagesize::blob_size(bytes).ok()?;
    let width = u32::try_from(size.width).ok().filter(|&w| w > 0)?;
    let height = u32::try_from(size.height).ok().filter(|&h| h > 0)?;
    Some((width, height))
}

/// Whether `real` (a path with no symlink and no `..` left: what was opened) lies under
/// one of `roots` (canonical too), compared component by component, so `/srv/a`
/// admits `/srv/a/x` and `/srv/a` itself but not `/srv/ab`.
pub fn under_roots(real: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|root| real.starts_with(root))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use url::{Host, Url};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The host `url` parses to, as an address.
    fn url_ip(url: &str) -> IpAddr {
        match Url::parse(url).unwrap().host().unwrap() {
            Host::Ipv4(v4) => IpAddr::V4(v4),
            Host::Ipv6(v6) => IpAddr::V6(v6),
            Host::Domain(d) => panic!("{url} has the domain {d}"),
        }
    }

    #[test]
    fn each_special_purpose_block_is_refused_with_its_name() {
        for (addr, reason) in [
            ("0.0.0.0", "\"this network\""),
            ("0.1.2.3", "\"this network\""),
            ("10.1.2.3", "private"),
            ("100.64.0.1", "shared address space (carrier-grade NAT)"),
            (
                "100.127.255.255",
                "shared address space (carrier-grade NAT)",
            ),
            ("127.0.0.1", "loopback"),
            ("127.255.0.2", "loopback"),
            ("169.254.169.254", "link-local (cloud metadata)"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.0.0.8", "IETF protocol assignments"),
            ("192.0.2.1", "documentation (TEST-NET-1)"),
            ("192.88.99.1", "6to4 relay anycast"),
            ("192.168.1.1", "private"),
            ("198.19.0.1", "benchmarking"),
            ("198.51.100.7", "documentation (TEST-NET-2)"),
            ("203.0.113.9", "documentation (TEST-NET-3)"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved (and broadcast)"),
            ("255.255.255.255", "reserved (and broadcast)"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local (cloud metadata)"),
            ("::ffff:0.0.0.0", "\"this network\""),
            ("::127.0.0.1", "loopback"),
            ("::10.0.0.1", "private"),
            ("64:ff9b::a9fe:a9fe", "link-local (cloud metadata)"),
            ("64:ff9b::7f00:1", "loopback"),
            ("64:ff9b:1::1", "local-use NAT64"),
            ("100::1", "discard-only"),
            ("2001::1", "Teredo"),
            ("2001:db8::1", "documentation"),
            ("2002:7f00:1::", "loopback"),
            ("2002:c0a8:101::1", "private"),
            ("fc00::1", "unique local (private)"),
            ("fd00:ec2::254", "unique local (private)"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local (private)"),
            ("ff02::1", "multicast"),
            ("1::", "reserved"),
        ] {
            assert_eq!(address_refused(ip(addr)), Some(reason), "{addr}");
        }
    }

    #[test]
    fn public_addresses_and_the_edges_of_the_blocks_are_allowed() {
        for addr in [
            "8.8.8.8",
            "1.1.1.1",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.1.0",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2001:4860:4860::8888",
            "fbff::1",
            "fe7f::1",
        ] {
            assert_eq!(address_refused(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn decimal_octal_and_hex_hosts_are_the_loopback_address_the_url_crate_reads() {
        for url in [
            "https://2130706433/",
            "https://0x7f.1/",
            "https://0177.0.0.1/",
            "https://0x7f000001/",
            "https://127.1/",
        ] {
            assert_eq!(url_ip(url), ip("127.0.0.1"), "{url}");
            assert_eq!(
                fetch_allowed(url_ip(url), &[]).unwrap_err(),
                "127.0.0.1 is a loopback address: send_file fetches only from public \
                 addresses (files.fetch_allow_networks allows others)",
                "{url}"
            );
        }
        assert_eq!(
            url_ip("https://0xa9.0xfe.0xa9.0xfe/"),
            ip("169.254.169.254")
        );
        assert!(fetch_allowed(url_ip("https://0xa9.0xfe.0xa9.0xfe/"), &[]).is_err());
        for (url, addr, reason) in [
            (
                "https://[::ffff:127.0.0.1]/",
                "::ffff:127.0.0.1",
                "loopback",
            ),
            (
                "https://[::ffff:169.254.169.254]/",
                "::ffff:169.254.169.254",
                "link-local (cloud metadata)",
            ),
            (
                "https://[64:ff9b::a9fe:a9fe]/",
                "64:ff9b::a9fe:a9fe",
                "link-local (cloud metadata)",
            ),
            ("https://[2002:7f00:1::]/", "2002:7f00:1::", "loopback"),
            ("https://[::]/", "::", "unspecified"),
        ] {
            assert_eq!(url_ip(url), ip(addr), "{url}");
            let refused = fetch_allowed(url_ip(url), &[]).unwrap_err();
            assert!(
                refused.starts_with(&format!("{} is a {reason} address", ip(addr))),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_public_address_is_allowed_without_an_allowlist() {
        assert_eq!(fetch_allowed(ip("93.184.215.14"), &[]), Ok(()));
        assert_eq!(
            fetch_allowed(ip("2606:2800:21f:cb07:6820:80da:af6b:8b2c"), &[]),
            Ok(())
        );
    }

    #[test]
    fn the_allowlist_admits_its_nets_and_no_more() {
        let allow: Vec<IpNet> = vec!["127.0.0.1/32".parse().unwrap(), "fd00::/8".parse().unwrap()];
        assert_eq!(fetch_allowed(ip("127.0.0.1"), &allow), Ok(()));
        assert_eq!(fetch_allowed(ip("::ffff:127.0.0.1"), &allow), Ok(()));
        assert_eq!(fetch_allowed(ip("fd12::1"), &allow), Ok(()));
        for refused in [
            "127.0.0.2",
            "::1",
            "fc00::1",
            "10.0.0.1",
            "::ffff:127.0.0.2",
        ] {
            assert!(fetch_allowed(ip(refused), &allow).is_err(), "{refused}");
        }
        assert!(fetch_allowed(ip("127.0.0.2"), &allow)
            .unwrap_err()
            .starts_with("127.0.0.2 is a loopback address"));
    }

    proptest! {
        #[test]
        fn an_ipv4_address_and_its_ipv4_mapped_form_are_judged_alike(bits: u32) {
            let v4 = Ipv4Addr::from(bits);
            let mapped = IpAddr::V6(v4.to_ipv6_mapped());
            prop_assert_eq!(address_refused(IpAddr::V4(v4)), address_refused(mapped));
            prop_assert_eq!(
                address_refused(IpAddr::V4(v4)).is_some(),
                fetch_allowed(mapped, &[]).is_err()
            );
        }
    }

    #[test]
    fn the_file_name_is_the_last_component_without_controls_trimmed() {
        for (raw, name) in [
            ("report.pdf", "report.pdf"),
            ("/srv/files/report.pdf", "report.pdf"),
            ("C:\\Users\\a\\report.pdf", "report.pdf"),
            ("../../etc/passwd", "passwd"),
            ("  a b.txt \t", "a b.txt"),
            ("bad\nname\u{7f}\u{85}.txt", "badname.txt"),
            ("invoice\u{202E}fdp.exe", "invoicefdp.exe"),
            // Every Bidi_Control character (PropList.txt), the Arabic letter mark too.
            (
                "a\u{61C}b\u{200E}\u{200F}\u{202A}\u{202B}\u{202C}\u{202D}\u{2066}\u{2067}\u{2068}\u{2069}.png",
                "ab.png",
            ),
            ("é.png", "é.png"),
        ] {
            assert_eq!(file_name(raw), Ok(name.to_owned()), "{raw:?}");
        }
        for raw in [
            "", "/", "dir/", " \n ", ".", "..", "a/..", "x\\.", "\u{202E}",
        ] {
            assert!(file_name(raw).is_err(), "{raw:?}");
        }
    }

    #[test]
    fn a_long_file_name_is_cut_to_255_bytes_on_a_character_boundary() {
        let long = "é".repeat(200); // 400 bytes
        let cut = file_name(&long).unwrap();
        assert_eq!(cut.len(), 254);
        assert_eq!(cut, "é".repeat(127));
        let ascii = "a".repeat(300);
        assert_eq!(file_name(&ascii).unwrap().len(), MAX_FILE_NAME_BYTES);
        let exact = "b".repeat(MAX_FILE_NAME_BYTES);
        assert_eq!(file_name(&exact).unwrap(), exact);
        let spaced = format!("{} x", "c".repeat(254));
        assert_eq!(file_name(&spaced).unwrap(), "c".repeat(254));
    }

    /// A 3×2 PNG's signature and IHDR (imagesize and infer read no further).
    const PNG_3X2: [u8; 33] = [
        0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, b'I', b'H', b'D', b'R', 0, 0,
        0, 3, 0, 0, 0, 2, 8, 6, 0, 0, 0, 0x0b, 0x6e, 0x4d, 0x8a,
    ];

    #[test]
    fn a_png_is_an_image_with_its_dimensions() {
        assert_eq!(
            sniff(&PNG_3X2),
            Sniffed {
                mimetype: "image/png".to_owned(),
                kind: MediaKind::Image,
                width: Some(3),
                height: Some(2),
            }
        );
    }

    #[test]
    fn a_gif_is_an_image_and_one_whose_header_is_cut_is_a_file() {
        let gif = b"GIF89a\x05\x00\x07\x00\x00\x00\x00";
        let sniffed = sniff(gif);
        assert_eq!(
            (sniffed.kind, sniffed.width, sniffed.height),
            (MediaKind::Image, Some(5), Some(7))
        );
        assert_eq!(sniffed.mimetype, "image/gif");
        let cut = sniff(&PNG_3X2[..12]);
        assert_eq!(
            (cut.mimetype.as_str(), cut.kind),
            ("image/png", MediaKind::File)
        );
        assert_eq!((cut.width, cut.height), (None, None));
        for zero in [
            &b"GIF89a\x00\x00\x07\x00\x00\x00\x00"[..],
            &b"GIF89a\x05\x00\x00\x00\x00\x00\x00"[..],
        ] {
            assert_eq!(sniff(zero).kind, MediaKind::File);
        }
    }

    #[test]
    fn an_image_type_clients_do_not_render_is_a_file() {
        let tiff = b"II*\x00\x08\x00\x00\x00\x00\x00";
        let sniffed = sniff(tiff);
        assert_eq!(sniffed.mimetype, "image/tiff");
        assert_eq!((sniffed.kind, sniffed.width), (MediaKind::File, None));
    }

    #[test]
    fn audio_and_video_are_by_their_signature() {
        let mut mp4 = b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom".to_vec();
        mp4.extend([0; 16]);
        let video = sniff(&mp4);
        assert_eq!(
            (video.mimetype.as_str(), video.kind),
            ("video/mp4", MediaKind::Video)
        );
        let ogg = sniff(b"OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x1e\x01vorbis");
        assert_eq!(ogg.kind, MediaKind::Audio, "{ogg:?}");
        let flac = sniff(b"fLaC\x00\x00\x00\x22");
        assert_eq!(
            (flac.mimetype.as_str(), flac.kind),
            ("audio/x-flac", MediaKind::Audio)
        );
    }

    #[test]
    fn text_and_unknown_bytes_get_the_fallback_types_whatever_they_claim() {
        assert_eq!(sniff(b"hello, world\n").mimetype, TEXT_PLAIN);
        assert_eq!(sniff("grüße".as_bytes()).mimetype, TEXT_PLAIN);
        assert_eq!(sniff(b"").mimetype, TEXT_PLAIN);
        assert_eq!(sniff(b"nul\0inside").mimetype, OCTET_STREAM);
        assert_eq!(sniff(&[0xff, 0xfe, 0x41]).mimetype, OCTET_STREAM);
        // A name or header saying PNG changes nothing: only the bytes count.
        let sniffed = sniff(b"<svg xmlns='http://www.w3.org/2000/svg'/> pretending.png");
        assert_ne!(sniffed.kind, MediaKind::Image);
        assert_eq!(sniff(b"plain").kind, MediaKind::File);
    }

    #[test]
    fn each_kind_names_its_msgtype() {
        assert_eq!(
            [
                MediaKind::Image,
                MediaKind::Video,
                MediaKind::Audio,
                MediaKind::File
            ]
            .map(MediaKind::msgtype),
            ["m.image", "m.video", "m.audio", "m.file"]
        );
    }

    #[test]
    fn a_path_is_under_a_root_by_whole_components() {
        let roots = [PathBuf::from("/srv/a"), PathBuf::from("/home/u/out")];
        assert!(under_roots(Path::new("/srv/a/x.png"), &roots));
        assert!(under_roots(Path::new("/srv/a"), &roots));
        assert!(under_roots(Path::new("/home/u/out/d/e"), &roots));
        assert!(!under_roots(Path::new("/srv/ab"), &roots));
        assert!(!under_roots(Path::new("/srv/ab/x.png"), &roots));
        assert!(!under_roots(Path::new("/srv"), &roots));
        assert!(!under_roots(Path::new("/etc/passwd"), &roots));
        assert!(!under_roots(Path::new("/srv/a/x"), &[]));
    }
}

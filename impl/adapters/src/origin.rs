//! Which `Host` and `Origin` header values the HTTP server serves: the MCP transport's
//! guard against DNS rebinding and cross-origin pages.
//!
//! Source: MCP Streamable HTTP transport, "Security Warning": servers MUST validate
//! the `Origin` header on all incoming connections and answer an invalid one with
//! 403 Forbidden; origins are compared as RFC 6454 §4 tuples (scheme, host, port,
//! the scheme's default port when none is written).
//!
//! - A **host** entry is a name or address (`localhost`, `127.0.0.1`, `::1`), with an
//!   optional port (`example.com:8443`, `[::1]:8700`). Without a port it matches every
//!   port. Names compare case-insensitively.
//! - An **origin** entry is `scheme://host[:port]`, `scheme://host:*` (any port) or
//!   `null` (the browser's opaque origin). Without a port it means the scheme's
//!   default port (80 for http, 443 for https).
//! - With no origin entries configured, a present `Origin` is served when its host is
//!   one of the allowed hosts (any scheme and port): a page served from the same
//!   machine, such as an inspector on another loopback port. An absent `Origin` is
//!   always served: clients that are not browsers send none.

/// A host and optional port, normalised: lower case, IPv6 without brackets.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

fn authority(text: &str) -> Option<Authority> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let parsed = text.parse::<http::uri::Authority>().ok()?;
    if parsed.as_str().contains('@') {
        return None;
    }
    Some(Authority {
        host: parsed
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase(),
        port: parsed.port_u16(),
    })
}

/// A host entry: an [`Authority`], or a bare IPv6 address (`::1`), which does not
/// parse as an authority.
fn host_entry(text: &str) -> Option<Authority> {
    let text = text.trim();
    if text.contains(':') && text.parse::<std::net::Ipv6Addr>().is_ok() {
        return Some(Authority {
            host: text.to_ascii_lowercase(),
            port: None,
        });
    }
    authority(text)
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Port {
    Any,
    Exact(u16),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum OriginEntry {
    Null,
    Tuple {
        scheme: String,
        host: String,
        port: Port,
    },
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// An `Origin` value as (scheme, host, port), the port filled in from the scheme.
fn origin_tuple(text: &str) -> Option<(String, Authority)> {
    let (scheme, rest) = text.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        return None;
    }
    // An origin is scheme, host and port only: no path, query or user.
    if rest.contains(['/', '?', '#']) {
        return None;
    }
    let mut at = authority(rest)?;
    at.port = at.port.or_else(|| default_port(&scheme));
    Some((scheme, at))
}

/// The checked lists, built once from the config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guard {
    hosts: Vec<Authority>,
    origins: Option<Vec<OriginEntry>>,
}

/// Why a request is refused (each is a 403; the text is the response body).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No `Host` header (and no authority in the request line), or one that is not
    /// a host and port.
    BadHost,
    /// A `Host` not among the allowed hosts (a DNS rebinding attempt, or a server
    /// reached by a name nobody configured).
    HostNotAllowed,
    /// An `Origin` that is not `scheme://host[:port]` or `null`, or not UTF-8.
    BadOrigin,
    /// An `Origin` not among the allowed origins.
    OriginNotAllowed,
}

impl Refusal {
    /// The response body.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::BadHost => "Forbidden: the Host header is missing or malformed",
            Refusal::HostNotAllowed => {
                "Forbidden: the Host header is not allowed (allowed_hosts in the config)"
            }
            Refusal::BadOrigin => "Forbidden: the Origin header is malformed",
            Refusal::OriginNotAllowed => {
                "Forbidden: the Origin header is not allowed (allowed_origins in the config)"
            }
        }
    }
}

impl Guard {
    /// Checks the entries: every host must be a host with an optional port, every
    /// origin `scheme://host[:port]`, `scheme://host:*` or `null`. `origins` `None`
    /// means the default (a present Origin's host must be an allowed host).
    /// Errors: the first entry that does not parse, with what was expected.
    pub fn new(hosts: &[String], origins: Option<&[String]>) -> Result<Guard, String> {
        let hosts = hosts
            .iter()
            .map(|h| {
                host_entry(h)
                    .ok_or_else(|| format!("{h:?} is not a host (name or address, optional :port)"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let origins = match origins {
            None => None,
            Some(entries) => Some(
                entries
                    .iter()
                    .map(|o| {
                        origin_entry(o).ok_or_else(|| {
                            format!("{o:?} is not an origin (scheme://host[:port], scheme://host:* or null)")
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        Ok(Guard { hosts, origins })
    }

    /// Whether a request with this `Host` (or, without one, the request line's
    /// authority) and this `Origin` is served. Host first, then Origin.
    pub fn check(&self, host: Option<&str>, origin: Option<&[u8]>) -> Result<(), Refusal> {
        let host = host.and_then(authority).ok_or(Refusal::BadHost)?;
        let host_allowed = |h: &Authority| {
            self.hosts
                .iter()
                .any(|a| a.host == h.host && a.port.is_none_or(|p| h.port == Some(p)))
        };
        if !host_allowed(&host) {
            return Err(Refusal::HostNotAllowed);
        }
        let Some(origin) = origin else {
            return Ok(());
        };
        let origin = std::str::from_utf8(origin)
            .map_err(|_| Refusal::BadOrigin)?
            .trim();
        if origin.eq_ignore_ascii_case("null") {
            return match &self.origins {
                Some(entries) if entries.contains(&OriginEntry::Null) => Ok(()),
                _ => Err(Refusal::OriginNotAllowed),
            };
        }
        let (scheme, at) = origin_tuple(origin).ok_or(Refusal::BadOrigin)?;
        let allowed = match &self.origins {
            None => self.hosts.iter().any(|a| a.host == at.host),
            Some(entries) => entries.iter().any(|e| match e {
                OriginEntry::Null => false,
                OriginEntry::Tuple {
                    scheme: s,
                    host,
                    port,
                } => {
                    *s == scheme
                        && *host == at.host
                        && match port {
                            Port::Any => true,
                            Port::Exact(p) => at.port == Some(*p),
                        }
                }
            }),
        };
        if allowed {
            Ok(())
        } else {
            Err(Refusal::OriginNotAllowed)
        }
    }
}

fn origin_entry(text: &str) -> Option<OriginEntry> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("null") {
        return Some(OriginEntry::Null);
    }
    if let Some(base) = text.strip_suffix(":*") {
        let (scheme, at) = origin_tuple(base)?;
        // `scheme://host:*`: the port filled in from the scheme is not written.
        if base
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            return None;
        }
        return Some(OriginEntry::Tuple {
            scheme,
            host: at.host,
            port: Port::Any,
        });
    }
    let (scheme, at) = origin_tuple(text)?;
    Some(OriginEntry::Tuple {
        scheme,
        host: at.host,
        port: at.port.map_or(Port::Any, Port::Exact),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(origins: Option<&[&str]>) -> Guard {
        let hosts: Vec<String> = ["localhost", "127.0.0.1", "::1", "example.com:8443"]
            .map(str::to_owned)
            .to_vec();
        let origins: Option<Vec<String>> =
            origins.map(|o| o.iter().map(|s| (*s).to_owned()).collect());
        Guard::new(&hosts, origins.as_deref()).unwrap()
    }

    #[test]
    fn hosts_match_by_name_and_by_port_when_one_is_given() {
        let g = guard(None);
        for ok in [
            "localhost",
            "LOCALHOST:8700",
            "127.0.0.1:1",
            "[::1]:8700",
            "example.com:8443",
        ] {
            assert_eq!(g.check(Some(ok), None), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("evil.example", Refusal::HostNotAllowed),
            ("evil.example:8700", Refusal::HostNotAllowed),
            ("localhost.evil.example", Refusal::HostNotAllowed),
            ("example.com", Refusal::HostNotAllowed),
            ("example.com:8444", Refusal::HostNotAllowed),
            ("", Refusal::BadHost),
            ("user@localhost", Refusal::BadHost),
            ("local host", Refusal::BadHost),
        ] {
            assert_eq!(g.check(Some(bad), None), Err(why), "{bad}");
        }
        assert_eq!(g.check(None, None), Err(Refusal::BadHost));
    }

    #[test]
    fn by_default_an_origin_is_served_when_its_host_is_an_allowed_host() {
        let g = guard(None);
        let check = |o: &str| g.check(Some("localhost:8700"), Some(o.as_bytes()));
        for ok in [
            "http://localhost:6274",
            "https://127.0.0.1",
            "http://[::1]:3000",
            "HTTP://LOCALHOST",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("http://evil.example", Refusal::OriginNotAllowed),
            ("http://localhost.evil.example", Refusal::OriginNotAllowed),
            ("null", Refusal::OriginNotAllowed),
            ("localhost", Refusal::BadOrigin),
            ("http://localhost/path", Refusal::BadOrigin),
            ("http://user@localhost", Refusal::BadOrigin),
            ("", Refusal::BadOrigin),
        ] {
            assert_eq!(check(bad), Err(why), "{bad}");
        }
        assert_eq!(
            g.check(Some("localhost"), Some(&[0xff, 0xfe])),
            Err(Refusal::BadOrigin)
        );
        // The Host is checked first: a bad Host with a good Origin is the Host's refusal.
        assert_eq!(
            g.check(Some("evil.example"), Some(b"http://localhost")),
            Err(Refusal::HostNotAllowed)
        );
    }

    #[test]
    fn configured_origins_compare_scheme_host_and_port() {
        let g = guard(Some(&[
            "https://app.example.com",
            "http://localhost:*",
            "null",
        ]));
        let check = |o: &str| g.check(Some("localhost"), Some(o.as_bytes()));
        for ok in [
            "https://app.example.com",
            "https://app.example.com:443",
            "http://localhost:6274",
            "http://localhost",
            "null",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for bad in [
            "http://app.example.com",
            "https://app.example.com:8443",
            "https://localhost",
            "http://127.0.0.1:6274",
        ] {
            assert_eq!(check(bad), Err(Refusal::OriginNotAllowed), "{bad}");
        }
        // An entry without a port means the scheme's default port, for http too.
        let g = guard(Some(&["http://app.example.com"]));
        let check = |o: &str| g.check(Some("localhost"), Some(o.as_bytes()));
        assert_eq!(check("http://app.example.com:80"), Ok(()));
        assert_eq!(
            check("http://app.example.com:8080"),
            Err(Refusal::OriginNotAllowed)
        );
        // `null` is served only when it is listed.
        assert_eq!(check("null"), Err(Refusal::OriginNotAllowed));
        // A scheme is letters, digits, `+`, `-` and `.`.
        for bad in ["h_t://localhost", "://localhost", "ht tp://localhost"] {
            assert_eq!(check(bad), Err(Refusal::BadOrigin), "{bad}");
        }
    }

    #[test]
    fn each_refusal_says_what_was_refused_and_where_to_allow_it() {
        for (refusal, words) in [
            (Refusal::BadHost, "Host header is missing or malformed"),
            (Refusal::HostNotAllowed, "allowed_hosts"),
            (Refusal::BadOrigin, "Origin header is malformed"),
            (Refusal::OriginNotAllowed, "allowed_origins"),
        ] {
            assert!(refusal.message().starts_with("Forbidden: "), "{refusal:?}");
            assert!(refusal.message().contains(words), "{refusal:?}");
        }
    }

    #[test]
    fn entries_that_are_not_hosts_or_origins_are_refused_with_what_was_expected() {
        let hosts = ["localhost".to_owned()];
        for bad in [
            "localhost",
            "app.example.com",
            "https://x/path",
            "https://x:443:*",
            "ftp//x",
        ] {
            let e = Guard::new(&hosts, Some(&[bad.to_owned()])).unwrap_err();
            assert!(e.contains("is not an origin"), "{bad}: {e}");
        }
        let e = Guard::new(&["a b".to_owned()], None).unwrap_err();
        assert!(e.contains("is not a host"), "{e}");
    }
}

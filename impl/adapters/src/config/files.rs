//! The `[files]` table of `send_file`'s sources ([`crate::files::FilesConfig`]):
//! `allowed_dirs`, `max_bytes`, `fetch_urls`, `fetch_allow_networks` and
//! `fetch_ca_file`; an absent key keeps its default.

use super::walk::Walk;
use crate::files::FilesConfig;
use figment::value::Value;
use std::path::{Path, PathBuf};

const KEYS: [&str; 5] = [
    "allowed_dirs",
    "max_bytes",
    "fetch_urls",
    "fetch_allow_networks",
    "fetch_ca_file",
];

impl Walk<'_> {
    /// `[files]`, or the defaults when it is absent; a relative `fetch_ca_file` is
    /// relative to `config_dir`.
    pub(super) fn files(
        &mut self,
        value: Option<&Value>,
        config_dir: &Path,
    ) -> Option<FilesConfig> {
        let defaults = FilesConfig::default();
        let Some(value) = value else {
            return Some(defaults);
        };
        let table = self.table("files", value)?;
        self.unknown_keys(table, &KEYS, "files.");
        let allowed_dirs = match table.get("allowed_dirs") {
            None => Some(defaults.allowed_dirs),
            Some(v) => self.list("files.allowed_dirs", v, |s| {
                let path = PathBuf::from(s);
                if path.is_absolute() {
                    Ok(path)
                } else {
                    Err(format!("{s:?} is not an absolute path"))
                }
            }),
        };
        let max_bytes = match table.get("max_bytes") {
            None => Some(defaults.max_bytes),
            Some(v) => self.typed::<u64>("files.max_bytes", v).and_then(|n| {
                if n == 0 {
                    self.issue("files.max_bytes", Some(v), "must be greater than zero");
                    return None;
                }
                Some(n)
            }),
        };
        let fetch_urls = match table.get("fetch_urls") {
            None => Some(defaults.fetch_urls),
            Some(v) => self.typed::<bool>("files.fetch_urls", v),
        };
        let fetch_allow_networks = match table.get("fetch_allow_networks") {
            None => Some(defaults.fetch_allow_networks),
            Some(v) => self.list("files.fetch_allow_networks", v, |s| {
                s.parse::<ipnet::IpNet>()
                    .map_err(|e| format!("{s:?} is not a network like 10.0.0.0/8 or fd00::/8: {e}"))
            }),
        };
        let fetch_ca_file = match table.get("fetch_ca_file") {
            None => Some(defaults.fetch_ca_file),
            Some(v) => self
                .typed::<String>("files.fetch_ca_file", v)
                .and_then(|s| {
                    if s.is_empty() {
                        self.issue("files.fetch_ca_file", Some(v), "must not be empty");
                        None
                    } else {
                        // `join` keeps an absolute path as it is.
                        Some(Some(config_dir.join(s)))
                    }
                }),
        };
        Some(FilesConfig {
            allowed_dirs: allowed_dirs?,
            max_bytes: max_bytes?,
            fetch_urls: fetch_urls?,
            fetch_allow_networks: fetch_allow_networks?,
            fetch_ca_file: fetch_ca_file?,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::test_support::*;
    use crate::files::{FilesConfig, DEFAULT_MAX_FILE_BYTES};
    use std::path::PathBuf;

    #[test]
    fn absent_files_are_the_defaults_no_directory_ten_mib_and_public_fetches() {
        let defaults = FilesConfig {
            allowed_dirs: Vec::new(),
            max_bytes: 10 * 1024 * 1024,
            fetch_urls: true,
            fetch_allow_networks: Vec::new(),
            fetch_ca_file: None,
        };
        assert_eq!(FilesConfig::default(), defaults);
        assert_eq!(DEFAULT_MAX_FILE_BYTES, 10_485_760);
        let config = load(MINIMAL, no_env()).unwrap();
        assert_eq!(config.files, defaults);
        let config = load(&format!("[files]\n{MINIMAL}"), no_env()).unwrap();
        assert_eq!(config.files, defaults);
    }

    #[test]
    fn each_files_key_is_read_and_a_relative_ca_file_is_relative_to_the_config_file() {
        let text = format!(
            "[files]\nallowed_dirs = [\"/srv/out\", \"/home/u/share\"]\nmax_bytes = 4096\n\
             fetch_urls = false\nfetch_allow_networks = [\"127.0.0.1/32\", \"fd00::/8\"]\n\
             fetch_ca_file = \"ca.pem\"\n{MINIMAL}"
        );
        let path = write(&text);
        let config = crate::config::Config::load_from(&path, no_env()).unwrap();
        assert_eq!(
            config.files,
            FilesConfig {
                allowed_dirs: vec![PathBuf::from("/srv/out"), PathBuf::from("/home/u/share")],
                max_bytes: 4096,
                fetch_urls: false,
                fetch_allow_networks: vec![
                    "127.0.0.1/32".parse().unwrap(),
                    "fd00::/8".parse().unwrap()
                ],
                fetch_ca_file: Some(path.parent().unwrap().join("ca.pem")),
            }
        );
        let config = load(
            MINIMAL,
            env(&[
                ("MATRIX_CHANNEL_FILES__MAX_BYTES", "7"),
                ("MATRIX_CHANNEL_FILES__FETCH_CA_FILE", "/etc/ca.pem"),
                ("MATRIX_CHANNEL_FILES__ALLOWED_DIRS", "[\"/tmp/x\"]"),
            ]),
        )
        .unwrap();
        assert_eq!(config.files.max_bytes, 7);
        assert_eq!(
            config.files.fetch_ca_file,
            Some(PathBuf::from("/etc/ca.pem"))
        );
        assert_eq!(config.files.allowed_dirs, vec![PathBuf::from("/tmp/x")]);
        assert!(config.files.fetch_urls);
    }

    #[test]
    fn a_relative_dir_a_bad_network_a_zero_cap_or_an_unknown_key_of_files_is_an_issue() {
        let text = format!(
            "[files]\nallowed_dirs = [\"/ok\", \"relative/dir\", 3]\nmax_bytes = 0\n\
             fetch_urls = \"yes\"\nfetch_allow_networks = [\"127.0.0.1\", \"10.0.0.0/33\"]\n\
             fetch_ca_file = \"\"\nmax_size = 1\n{MINIMAL}"
        );
        let all = issues(&text, no_env());
        assert_eq!(all.len(), 8, "{all:#?}");
        assert_eq!(
            issue_at(&all, "files.allowed_dirs[1]").message,
            "\"relative/dir\" is not an absolute path"
        );
        assert_eq!(
            issue_at(&all, "files.allowed_dirs[2]").message,
            "expected a string, found signed int `3`"
        );
        assert_eq!(
            issue_at(&all, "files.max_bytes").message,
            "must be greater than zero"
        );
        assert!(!issue_at(&all, "files.fetch_urls").message.is_empty());
        for path in [
            "files.fetch_allow_networks[0]",
            "files.fetch_allow_networks[1]",
        ] {
            assert!(issue_at(&all, path)
                .message
                .contains("is not a network like 10.0.0.0/8 or fd00::/8: "));
        }
        assert_eq!(
            issue_at(&all, "files.fetch_ca_file").message,
            "must not be empty"
        );
        assert!(issue_at(&all, "files.max_size")
            .message
            .starts_with("unknown key `max_size`; known keys: allowed_dirs, "));
        let issues = issues(&format!("files = 1\n{MINIMAL}"), no_env());
        assert_eq!(issues.len(), 1, "{issues:#?}");
        assert!(issue_at(&issues, "files")
            .message
            .starts_with("expected a table"));
    }
}

//! The `matrix-channel` command line.

use anyhow::{anyhow, Context as _};
use clap::{Parser, Subcommand};
use mc_adapters::audit::chain::Anchor;
use mc_adapters::audit::time::parse_instant;
use mc_server::config::Config;
use mc_server::crypto::OwnDeviceSigning;
use mc_server::store::{Store, StoreLock};
use std::io::BufRead as _;
use std::path::PathBuf;

/// Claude Code sessions from Matrix: MCP tools, a channel and a permission relay.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// The TOML config file. Every key can be overridden by an environment variable
    /// (`MATRIX_CHANNEL_LISTEN`, `MATRIX_CHANNEL_IDENTITIES__BOT__SETTLE_MS`, ...).
    #[arg(
        long,
        env = "MATRIX_CHANNEL_CONFIG",
        default_value = "matrix-channel.toml"
    )]
    config: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over streamable HTTP (`/mcp` and `/channel`). SIGTERM or SIGINT
    /// stops it within 5 s: exit 0 when everything finished, 3 when the deadline cut
    /// requests or Matrix sends (logged), 4 when the state could not be made durable
    /// in time; a second signal exits at once (130 for SIGINT, 143 for SIGTERM); 1 is
    /// a failure to start.
    Serve,
    /// Serve one identity's channel and tools over stdin and stdout (the MCP stdio
    /// transport: a command entry in Claude Code's `.mcp.json`) by attaching to the
    /// running `serve` of this config: every message goes to its `/channel`. Never
    /// opens the Matrix store. Mints its own token and revokes it at exit. Exits 0
    /// when stdin closes or at SIGTERM or SIGINT (the session is deleted), 1 when no
    /// `serve` runs or answers, or when the session is lost.
    Stdio {
        #[arg(long)]
        identity: String,
        /// The session's room label (A-Z a-z 0-9 . _ -, at most 64): one room per
        /// label, created on its first session. Default: CLAUDE_CODE_SESSION_ID, which
        /// Claude Code gives its stdio servers (ignored with a warning when it is no
        /// label); without either, the session has no label.
        #[arg(long)]
        room: Option<String>,
    },
    /// Log an identity in to its homeserver with a password, once, and set up
    /// cross-signing for the account if it has none (so clients that share room keys
    /// only with cross-signed devices talk to it). The password is read from
    /// MATRIX_CHANNEL_PASSWORD, or else from the first line of stdin, and not stored.
    /// On an identity already logged in it only completes cross-signing.
    Login {
        #[arg(long)]
        identity: String,
    },
    /// Server-side key backup and secret storage with a recovery key (run while
    /// `serve` is stopped).
    Recovery {
        #[command(subcommand)]
        command: RecoveryCommand,
    },
    /// Bind a room label of an identity to a room the identity is joined to, or
    /// unbind it (`--unbind`), through the running `serve` of this config (its
    /// operator socket, `<store_dir>/operator.sock`). Prints each binding that
    /// changed, one a line (`api -> !abc:server`, `web -> (unbound)`); binding a room
    /// that was another label's unbinds that label. Exits 1 when no `serve` runs, the
    /// identity is not joined to the room, or the server refuses the label or room.
    Bind {
        #[arg(long)]
        identity: String,
        /// The room label (A-Z a-z 0-9 . _ -, at most 64).
        label: String,
        /// The room id (`!…:server`).
        #[arg(required_unless_present = "unbind", conflicts_with = "unbind")]
        room: Option<String>,
        /// Unbind the label: its sessions get the rooms bound to no label.
        #[arg(long)]
        unbind: bool,
    },
    /// List the room labels of an identity through the running `serve`: one a line,
    /// `label -> room`, `(creating)` or `(unbound)`, with its attached sessions.
    Bindings {
        #[arg(long)]
        identity: String,
    },
    /// List the live grants of an identity through the running `serve`
    /// (docs/decisions/0027-grants.md): one a line, `id tool scope "subject" for
    /// session by approver, how long, minutes left`.
    Grants {
        #[arg(long)]
        identity: String,
    },
    /// Revoke a grant of an identity through the running `serve` (`--all`: every
    /// grant); its requests are asked again, and the room is told. Prints `revoked
    /// grant N` for each. Exits 1 when no `serve` runs or there is no such grant.
    Revoke {
        #[arg(long)]
        identity: String,
        /// The grant's number (`grants` lists them).
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        grant: Option<u64>,
        /// Revoke every grant of the identity.
        #[arg(long)]
        all: bool,
    },
    /// Print the audit trail (docs/approvals.md, "Reading the audit trail"): every
    /// permission request, prompt, verdict, grant, revocation and room binding, oldest
    /// first, one a line: `TIME  IDENTITY  WHAT`, the time in UTC. Reads the journal
    /// read-only, so it runs beside `serve`. `audit verify` checks the trail.
    #[command(args_conflicts_with_subcommands = true)]
    Audit {
        #[command(subcommand)]
        command: Option<AuditCommand>,
        /// Only this identity's entries.
        #[arg(long)]
        identity: Option<String>,
        /// From this time on: RFC 3339 (`2026-12-06T18:00:00Z`, `…+01:00`) or a
        /// duration before now (`90s`, `30m`, `2h`, `7d`, `1h30m`).
        #[arg(long)]
        since: Option<String>,
        /// Before this time (the same forms).
        #[arg(long)]
        until: Option<String>,
        /// One JSON object a line: `seq`, `time`, `now` (ms), `identity`, `kind`,
        /// `body`, `hash`.
        #[arg(long)]
        json: bool,
    },
    /// Bearer tokens for MCP clients.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// The config file.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Check the audit trail's hash chain. Exits 0 printing `audit trail verified: N
    /// entries` and the last entry's seq and hash (note them elsewhere: an anchor),
    /// or 1 naming the first bad entry and why (a hash mismatch: it was changed; a gap
    /// in seq: entries were deleted; a broken chain). Entries cut from the end leave
    /// a valid chain: only an anchor tells.
    Verify {
        /// `SEQ:HASH` from an earlier verify: that entry must still be there, unchanged.
        #[arg(long)]
        anchor: Option<String>,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a token for one identity; it is printed once and stored only hashed.
    Create {
        #[arg(long)]
        identity: String,
        #[arg(long, default_value = "")]
        label: String,
    },
    /// List tokens (ids, identities, labels; never the secrets).
    List,
    /// Revoke a token by the id `token list` shows.
    Revoke { id: String },
}

#[derive(Subcommand)]
enum RecoveryCommand {
    /// Turn on key backup and secret storage for the identity's account; the
    /// recovery key is printed once on stdout (alone on its line) and not stored.
    Enable {
        #[arg(long)]
        identity: String,
    },
    /// Restore on this store with the recovery key: the cross-signing keys (this
    /// device gets signed) and the backed-up room keys (encrypted history reads). The
    /// key is read from --key-file, or else from the first line of stdin; never from
    /// the command line.
    Restore {
        #[arg(long)]
        identity: String,
        /// A file holding the recovery key (surrounding whitespace is ignored).
        #[arg(long)]
        key_file: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate the config (file and environment) and say exactly what is wrong.
    Check,
}

fn restore_advice(identity: &str) -> String {
    format!(
        "the account's cross-signing keys were made elsewhere: sign this device with \
         `matrix-channel recovery restore --identity {identity}` (recovery key on stdin)"
    )
}

fn load(path: &std::path::Path) -> anyhow::Result<Config> {
    Config::load(path).map_err(|e| anyhow!("{e}"))
}

fn init_logs(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .finish()
        .with(mc_server::crypto::SdkNoise)
        .init();
}

fn read_password() -> anyhow::Result<String> {
    if let Ok(p) = std::env::var("MATRIX_CHANNEL_PASSWORD") {
        return Ok(p);
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the password from stdin")?;
    let password = line.trim_end_matches(['\r', '\n']).to_string();
    if password.is_empty() {
        return Err(anyhow!(
            "no password: set MATRIX_CHANNEL_PASSWORD or write it on stdin"
        ));
    }
    Ok(password)
}

fn read_recovery_key(file: Option<&std::path::Path>) -> anyhow::Result<String> {
    let text = match file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the recovery key from {}", path.display()))?,
        None => {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .context("reading the recovery key from stdin")?;
            line
        }
    };
    let key = text.trim().to_string();
    if key.is_empty() {
        return Err(anyhow!(
            "no recovery key: write it on stdin or pass --key-file"
        ));
    }
    Ok(key)
}

/// The identity's restored client for a one-off command, with the store locked.
async fn restored_client(
    config: &Config,
    identity: &str,
    what: &str,
) -> anyhow::Result<(matrix_sdk::Client, StoreLock)> {
    known_identity(config, identity)?;
    let store = Store::open(&config.store_dir)?;
    let lock = StoreLock::acquire(&config.store_dir, what)?;
    let settings = &config.identities[identity];
    let (restored, _) = mc_server::matrix::restore_client(&store, identity, settings).await?;
    Ok((restored.client, lock))
}

fn known_identity(config: &Config, identity: &str) -> anyhow::Result<()> {
    if config.identities.contains_key(identity) {
        Ok(())
    } else {
        Err(anyhow!(
            "no identity {identity:?} in the config (known: {})",
            config
                .identities
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Config {
            command: ConfigCommand::Check,
        } => match Config::load(&cli.config) {
            Ok(config) => {
                let n = config.identities.len();
                let noun = if n == 1 { "identity" } else { "identities" };
                println!("{}: ok ({n} {noun})", cli.config.display());
                for warning in &config.warnings {
                    println!("warning: {warning}");
                }
                Ok(())
            }
            Err(errors) => {
                eprintln!("{errors}");
                Err(anyhow!("{}: the config is not valid", cli.config.display()))
            }
        },
        Command::Serve => {
            let config = load(&cli.config)?;
            init_logs(&config.log);
            let stopped = mc_server::server::serve(config).await?;
            // Not a return: dropping the runtime would wait for blocking tasks still
            // running (matrix-sdk's store work), past the shutdown's bound.
            use std::io::Write as _;
            let _ = std::io::stdout().flush();
            std::process::exit(stopped.exit_code())
        }
        Command::Stdio { identity, room } => {
            let config = load(&cli.config)?;
            init_logs(&config.log);
            known_identity(&config, &identity)?;
            let env = std::env::var(mc_adapters::room_label::SESSION_ID_ENV).ok();
            let (label, warning) =
                mc_adapters::room_label::stdio_label(room.as_deref(), env.as_deref())
                    .map_err(|e| anyhow!("--room: {e}"))?;
            if let Some(warning) = warning {
                tracing::warn!("{warning}");
            }
            let code = mc_server::stdio::run(&config, &identity, label).await?;
            use std::io::Write as _;
            let _ = std::io::stdout().flush();
            // Not a return: the runtime would wait for the blocking stdin reader.
            std::process::exit(code)
        }
        Command::Login { identity } => {
            let config = load(&cli.config)?;
            init_logs(&config.log);
            known_identity(&config, &identity)?;
            let store = Store::open(&config.store_dir)?;
            let settings = &config.identities[&identity];
            if mc_server::matrix::is_logged_in(&store, &identity)? {
                // A running `serve` owns the store: the login stands, and cross-signing
                // is completed (if it needs to be) once that server is stopped.
                if let Err(e @ mc_server::store::StoreError::InUse { .. }) =
                    StoreLock::acquire(&config.store_dir, "login").map(drop)
                {
                    println!(
                        "identity {identity} is already logged in; {e}: stop it and run \
                         login again to check or complete cross-signing"
                    );
                    return Ok(());
                }
                let (client, _lock) = restored_client(&config, &identity, "login").await?;
                let trust = match mc_server::crypto::own_device_signing(&client).await? {
                    OwnDeviceSigning::NoCrossSigning => {
                        let password = read_password()?;
                        mc_server::crypto::bootstrap_cross_signing(&client, &password)
                            .await
                            .with_context(|| format!("identity {identity}: cross-signing"))?
                    }
                    trust => trust,
                };
                println!("identity {identity} is already logged in; its device is {trust}");
                if trust == OwnDeviceSigning::NotSigned {
                    println!("{}", restore_advice(&identity));
                }
                return Ok(());
            }
            // Not while `serve` (or another login) runs on this store.
            let _lock = StoreLock::acquire(&config.store_dir, "login")?;
            let password = read_password()?;
            let done = mc_server::matrix::login(&store, &identity, settings, &password).await?;
            println!(
                "identity {identity}: logged in as {} (device {}); the device is {}",
                settings.user_id, done.device, done.trust
            );
            if done.trust == OwnDeviceSigning::NotSigned {
                println!("{}", restore_advice(&identity));
            }
            Ok(())
        }
        Command::Recovery { command } => {
            let config = load(&cli.config)?;
            init_logs(&config.log);
            match command {
                RecoveryCommand::Enable { identity } => {
                    let (client, _lock) =
                        restored_client(&config, &identity, "recovery enable").await?;
                    let key = mc_server::crypto::enable_recovery(&client)
                        .await
                        .with_context(|| format!("identity {identity}"))?;
                    eprintln!(
                        "identity {identity}: key backup and secret storage are on. The recovery \
                         key follows on stdout, once: keep it safe (it is not stored), and \
                         restore a new store with `matrix-channel recovery restore --identity \
                         {identity}`."
                    );
                    println!("{key}");
                }
                RecoveryCommand::Restore { identity, key_file } => {
                    let key = read_recovery_key(key_file.as_deref())?;
                    let (client, _lock) =
                        restored_client(&config, &identity, "recovery restore").await?;
                    let trust = mc_server::crypto::restore_recovery(&client, &key)
                        .await
                        .with_context(|| format!("identity {identity}"))?;
                    println!(
                        "identity {identity}: restored from secret storage; the device is {trust}"
                    );
                }
            }
            Ok(())
        }
        Command::Bind {
            identity,
            label,
            room,
            unbind: _,
        } => {
            let config = load(&cli.config)?;
            known_identity(&config, &identity)?;
            let lines = mc_server::operator::bind_command(
                &config.store_dir,
                &identity,
                &label,
                room.as_deref(),
            )
            .await?;
            mc_server::operator::write_lines(&mut std::io::stdout().lock(), &lines)
                .context("writing to stdout")
        }
        Command::Bindings { identity } => {
            let config = load(&cli.config)?;
            known_identity(&config, &identity)?;
            let lines = mc_server::operator::bindings_command(&config.store_dir, &identity).await?;
            mc_server::operator::write_lines(&mut std::io::stdout().lock(), &lines)
                .context("writing to stdout")
        }
        Command::Grants { identity } => {
            let config = load(&cli.config)?;
            known_identity(&config, &identity)?;
            let lines =
                mc_server::operator::grants::grants_command(&config.store_dir, &identity).await?;
            mc_server::operator::write_lines(&mut std::io::stdout().lock(), &lines)
                .context("writing to stdout")
        }
        Command::Revoke {
            identity,
            grant,
            all: _,
        } => {
            let config = load(&cli.config)?;
            known_identity(&config, &identity)?;
            let lines =
                mc_server::operator::grants::revoke_command(&config.store_dir, &identity, grant)
                    .await?;
            mc_server::operator::write_lines(&mut std::io::stdout().lock(), &lines)
                .context("writing to stdout")
        }
        Command::Audit {
            command,
            identity,
            since,
            until,
            json,
        } => {
            let config = load(&cli.config)?;
            let store_dir = &config.store_dir;
            if let Some(AuditCommand::Verify { anchor }) = command {
                let anchor = anchor
                    .as_deref()
                    .map(Anchor::parse)
                    .transpose()
                    .map_err(|e| anyhow!("--anchor: {e}"))?;
                return match mc_server::audit::verify(store_dir, anchor)? {
                    Ok(verified) => mc_server::operator::write_lines(
                        &mut std::io::stdout().lock(),
                        &mc_server::audit::verified_lines(&verified),
                    )
                    .context("writing to stdout"),
                    Err(broken) => Err(anyhow!("the audit trail does not verify: {broken}")),
                };
            }
            if let Some(identity) = &identity {
                if known_identity(&config, identity).is_err() {
                    eprintln!("note: no identity {identity:?} in the config now");
                }
            }
            let now = mc_server::engine::now_ms().0;
            let at = |flag: &str, text: Option<String>| {
                text.map(|text| parse_instant(&text, now).map_err(|e| anyhow!("--{flag}: {e}")))
                    .transpose()
            };
            let filter = mc_server::audit::Filter {
                identity,
                since: at("since", since)?,
                until: at("until", until)?,
            };
            let format = match json {
                true => mc_server::audit::Format::Json,
                false => mc_server::audit::Format::Lines,
            };
            mc_server::audit::print(store_dir, &filter, format, &mut std::io::stdout().lock())?;
            Ok(())
        }
        Command::Token { command } => {
            let config = load(&cli.config)?;
            let store = Store::open(&config.store_dir)?;
            match command {
                TokenCommand::Create { identity, label } => {
                    known_identity(&config, &identity)?;
                    println!("{}", store.create_token(&identity, &label)?);
                }
                TokenCommand::List => {
                    println!("id\tidentity\tcreated (unix seconds)\tlabel");
                    for t in store.list_tokens()? {
                        println!("{}\t{}\t{}\t{}", t.id, t.identity, t.created_at, t.label);
                    }
                }
                TokenCommand::Revoke { id } => {
                    if !store.revoke_token(&id)? {
                        return Err(anyhow!("no token with id {id:?} (see `token list`)"));
                    }
                    println!("revoked {id}");
                }
            }
            Ok(())
        }
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("matrix-channel: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio_room(args: &[&str]) -> Option<String> {
        let mut argv = vec!["matrix-channel", "stdio", "--identity", "bot"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Stdio { room, .. } => room,
            _ => panic!("not stdio"),
        }
    }

    fn bind(args: &[&str]) -> Result<(String, Option<String>, bool), clap::Error> {
        let mut argv = vec!["matrix-channel", "bind", "--identity", "bot"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Bind {
                label,
                room,
                unbind,
                ..
            } => Ok((label, room, unbind)),
            _ => panic!("not bind"),
        }
    }

    #[test]
    fn bind_takes_a_room_or_unbind_but_not_both_nor_neither() {
        assert_eq!(
            bind(&["api", "!abc:server"]).unwrap(),
            ("api".to_owned(), Some("!abc:server".to_owned()), false)
        );
        assert_eq!(
            bind(&["api", "--unbind"]).unwrap(),
            ("api".to_owned(), None, true)
        );
        let both = bind(&["api", "!abc:server", "--unbind"]).unwrap_err();
        assert_eq!(both.kind(), clap::error::ErrorKind::ArgumentConflict);
        let neither = bind(&["api"]).unwrap_err();
        assert_eq!(
            neither.kind(),
            clap::error::ErrorKind::MissingRequiredArgument
        );
    }

    type AuditArgs = (
        Option<AuditCommand>,
        Option<String>,
        Option<String>,
        Option<String>,
        bool,
    );

    fn audit(args: &[&str]) -> Result<AuditArgs, clap::Error> {
        let mut argv = vec!["matrix-channel", "audit"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Audit {
                command,
                identity,
                since,
                until,
                json,
            } => Ok((command, identity, since, until, json)),
            _ => panic!("not audit"),
        }
    }

    #[test]
    fn audit_takes_an_identity_a_time_range_and_json_or_verify_with_an_anchor() {
        let (command, identity, since, until, json) = audit(&[
            "--identity",
            "work",
            "--since",
            "2h",
            "--until",
            "2026-12-06T18:00:00Z",
            "--json",
        ])
        .unwrap();
        assert!(command.is_none());
        assert_eq!(
            (
                identity.as_deref(),
                since.as_deref(),
                until.as_deref(),
                json
            ),
            (Some("work"), Some("2h"), Some("2026-12-06T18:00:00Z"), true)
        );
        let (command, identity, ..) = audit(&[]).unwrap();
        assert!(command.is_none() && identity.is_none());
        let (command, ..) = audit(&["verify", "--anchor", "5:ab"]).unwrap();
        assert!(matches!(
            command,
            Some(AuditCommand::Verify { anchor: Some(a) }) if a == "5:ab"
        ));
        let (command, ..) = audit(&["verify"]).unwrap();
        assert!(matches!(
            command,
            Some(AuditCommand::Verify { anchor: None })
        ));
        let mixed = audit(&["--identity", "work", "verify"]).unwrap_err();
        assert_eq!(mixed.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn stdio_takes_a_room_flag_and_none_without_it() {
        assert_eq!(stdio_room(&["--room", "web"]).as_deref(), Some("web"));
        assert_eq!(stdio_room(&["--room=api"]).as_deref(), Some("api"));
        assert_eq!(stdio_room(&[]), None);
    }
}

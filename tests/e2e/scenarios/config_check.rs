//! `matrix-channel --config FILE config check`, as the docs show it: a valid file is
//! answered `ok` with its identity count and exit 0; an invalid one exits non-zero,
//! naming the key that is wrong. No homeserver: the check reads the file only.

use crate::harness::server::binary;
use std::process::Command;

fn check(config: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("matrix-channel.toml");
    std::fs::write(&path, config).unwrap();
    Command::new(binary())
        .arg("--config")
        .arg(&path)
        .args(["config", "check"])
        .output()
        .unwrap()
}

#[test]
fn config_check_answers_ok_with_the_identity_count_for_a_valid_file() {
    let out = check(
        "listen = \"127.0.0.1:8700\"\nstore_dir = \"store\"\n\n[identities.bot]\n\
         homeserver = \"http://127.0.0.1:8008\"\nuser_id = \"@bot:localhost\"\n\
         allowed_senders = [\"@alice:localhost\"]\n",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains(": ok (1 identity)"), "{stdout}");
}

#[test]
fn config_check_exits_non_zero_and_names_the_key_of_an_invalid_file() {
    let out = check(
        "[identities.bot]\nhomeserver = \"http://127.0.0.1:8008\"\n\
         user_id = \"not a user id\"\nallowed_senders = []\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr.contains("identities.bot.user_id"), "{stderr}");
    assert!(stderr.contains("the config is not valid"), "{stderr}");
}

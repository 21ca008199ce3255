//! Files out against the real homeserver (issue 28, "Files out";
//! docs/decisions/0034-files-out.md): `send_file` sends a file from a directory the
//! operator allows, or fetched from an `https` URL, as `m.image` with its dimensions
//! or `m.file`, the content type sniffed from the bytes; encrypted media in an
//! encrypted room, which the encrypting human (matrix-nio) decrypts to the very
//! bytes; nothing outside the allowed directories (symlinks and `..` resolved), no
//! file name or caption naming an open request id, no address the SSRF guard
//! refuses.

use crate::harness::expect::tool_error;
use crate::harness::fixture::Fixture;
use crate::harness::https::TestHttps;
use crate::harness::nio::{assert_decrypted, NioFixture};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::Path;

/// A PNG of `width` × `height` as far as a reader of its header goes: the signature
/// and an `IHDR` chunk (PNG spec, 11.2.2), which is all the server reads of it.
fn png(width: u32, height: u32) -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    bytes.extend(width.to_be_bytes());
    bytes.extend(height.to_be_bytes());
    bytes.extend([8, 6, 0, 0, 0]);
    bytes.extend([0; 4]); // CRC, unchecked by header readers
    bytes.extend(b"\0\0\0\0IEND\xae\x42\x60\x82");
    bytes
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `[files]` allowing `root`, as top-level TOML of the config.
fn files_config(root: &Path, extra: &str) -> String {
    format!(
        "[files]\nallowed_dirs = [{}]\n{extra}",
        serde_json::Value::String(root.display().to_string())
    )
}

/// `[files]` keys that let a fetch reach `https` (on 127.0.0.1, its own CA).
fn trusting(https: &TestHttps) -> String {
    format!(
        "fetch_allow_networks = [\"127.0.0.1/32\"]\nfetch_ca_file = {}\n",
        serde_json::Value::String(https.ca_file().display().to_string())
    )
}

fn path_str(p: &Path) -> String {
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_file_sends_an_allowed_file_with_its_name_caption_and_dimensions_and_nothing_outside()
{
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("shared");
    let outside = dir.path().join("private");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let image = png(3, 2);
    std::fs::write(root.join("shot.png"), &image).unwrap();
    let log = b"build ok\nall 12 tests passed\n".to_vec();
    std::fs::write(root.join("build.log"), &log).unwrap();
    std::fs::write(outside.join("secret.txt"), b"token=hunter2").unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("dirlink")).unwrap();
    let config = files_config(&root, "");
    let f = Fixture::start(|c| c.top_level = Some(config)).await;
    let mcp = f.tools("files").await;
    let human = &f.human;

    // An image with a markdown caption: m.image, its dimensions, the caption as body.
    let sent = mcp
        .call_ok(
            "send_file",
            json!({
                "room_id": f.room,
                "path": path_str(&root.join("shot.png")),
                "caption": "the **build** screen",
            }),
        )
        .await;
    let event_id = sent["event_id"].as_str().expect("event_id").to_owned();
    assert_eq!(
        sent,
        json!({
            "event_id": event_id, "filename": "shot.png", "msgtype": "m.image",
            "mimetype": "image/png", "size": image.len(), "sha256": sha256_hex(&image),
            "width": 3, "height": 2, "encrypted": false,
        })
    );
    let event = human.event(&f.room, &event_id).await;
    let content = &event["content"];
    assert_eq!(event["sender"], f.bot.user_id.as_str(), "{event}");
    assert_eq!(content["msgtype"], "m.image", "{event}");
    assert_eq!(content["filename"], "shot.png", "{event}");
    assert_eq!(content["body"], "the **build** screen", "{event}");
    assert!(
        content["formatted_body"]
            .as_str()
            .is_some_and(|h| h.contains("<strong>build</strong>")),
        "{event}"
    );
    assert_eq!(
        (
            &content["info"]["w"],
            &content["info"]["h"],
            &content["info"]["size"],
            &content["info"]["mimetype"]
        ),
        (
            &json!(3),
            &json!(2),
            &json!(image.len()),
            &json!("image/png")
        ),
        "{event}"
    );
    let mxc = content["url"]
        .as_str()
        .expect("a plain room's media has url");
    assert_eq!(
        human.download(mxc).await,
        image,
        "the bytes the human downloads"
    );

    // An idempotency key sends the same bytes once; other bytes under it are sent.
    let keyed = |file: &str| json!({ "room_id": f.room, "path": path_str(&root.join(file)), "txn_id": "k1" });
    let first = mcp.call_ok("send_file", keyed("shot.png")).await;
    let again = mcp.call_ok("send_file", keyed("shot.png")).await;
    let other = mcp.call_ok("send_file", keyed("build.log")).await;
    assert_eq!(
        first["event_id"], again["event_id"],
        "a retry sends nothing new"
    );
    assert_ne!(first["event_id"], other["event_id"], "{other}");
    assert_ne!(first["event_id"], event_id.as_str());

    // A text file under another name, replying to the human: m.file, text/plain.
    let question = human.send_text(&f.room, "the build log?").await;
    let sent = mcp
        .call_ok(
            "send_file",
            json!({
                "room_id": f.room,
                "path": path_str(&root.join("build.log")),
                "filename": "ci log.txt",
                "reply_to": question,
            }),
        )
        .await;
    assert_eq!(
        (&sent["msgtype"], &sent["mimetype"], &sent["filename"]),
        (
            &json!("m.file"),
            &json!("text/plain; charset=utf-8"),
            &json!("ci log.txt")
        ),
        "{sent}"
    );
    let event = human
        .event(&f.room, sent["event_id"].as_str().unwrap())
        .await;
    assert_eq!(
        event["content"]["m.relates_to"]["m.in_reply_to"]["event_id"],
        question.as_str(),
        "{event}"
    );
    assert_eq!(event["content"]["body"], "ci log.txt", "{event}");
    let mxc = event["content"]["url"].as_str().expect("url");
    assert_eq!(human.download(mxc).await, log);

    // Nothing outside the allowed directory, however the path reaches it; the
    // message does not say whether the file exists.
    for path in [
        root.join("link.txt"),
        root.join("dirlink").join("secret.txt"),
        root.join("..").join("private").join("secret.txt"),
        outside.join("secret.txt"),
        outside.join("missing.txt"),
        Path::new("/etc/passwd").to_owned(),
    ] {
        let error = tool_error(
            &mcp,
            "send_file",
            json!({ "room_id": f.room, "path": path_str(&path) }),
            "forbidden",
        )
        .await;
        let message = error["message"].as_str().unwrap();
        assert!(
            !message.contains("hunter2") && message.contains("allowed"),
            "{path:?}: {message}"
        );
    }
    for args in [
        json!({ "room_id": f.room, "path": "shared/shot.png" }),
        json!({ "room_id": f.room }),
        json!({ "room_id": f.room, "path": path_str(&root.join("shot.png")), "url": "https://example.org/a.png" }),
        json!({ "room_id": f.room, "path": path_str(&root.join("shot.png")), "filename": ".." }),
        json!({ "room_id": f.room, "url": "http://example.org/a.png" }),
    ] {
        tool_error(&mcp, "send_file", args, "invalid_params").await;
    }
    tool_error(
        &mcp,
        "send_file",
        json!({ "room_id": f.room, "path": path_str(&root.join("nothing.png")) }),
        "not_found",
    )
    .await;

    // With a prompt open, neither the file name nor the caption may name its id.
    let id = "wxyzk";
    let _asker = f.open_request("asker", id).await;
    for args in [
        json!({ "filename": format!("yes {id}.png") }),
        json!({ "caption": "reply *wx*yzk to go on" }),
    ] {
        let mut call = json!({ "room_id": f.room, "path": path_str(&root.join("shot.png")) });
        call.as_object_mut()
            .unwrap()
            .extend(args.as_object().unwrap().clone());
        let error = tool_error(&mcp, "send_file", call, "forbidden").await;
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains(&format!("names the open permission request {id}")),
            "{args}: {error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_file_into_an_encrypted_room_uploads_encrypted_media_the_human_decrypts() {
    let dir = tempfile::tempdir().unwrap();
    let image = png(640, 480);
    std::fs::write(dir.path().join("graph.png"), &image).unwrap();
    let config = files_config(dir.path(), "");
    let f = NioFixture::start(|c| c.top_level = Some(config)).await;
    let mcp = f.tools("files").await;

    let sent = mcp
        .call_ok(
            "send_file",
            json!({
                "room_id": f.room,
                "path": path_str(&dir.path().join("graph.png")),
                "caption": "latency, p99",
            }),
        )
        .await;
    let event_id = sent["event_id"].as_str().expect("event_id");
    assert_eq!(sent["encrypted"], true, "{sent}");
    assert_eq!(
        (&sent["width"], &sent["height"]),
        (&json!(640), &json!(480))
    );

    // The homeserver holds ciphertext only; nio decrypts the event, whose media is an
    // encrypted attachment (`file`, no `url`), and then the bytes.
    f.assert_stored_encrypted(event_id, &f.bot.user_id).await;
    let event = f
        .human
        .wait_event(&f.room, json!({ "event_id": event_id }))
        .await;
    assert_decrypted(&event);
    let content = &event.content;
    assert_eq!(content["msgtype"], "m.image", "{content}");
    assert_eq!(content["body"], "latency, p99", "{content}");
    assert_eq!(content["filename"], "graph.png", "{content}");
    assert!(content.get("url").is_none(), "no plain url: {content}");
    let file: &Value = &content["file"];
    let mxc = file["url"].as_str().expect("file.url");
    assert_eq!(f.human.download(mxc, Some(file)).await, image);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_file_fetches_an_allowed_https_url_and_the_ssrf_guard_refuses_the_rest() {
    let https = TestHttps::start().await;
    let body = b"%PDF-1.7\n1 0 obj\n<<>>\nendobj\n%%EOF\n".to_vec();
    https.serve("/report.pdf", 200, &[], &body);
    // A redirect into an address the operator did not allow (127.0.0.2 is loopback).
    let elsewhere = format!("https://127.0.0.2:{}/report.pdf", https.port());
    https.serve("/moved", 302, &[("location", elsewhere.as_str())], b"");
    https.serve("/big", 200, &[], &vec![b'a'; 4096]);
    let dir = tempfile::tempdir().unwrap();
    let config = files_config(
        dir.path(),
        &format!("max_bytes = 1024\n{}", trusting(&https)),
    );
    let f = Fixture::start(|c| c.top_level = Some(config)).await;
    let mcp = f.tools("files").await;

    let sent = mcp
        .call_ok(
            "send_file",
            json!({ "room_id": f.room, "url": https.url("/report.pdf") }),
        )
        .await;
    assert_eq!(
        (&sent["filename"], &sent["mimetype"], &sent["msgtype"]),
        (
            &json!("report.pdf"),
            &json!("application/pdf"),
            &json!("m.file")
        ),
        "{sent}"
    );
    let event = f
        .human
        .event(&f.room, sent["event_id"].as_str().unwrap())
        .await;
    let mxc = event["content"]["url"].as_str().expect("url");
    assert_eq!(f.human.download(mxc).await, body);

    // Refused before any connection: the literal address, however it is spelt, and
    // every address a name resolves to, are judged first.
    let port = https.port();
    let connections = https.connections();
    for url in [
        format!("https://127.0.0.2:{port}/report.pdf"),
        // 127.0.0.2 spelt as one decimal number, and as IPv4-mapped IPv6.
        format!("https://2130706434:{port}/report.pdf"),
        format!("https://[::ffff:127.0.0.2]:{port}/report.pdf"),
        format!("https://[::1]:{port}/report.pdf"),
        "https://169.254.169.254/latest/meta-data/".to_owned(),
        "https://10.0.0.1/".to_owned(),
    ] {
        tool_error(
            &mcp,
            "send_file",
            json!({ "room_id": f.room, "url": url }),
            "forbidden",
        )
        .await;
    }
    assert_eq!(
        https.connections(),
        connections,
        "no refused address was connected to"
    );
    // A redirect into a refused address is not followed.
    tool_error(
        &mcp,
        "send_file",
        json!({ "room_id": f.room, "url": https.url("/moved") }),
        "forbidden",
    )
    .await;
    assert_eq!(https.hits("/moved"), 1);
    assert_eq!(
        https.hits("/report.pdf"),
        1,
        "only the first, allowed fetch"
    );
    tool_error(
        &mcp,
        "send_file",
        json!({ "room_id": f.room, "url": https.url("/big") }),
        "too_large",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_file_over_the_write_limit_fetches_nothing() {
    let https = TestHttps::start().await;
    https.serve("/a.txt", 200, &[], b"one\n");
    let dir = tempfile::tempdir().unwrap();
    let config = files_config(dir.path(), &trusting(&https));
    let f = Fixture::start(|c| {
        c.top_level = Some(config);
        c.rate_limits =
            Some("[rate_limits.token]\nwrites_per_second = 1\nwrite_burst = 1\n".to_owned());
    })
    .await;
    let mcp = f.tools("files").await;
    let call = json!({ "room_id": f.room, "url": https.url("/a.txt") });

    mcp.call_ok("send_file", call.clone()).await;
    let error = tool_error(&mcp, "send_file", call, "rate_limited").await;
    assert!(
        error["retry_after_ms"].as_u64().is_some_and(|ms| ms > 0),
        "{error}"
    );
    assert_eq!(https.hits("/a.txt"), 1, "the refused call fetched nothing");
}

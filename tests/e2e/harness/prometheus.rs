//! A scrape of `/metrics` read by the Prometheus text parser of the Python
//! `prometheus_client` package (`prometheus_client.parser.text_string_to_metric_families`,
//! installed beside matrix-nio by `scripts/nio/setup`): what a Prometheus server
//! would take from it, not what our own code thinks it wrote.

use super::nio::nio_python;
use std::collections::BTreeMap;
use std::process::Stdio;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// Reads the text on stdin with the parser; prints one JSON object per sample.
const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        print(json.dumps({"family": family.name, "type": family.type,
                          "name": s.name, "labels": s.labels, "value": s.value}))
"#;

/// One sample of a scrape.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Sample {
    /// The family's name and type as the parser read them (`matrix_channel_pushes`,
    /// `counter`).
    pub family: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed scrape.
#[derive(Clone, Debug)]
pub struct Scrape(pub Vec<Sample>);

impl Scrape {
    /// Parses `text`; panics, with the parser's error and the text, when it does not
    /// parse.
    pub async fn parse(text: &str) -> Scrape {
        let mut child = Command::new(nio_python().await)
            .args(["-c", PARSE])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run the prometheus_client parser");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(text.as_bytes()).await.expect("write stdin");
        drop(stdin);
        let out = child.wait_with_output().await.expect("the parser ends");
        assert!(
            out.status.success(),
            "the Prometheus text parser refused the scrape: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        let samples = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).expect("a sample as JSON"))
            .collect();
        Scrape(samples)
    }

    /// The value of sample `name` with exactly `labels`; `None` when absent.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.0
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }

    /// [`Scrape::get`], 0 when absent (a counter not counted yet).
    pub fn count(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or(0.0)
    }

    /// The type the parser gave the family `family`.
    pub fn kind(&self, family: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|s| s.family == family)
            .map(|s| s.kind.as_str())
    }
}

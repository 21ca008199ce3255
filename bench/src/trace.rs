//! What a server's write calls wrote, by file: the strace output the benchmark's
//! disk phase records (`strace -f -y -s 0 -e trace=write,pwrite64,writev,pwritev,
//! pwritev2`), summed by the kind of file each call named.

/// The journal's file name (`impl/src/journal.rs` `JOURNAL_FILE`; the benchmark
/// checks they agree).
pub const JOURNAL_FILE: &str = "journal.sqlite3";

/// Bytes the traced write calls wrote, by the kind of file they named (sockets,
/// pipes and eventfds are not counted: they are not the disk).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// `journal.sqlite3` and its write-ahead log: the model's inputs and snapshots.
    pub journal: u64,
    /// `matrix-channel.sqlite3` and its write-ahead log: tokens, MCP sessions and the
    /// SSE events kept for resumption.
    pub store: u64,
    /// The matrix-sdk stores under `identities/*/matrix/` (state, event cache,
    /// crypto).
    pub sdk_stores: u64,
    /// Log files and `/dev/*` (the terminal).
    pub log: u64,
    /// Any other file.
    pub other_files: u64,
}

/// The files a write call named, by kind (the path strace's `-y` prints).
fn kind_of(path: &str) -> Option<fn(&mut Written) -> &mut u64> {
    if path.starts_with("socket:") || path.starts_with("pipe:") || path.starts_with("anon_inode:") {
        // Network and in-process signalling: not the disk.
        return None;
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    Some(if name.starts_with(JOURNAL_FILE) {
        |w| &mut w.journal
    } else if name.starts_with("matrix-channel.sqlite3") {
        |w| &mut w.store
    } else if path.contains("/matrix/") {
        |w| &mut w.sdk_stores
    } else if name.ends_with(".log") || path.starts_with("/dev/") {
        |w| &mut w.log
    } else {
        |w| &mut w.other_files
    })
}

/// Sums one strace output (`-f -y -s 0`, write calls only) by file kind.
pub fn parse(text: &str) -> Written {
    let mut written = Written::default();
    for line in text.lines() {
        // `[pid] pwrite64(12</store/journal.sqlite3-wal>, ""..., 1048, 4096) = 1048`
        let Some(open) = line.find('(') else { continue };
        let call = line[..open].rsplit(' ').next().unwrap_or("");
        if !matches!(
            call,
            "write" | "pwrite64" | "writev" | "pwritev" | "pwritev2"
        ) {
            continue;
        }
        let rest = &line[open + 1..];
        let (Some(lt), Some(gt)) = (rest.find('<'), rest.find(">,")) else {
            continue;
        };
        if gt < lt {
            continue;
        }
        let path = &rest[lt + 1..gt];
        let Some(n) = line
            .rsplit_once(" = ")
            .and_then(|(_, n)| n.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if let Some(slot) = kind_of(path) {
            *slot(&mut written) += n;
        }
    }
    written
}

impl Written {
    /// Per input of `inputs`, as the results file holds it.
    pub fn per_input(&self, inputs: u64) -> crate::WrittenByFile {
        let per = |b: u64| b as f64 / inputs as f64;
        crate::WrittenByFile {
            inputs,
            journal: per(self.journal),
            store: per(self.store),
            sdk_stores: per(self.sdk_stores),
            log: per(self.log),
            other_files: per(self.other_files),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_is_summed_by_the_file_each_write_named() {
        let text = r#"4242  pwrite64(15</tmp/s/store/journal.sqlite3-wal>, ""..., 1048, 4096) = 1048
4243  pwrite64(12</tmp/s/store/matrix-channel.sqlite3-wal>, ""..., 4120, 0) = 4120
4243  pwrite64(21</tmp/s/store/identities/bot/matrix/matrix-sdk-state.sqlite3-wal>, ""..., 4120, 0) = 4120
4244  write(2</tmp/s/serve.log>, ""..., 200) = 200
4244  write(44<socket:[1391541]>, ""..., 300) = 300
4245  writev(9</tmp/s/other.bin>, [...], 2) = 10
4245  pwrite64(15</tmp/s/store/journal.sqlite3-wal>, ""..., 24, 0) = 24
4246  pwrite64(15</tmp/s/store/journal.sqlite3-wal>, ""..., 24, 0) = -1 EIO (Input/output error)
4247  +++ exited with 0 +++"#;
        let w = parse(text);
        assert_eq!(
            (w.journal, w.store, w.sdk_stores, w.log, w.other_files),
            (1072, 4120, 4120, 200, 10)
        );
    }
}

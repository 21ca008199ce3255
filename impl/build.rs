//! Stamps the binary with the version of the model it runs (`MC_MODEL_VERSION`): the
//! first 16 hex digits of a SHA-256 over model/'s manifest and sources. The journal
//! (`src/journal.rs`) replays recorded inputs only through the model that recorded
//! them: a model whose code differs in any byte is another version.
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

fn main() {
    // Read at run time, never with env!(): the compiled build script is reused from
    // the shared target directory by every checkout (CI's clean clone, the worktree),
    // and env!() would keep the path of the checkout that compiled it.
    let manifest_dir =
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let model = Path::new(&manifest_dir).join("../model");
    let src = model.join("src");
    println!("cargo:rerun-if-changed={}", src.display());
    println!(
        "cargo:rerun-if-changed={}",
        model.join("Cargo.toml").display()
    );
    let mut paths = vec![model.join("Cargo.toml")];
    files(&src, &mut paths);
    let mut hash = Sha256::new();
    for path in &paths {
        let rel = path.strip_prefix(&model).expect("under model/");
        hash.update(rel.to_string_lossy().as_bytes());
        hash.update([0]);
        let bytes =
            std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(&bytes);
    }
    let digest = hash.finalize();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=MC_MODEL_VERSION={hex}");
}

//! `report DIR [--readme PATH]`: renders the benchmark results in DIR.
//!
//! Reads `DIR/core.json` and `DIR/channel.json` (either may be missing), writes
//! `DIR/results.json`, `DIR/table.md` and `DIR/latency.svg`, and prints the table. With
//! `--readme PATH`, also replaces the table between the lines
//! `<!-- bench-table:start -->` and `<!-- bench-table:end -->` in that file.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Renders matrix-channel's benchmark results: results.json, table.md, latency.svg.
#[derive(Debug, Parser)]
#[command(name = "report")]
struct Args {
    /// The results directory holding core.json and/or channel.json.
    dir: PathBuf,
    /// A Markdown file whose table between `<!-- bench-table:start -->` and
    /// `<!-- bench-table:end -->` is replaced.
    #[arg(long, value_name = "PATH")]
    readme: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("report: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), mc_bench::Error> {
    let results = mc_bench::load(&args.dir)?;
    // Check the README before writing anything, so that a bad marker fails fast.
    if let Some(readme) = &args.readme {
        let text = std::fs::read_to_string(readme).map_err(|source| mc_bench::Error::Read {
            path: readme.clone(),
            source,
        })?;
        mc_bench::replace_table(&text, "").map_err(|problem| mc_bench::Error::Markers {
            path: readme.clone(),
            problem,
        })?;
    }
    let written = mc_bench::write_report(&args.dir, &results)?;
    print!("{}", written.table);
    let dir = args.dir.display();
    eprintln!(
        "report: wrote {dir}/{}, {dir}/{}",
        mc_bench::RESULTS_FILE,
        mc_bench::TABLE_FILE
    );
    if written.svg {
        eprintln!("report: wrote {dir}/{}", mc_bench::SVG_FILE);
    } else {
        eprintln!(
            "report: no push-latency samples, so no {dir}/{}",
            mc_bench::SVG_FILE
        );
    }
    if let Some(readme) = &args.readme {
        mc_bench::update_readme(readme, &written.table)?;
        eprintln!("report: updated the table in {}", readme.display());
    }
    Ok(())
}

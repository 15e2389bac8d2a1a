//! Thin entry point: parse the command line, run it, turn the outcome into an exit code.

use std::process::ExitCode;

use clap::Parser;

// glibc malloc was about a tenth of the gateway's CPU per proxied request (perf, docs/performance.md);
// mimalloc's thread-local free lists make the many small per-request allocations cheap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = opencode_gateway::cli::Cli::parse();
    match opencode_gateway::commands::dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

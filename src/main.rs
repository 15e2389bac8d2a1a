//! Thin entry point: parse the command line, run it, turn the outcome into an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().collect();
    let done = match opencode_gateway::cli::package_files::requested(&args) {
        Some(dir) => opencode_gateway::cli::package_files::write(&dir),
        None => opencode_gateway::cli::dispatch(opencode_gateway::cli::args::Cli::parse_from(args)),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

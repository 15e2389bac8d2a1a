//! Thin entry point: parse the command line, run it, turn the outcome into an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = opencode_gateway::cli::args::Cli::parse();
    match opencode_gateway::cli::dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

use std::process::ExitCode;

use clap::Parser;
use supervise::cli::{self, Cli, Command};

fn main() -> ExitCode {
    let args = Cli::parse();
    match args.command {
        Some(Command::Check {
            against: Some(against),
            ..
        }) => cli::check_diff(args.file.as_deref(), &against),
        Some(Command::Check { format, .. }) => cli::check(args.file.as_deref(), format),
        Some(Command::Schema) => cli::schema(),
        Some(Command::Run) | None => cli::run(&args),
    }
}

use std::process::ExitCode;

use clap::Parser;
use supervise::cli::{self, Cli, Command};
use supervise::client;
use supervise::control::Command as Request;

fn main() -> ExitCode {
    // The spawner: our own binary, started by the supervisor (see
    // effects::spawn::Spawner), its socket as fd 3.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == supervise::effects::spawn::SPAWNER_ARG)
    {
        use std::os::fd::FromRawFd;
        // SAFETY: the supervisor started us with our socket as fd 3, ours to own.
        let socket = unsafe { std::os::fd::OwnedFd::from_raw_fd(3) };
        supervise::effects::spawn::serve_spawner(socket);
        return ExitCode::SUCCESS;
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == supervise::effects::undertaker::UNDERTAKER_ARG)
    {
        use std::os::fd::FromRawFd;
        let args: Vec<std::ffi::OsString> = std::env::args_os().skip(2).collect();
        let Some(orders) = supervise::effects::undertaker::Orders::from_args(&args) else {
            return ExitCode::from(2);
        };
        // SAFETY: the supervisor started us with our pipe as fd 3, ours to own.
        let pipe = unsafe { std::os::fd::OwnedFd::from_raw_fd(3) };
        supervise::effects::undertaker::serve(pipe, &orders);
        return ExitCode::SUCCESS;
    }
    let args = Cli::parse_from(cli::follow_flag_after_logs(std::env::args_os()));
    let file = args.file.as_deref();
    let socket = || client::socket_path(file, args.socket.as_deref());
    let with_socket = |run: &dyn Fn(&std::path::Path) -> Result<(), client::Failure>| {
        client::finish(socket().and_then(|path| run(&path)))
    };
    match &args.command {
        Some(Command::Check {
            against: Some(against),
            ..
        }) => cli::check_diff(file, against),
        Some(Command::Check { format, graph, .. }) => cli::check(file, *format, *graph),
        Some(Command::Schema) => cli::schema(),
        Some(Command::Completions { shell }) => cli::completions(*shell),
        Some(Command::Man) => cli::man(),
        Some(Command::Status { all, json }) => with_socket(&|s| client::status(s, *all, *json)),
        Some(Command::Reload { app }) => with_socket(&|s| client::reload(s, app)),
        Some(Command::Restart { target }) => with_socket(&|s| {
            client::simple(
                s,
                Request::Restart {
                    target: target.clone(),
                },
            )
        }),
        Some(Command::Stop { target }) => with_socket(&|s| {
            client::simple(
                s,
                Request::Stop {
                    target: target.clone(),
                },
            )
        }),
        Some(Command::Start { target }) => with_socket(&|s| {
            client::simple(
                s,
                Request::Start {
                    target: target.clone(),
                },
            )
        }),
        Some(Command::Trigger { app }) => {
            with_socket(&|s| client::simple(s, Request::Trigger { app: app.clone() }))
        }
        Some(Command::Scale {
            app,
            count,
            timeout,
        }) => with_socket(&|s| client::scale(file, s, app, count, *timeout)),
        Some(Command::Logs {
            target,
            lines,
            follow,
            since,
        }) => with_socket(&|s| {
            let request = Request::Logs {
                target: target.clone(),
                lines: *lines,
                follow: *follow,
                since_ms: since.map(client::unix_millis),
            };
            client::logs(s, request)
        }),
        Some(Command::Top) => client::finish(client::top(file, args.socket.as_deref())),
        Some(Command::Run) | None => cli::run(&args),
    }
}

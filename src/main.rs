use std::process::ExitCode;

use clap::Parser;
use model::protocol::Command;
use supervise::cli::{self, Cli, Verb};
use supervise::client;

/// How many descriptors are standard: stdin, stdout, stderr.
const STANDARD_FDS: i32 = 3;

/// Run before Rust's runtime starts, which opens /dev/null *read-write* on a
/// closed standard descriptor: a write to a closed stdout would then vanish
/// as a success (`supervise import x >&-` exiting 0 with nothing written).
#[used]
#[unsafe(link_section = ".init_array")]
static HOLD_CLOSED_STANDARD_FDS: extern "C" fn() = hold_closed_standard_fds;

/// Hold each standard descriptor the caller closed with /dev/null opened
/// read-only: no file or socket opened later takes its number, and a write
/// to it fails (EBADF), which the command reports (see `cli::output`).
extern "C" fn hold_closed_standard_fds() {
    for fd in 0..STANDARD_FDS {
        // SAFETY: plain calls on descriptor numbers; nothing else runs yet.
        unsafe {
            if libc::fcntl(fd, libc::F_GETFD) != -1 {
                continue;
            }
            // The lowest free number: `fd`, the lower ones being open.
            let held = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
            if held != fd && held != -1 {
                libc::close(held);
            }
        }
    }
}

/// The supervisor starts its helpers as `/proc/self/exe`, so the kernel names
/// them `exe`: they take the name `supervise` back, so `ps`, `pgrep` and
/// `top` show them as what they are.
fn name_this_helper() {
    let _ = nix::sys::prctl::set_name(c"supervise");
}

fn main() -> ExitCode {
    if let Some(helped) = serve_as_helper() {
        return helped;
    }
    // Instants in an upgrade's state are CLOCK_MONOTONIC readings: the
    // image that writes it and the one that reads it (the probe too)
    // translate them through this anchor.
    if let Err(error) = effects::clock::anchor_instants() {
        eprintln!("supervise: {error}; an upgrade will be refused");
    }
    // A new binary asked by a running supervisor whether it can take over.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == effects::upgrade::probe::PROBE_ARG)
    {
        return supervise::upgrade::probe::answer();
    }
    match Cli::try_parse_from(cli::follow_flag_after_logs(std::env::args_os())) {
        Ok(args) => carry_out(&args),
        Err(error) => cli::output::clap_said(error),
    }
}

/// Started by the supervisor as one of its helpers (the spawner, the
/// undertaker): serve as it, then exit with the code returned.
fn serve_as_helper() -> Option<ExitCode> {
    // The spawner: our own binary, started by the supervisor (see
    // effects::spawn::Spawner), its socket as fd 3.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == effects::spawn::SPAWNER_ARG)
    {
        name_this_helper();
        use std::os::fd::FromRawFd;
        // SAFETY: the supervisor started us with our socket as fd 3, ours to own.
        let socket = unsafe { std::os::fd::OwnedFd::from_raw_fd(3) };
        effects::spawn::serve_spawner(socket);
        return Some(ExitCode::SUCCESS);
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == effects::undertaker::UNDERTAKER_ARG)
    {
        name_this_helper();
        use std::os::fd::FromRawFd;
        let args: Vec<std::ffi::OsString> = std::env::args_os().skip(2).collect();
        let Some(orders) = effects::undertaker::Orders::from_args(&args) else {
            return Some(ExitCode::from(2));
        };
        // SAFETY: the supervisor started us with our pipe as fd 3, ours to own.
        let pipe = unsafe { std::os::fd::OwnedFd::from_raw_fd(3) };
        effects::undertaker::serve(pipe, &orders);
        return Some(ExitCode::SUCCESS);
    }
    None
}

/// Carry out the command line: a verb, or running the file.
fn carry_out(args: &Cli) -> ExitCode {
    let file = args.file.as_deref();
    let socket = || client::socket_path(file, args.socket.as_deref());
    let with_socket = |run: &dyn Fn(&std::path::Path) -> Result<(), client::Failure>| {
        client::finish(socket().and_then(|path| run(&path)))
    };
    match &args.command {
        Some(Verb::Check {
            against: Some(against),
            ..
        }) => cli::check_diff(file, against),
        Some(Verb::Check { format, graph, .. }) => cli::check(file, *format, *graph),
        Some(Verb::Schema) => cli::schema(),
        Some(Verb::Export { target }) => cli::export(file, target),
        Some(Verb::Init { name, command }) => cli::init::run(file, command, name.as_deref()),
        Some(Verb::Install {
            user,
            print,
            name,
            unit_dir,
            force,
        }) => cli::install::install(&cli::install::InstallArgs {
            file,
            user: *user,
            name: name.as_deref(),
            unit_dir: unit_dir.as_deref(),
            print: *print,
            force: *force,
        }),
        Some(Verb::Uninstall {
            user,
            name,
            unit_dir,
        }) => cli::install::uninstall(&cli::install::InstallArgs {
            file,
            user: *user,
            name: name.as_deref(),
            unit_dir: unit_dir.as_deref(),
            print: false,
            force: false,
        }),
        Some(Verb::Import {
            source,
            output,
            from,
            env,
            force,
        }) => cli::import::run(&cli::import::ImportArgs {
            file: source,
            output: output.as_deref(),
            from: from.map(Into::into),
            env: env.as_deref(),
            force: *force,
        }),
        Some(Verb::Completions { shell }) => cli::completions(*shell),
        Some(Verb::Man) => cli::man(),
        Some(Verb::Status { all, json }) => with_socket(&|s| client::status(s, *all, *json)),
        Some(Verb::Reload { app }) => with_socket(&|s| client::reload(s, app)),
        Some(Verb::Restart { target }) => with_socket(&|s| {
            client::simple(
                s,
                Command::Restart {
                    target: target.clone(),
                },
            )
        }),
        Some(Verb::Stop { target }) => with_socket(&|s| {
            client::simple(
                s,
                Command::Stop {
                    target: target.clone(),
                },
            )
        }),
        Some(Verb::Start { target }) => with_socket(&|s| {
            client::simple(
                s,
                Command::Start {
                    target: target.clone(),
                },
            )
        }),
        Some(Verb::Upgrade { binary }) => with_socket(&|s| client::upgrade(s, binary.as_deref())),
        Some(Verb::Trigger { app }) => {
            with_socket(&|s| client::simple(s, Command::Trigger { app: app.clone() }))
        }
        Some(Verb::Scale {
            app,
            count,
            timeout,
        }) => with_socket(&|s| client::scale(file, s, app, count, *timeout)),
        Some(Verb::Logs {
            target,
            lines,
            follow,
            since,
        }) => with_socket(&|s| {
            let request = Command::Logs {
                target: target.clone(),
                lines: *lines,
                follow: *follow,
                since_ms: since.map(client::unix_millis),
            };
            client::logs(s, request)
        }),
        Some(Verb::Top) => client::finish(client::top(file, args.socket.as_deref())),
        Some(Verb::Run) | None => cli::run(args),
    }
}

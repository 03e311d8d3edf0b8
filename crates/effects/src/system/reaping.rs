//! Reaping: `waitpid` for every child, sorted into what it was (an
//! upgrade's probe, the undertaker, a check, the spawner, a worker); a
//! worker reaped before its exec status is read waits for it, so that the
//! core always learns why a process ended.

use super::{Exec, System};
use crate::Reaped;
use model::process::{Exit, StartError};
use tracing::error;

impl System {
    /// [`crate::Effects::reap`]: the next child that ended, if one did.
    pub(super) fn reap(&mut self) -> Option<Reaped> {
        if let Some(lost) = self.lost.pop() {
            self.untrack(lost.pid);
            self.groups.reaped();
            return Some(lost);
        }
        loop {
            let mut status = 0;
            // SAFETY: waitpid with a valid status pointer; -1 = any child.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return None;
            }
            let exit = if libc::WIFEXITED(status) {
                Exit::Code(libc::WEXITSTATUS(status))
            } else if libc::WIFSIGNALED(status) {
                Exit::Signal {
                    signal: libc::WTERMSIG(status),
                    core: libc::WCOREDUMP(status),
                }
            } else {
                continue;
            };
            if self.probe_reaped(pid, exit) {
                self.groups.reaped();
                continue;
            }
            if pid == self.setup.undertaker.pid() {
                match self.setup.undertaker.restart() {
                    Ok(()) => error!(
                        event = "undertaker_restarted",
                        "the undertaker (pid {pid}) {exit}; started another (pid {})",
                        self.setup.undertaker.pid()
                    ),
                    Err(error) => error!(
                        event = "undertaker_died",
                        "the undertaker (pid {pid}) {exit} and cannot be started again ({error}); workers may outlive a crash of the supervisor"
                    ),
                }
                continue;
            }
            if self
                .checks
                .reaped(pid, exit, &mut self.groups, &mut self.setup.undertaker)
            {
                self.groups.reaped();
                continue;
            }
            if Some(pid) == self.setup.spawner.pid() {
                self.setup.spawner.lost();
                error!("the spawner (pid {pid}) {exit}; another starts with the next spawn");
                continue;
            }
            let start_error = match self.processes.get(&pid).map(|t| &t.exec) {
                // Not ours: an adopted descendant (we are a subreaper).
                None => None,
                Some(Exec::Known(error)) => *error,
                Some(Exec::Watching(_)) => {
                    self.deferred.insert(pid, exit);
                    continue;
                }
            };
            self.untrack(pid);
            self.groups.reaped();
            return Some(Reaped {
                pid,
                exit,
                start_error,
            });
        }
    }

    /// [`crate::Effects::exec_known`]: `pid`'s exec status came; the exit
    /// it waited for, if it was reaped first.
    pub(super) fn exec_known(&mut self, pid: i32, error: Option<StartError>) -> Option<Reaped> {
        if let Some(tracked) = self.processes.get_mut(&pid) {
            tracked.exec = Exec::Known(error);
        }
        let exit = self.deferred.remove(&pid)?;
        self.untrack(pid);
        Some(Reaped {
            pid,
            exit,
            start_error: error,
        })
    }
}

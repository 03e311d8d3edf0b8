//! Processes started beside the instances for a while — an `exec`
//! liveness check, an upgrade's probe: placed as an instance is (a process
//! group and a cgroup of their own, or the run's token) so that what they
//! leave behind goes when they end, and with the undertaker if the
//! supervisor dies first.

use std::os::fd::OwnedFd;

use tracing::debug;

use super::groups::{Groups, Placement, killpg};
use super::undertaker::Undertaker;
use super::{cgroup, spawn};

/// A process started beside the instances for a while — an `exec`
/// liveness check, an upgrade's probe — in a process group and a cgroup (or
/// with a token) of its own ([`Groups::place_as`]): whatever it leaves
/// behind (a `setsid` child, a daemon) is killed when it ends, and by the
/// undertaker if the supervisor dies first (the cgroup is below
/// `instances/`; the token is the run's).
#[derive(Debug)]
pub(crate) struct Transient {
    pub(crate) pid: i32,
    /// Its exec-status pipe: why it could not run, if it could not.
    status: OwnedFd,
    placement: Placement,
}

impl Transient {
    /// Process `pid`, started by `spawn` where `placement` put it. Its
    /// process group is recorded with the undertaker (which, without
    /// cgroups, kills the recorded groups if supervise dies: what it left
    /// with its environment cleared is still in its group).
    pub(crate) fn new(
        pid: i32,
        status: OwnedFd,
        placement: Placement,
        undertaker: &mut Undertaker,
    ) -> Transient {
        if let Err(error) = undertaker.watch(pid) {
            debug!("cannot tell the undertaker of group {pid}: {error}");
        }
        Transient {
            pid,
            status,
            placement,
        }
    }

    /// SIGKILL it and what it started (a check cancelled, a probe given up
    /// on): its process group and its cgroup. Called before its reap, so
    /// its pid is still its group's; what carries its token goes at
    /// [`Transient::ended`].
    pub(crate) fn kill(&self) {
        killpg(self.pid, libc::SIGKILL);
        if let Some((cgroup, _)) = &self.placement.cgroup {
            let _ = cgroup::kill(cgroup);
        }
    }

    /// It was reaped (or is given up on for good: an upgrade's exec comes):
    /// whether it ran; what it left — in its process group, in its cgroup,
    /// carrying its token — is killed, and its cgroup removed once empty.
    pub(crate) fn ended(
        self,
        groups: &mut Groups,
        undertaker: &mut Undertaker,
    ) -> spawn::ExecStatus {
        let status = spawn::read_status(&self.status);
        // A reaped leader's pid stays its group's while a member is left.
        killpg(self.pid, libc::SIGKILL);
        if let Err(error) = undertaker.forget(self.pid) {
            debug!("cannot tell the undertaker to forget {}: {error}", self.pid);
        }
        groups.discard(self.placement);
        status
    }
}

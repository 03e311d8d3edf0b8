//! What the world tells the supervisor as its processes would: notify
//! datagrams (READY=1, WATCHDOG=1, EXTEND_TIMEOUT_USEC), the preload
//! library's report, the answers of liveness checks and of memory
//! measurements (with the rules of `max_memory` checked at once).

use super::*;

impl World {
    pub(crate) fn runs_program(&self, pid: i32) -> bool {
        self.supervisor
            .effects()
            .process(pid)
            .is_some_and(|p| p.runs_program())
    }

    /// Process `pid` sends `READY=1` as `uid`.
    pub(crate) fn notify(&mut self, pid: i32, uid: u32) {
        self.notify_with(pid, uid, true, None, None);
    }

    /// Process `pid` sends a datagram as `uid`.
    pub(crate) fn notify_with(
        &mut self,
        pid: i32,
        uid: u32,
        ready: bool,
        watchdog: Option<WatchdogMessage>,
        extend_timeout: Option<Duration>,
    ) {
        self.handle(News::Notified(Notification {
            sender_pid: pid,
            sender_uid: uid,
            sender_pgid: Some(pid),
            ready,
            stopping: false,
            status: Some("serving".into()),
            watchdog,
            extend_timeout,
            injected: false,
        }));
    }

    /// The preload library in process `pid` handed it its socket.
    pub(crate) fn report_injected(&mut self, pid: i32) {
        if let Some(process) = self.fake().process_mut(pid) {
            process.injected = true;
        }
        self.handle(News::Notified(Notification {
            sender_pid: pid,
            sender_uid: UID,
            sender_pgid: Some(pid),
            ready: false,
            stopping: false,
            status: None,
            watchdog: None,
            extend_timeout: None,
            injected: true,
        }));
    }

    /// The running check `number` of the worker led by `pid` answers.
    pub(crate) fn answer_check(&mut self, pid: i32, number: u64, passed: bool) {
        self.fake().check_done(pid);
        self.handle(News::Checked(CheckAnswer {
            pid,
            check: number,
            passed,
            detail: if passed {
                String::new()
            } else {
                "HTTP 500 (simulated)".into()
            },
        }));
    }

    /// The memory measurement asked for (if one is) answers: the instance
    /// at index `over` uses one byte more than its limit (or, with
    /// `past_ceiling`, than its hard ceiling), the rest nothing. The rules
    /// of `max_memory` are checked at once: a replacement for memory is no
    /// crash (it waits for no backoff), and one that was already being
    /// replaced stops once past its ceiling.
    pub(crate) fn answer_memory(
        &mut self,
        over: Option<usize>,
        past_ceiling: bool,
    ) -> Result<(), Violation> {
        let Some((round, pids)) = self.fake().measuring.take() else {
            return Ok(());
        };
        let over = over
            .filter(|_| !pids.is_empty())
            .map(|i| pids[i % pids.len()]);
        let limit_of = |world: &World, pid: i32| {
            world
                .supervisor
                .core()
                .worker_of(pid)
                .and_then(|(app, _)| app.spec.max_memory)
        };
        let usage = pids
            .iter()
            .map(|pid| {
                let limit = limit_of(self, *pid).unwrap_or(u64::MAX - 1);
                let used = match Some(*pid) == over {
                    false => 0,
                    true if past_ceiling => model::limits::memory_ceiling(limit).saturating_add(1),
                    true => limit + 1,
                };
                (*pid, used)
            })
            .collect();
        let before = over.and_then(|pid| {
            let (_, worker) = self.supervisor.core().worker_of(pid)?;
            limit_of(self, pid)?;
            Some((pid, worker.id, worker.recycle.is_some()))
        });
        let now = self.now();
        self.handle(News::MemoryMeasured { round, usage });
        let Some((pid, id, was_recycling)) = before else {
            return Ok(());
        };
        let after = self.supervisor.core().worker_of(pid).map(|(_, w)| w);
        if was_recycling && past_ceiling {
            if let Some(worker) = after.filter(|w| w.id == id && !w.state.is_stopping()) {
                return Err(Violation(format!(
                    "pid {pid}, being replaced, was measured past its memory ceiling and is still {}",
                    worker.state.name()
                )));
            }
        } else if let Some(recycle) = after.and_then(|w| w.recycle.as_ref())
            && !was_recycling
            && recycle.restart_at != now
        {
            return Err(Violation(format!(
                "pid {pid} over max_memory: its replacement waits {:?}, as after a crash",
                recycle.restart_at.saturating_duration_since(now)
            )));
        }
        Ok(())
    }
}

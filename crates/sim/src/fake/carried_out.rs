//! The [`Effects`] of the fake: each call the supervisor makes, carried
//! out on the process table of [`super`] (spawns as its plans say, signals
//! that kill or are ignored, reaps, checks, sockets, upgrades).

use super::*;
/// When and how the program of `order` ends on its own, if its command
/// line says so; `run` counts the processes of its instance, this one too.
fn own_end(order: &SpawnOrder, run: u32, now: Instant) -> Option<(Instant, Exit)> {
    let words: Vec<String> = order
        .definition
        .argv
        .iter()
        .map(|word| word.expand(order.slot))
        .collect();
    let number = |prefix: &str| {
        words
            .iter()
            .find_map(|w| w.strip_prefix(prefix).and_then(|n| n.parse::<u64>().ok()))
    };
    let after = Duration::from_millis(number(EXIT_AFTER_MS)?);
    let failing = number(FAIL_RUNS).unwrap_or(0);
    let code = if u64::from(run) <= failing { 1 } else { 0 };
    Some((now + after, Exit::Code(code)))
}

impl Effects for FakeEffects {
    fn now(&self) -> Instant {
        self.now
    }

    fn wall_clock(&self) -> std::time::SystemTime {
        self.wall_at_start + self.now.saturating_duration_since(self.started)
    }

    fn spawn(&mut self, starts: &[Start]) -> Vec<Result<i32, SpawnFailure>> {
        starts
            .iter()
            .map(|start| self.spawn_one(start.order))
            .collect()
    }

    fn signal_group(&mut self, pgid: i32, signal: Signal) {
        let signalled = Signalled {
            pgid,
            signal,
            app: self.processes.get(&pgid).map(|p| p.app.clone()),
            live_apps: self.live_apps(),
        };
        self.signals.push((pgid, signal));
        self.signalled.push(signalled);
        self.history.push(format!("{} {pgid}", signal.as_str()));
        let now = self.now;
        let Some(process) = self.processes.get_mut(&pgid) else {
            return;
        };
        if signal == Signal::SIGKILL {
            process.leftovers = 0;
            process.exit(
                Exit::Signal {
                    signal: Signal::SIGKILL.number(),
                    core: false,
                },
                now,
            );
            return;
        }
        let killed_by = Exit::Signal {
            signal: signal.number(),
            core: false,
        };
        match process.life {
            // Before exec every disposition is the default: it dies.
            Life::Running if !process.exec_reported => process.exit(killed_by, now),
            Life::Running if !process.behaviour.ignores_stop => {
                process.life = Life::Exiting {
                    at: now + process.behaviour.stop_delay,
                    exit: killed_by,
                };
            }
            _ => {}
        }
    }

    fn reap(&mut self) -> Option<Reaped> {
        let process = self
            .processes
            .values_mut()
            .find(|p| matches!(p.life, Life::Zombie(_)) && p.exec_known)?;
        let Life::Zombie(exit) = process.life else {
            return None;
        };
        process.life = Life::Reaped;
        self.probes.remove(&process.pid);
        Some(Reaped {
            pid: process.pid,
            exit,
            start_error: process.start_error,
        })
    }

    fn empty_groups(&mut self, pgids: &[i32]) -> Vec<i32> {
        pgids
            .iter()
            .copied()
            .filter(|pgid| !self.group_exists(*pgid))
            .collect()
    }

    fn needs_polling(&self) -> bool {
        !self.announces_empty_groups
    }

    fn settle_groups(&mut self) {}

    fn kill_leftovers(&mut self, pgid: i32) -> usize {
        match self.processes.get_mut(&pgid) {
            Some(process) if process.group_alive(self.now) && process.life == Life::Reaped => {
                std::mem::take(&mut process.leftovers) as usize
            }
            _ => 0,
        }
    }

    fn forget_group(&mut self, _pgid: i32) {}

    fn exec_known(&mut self, pid: i32, _error: Option<StartError>) -> Option<Reaped> {
        let process = self.processes.get_mut(&pid)?;
        process.exec_known = true;
        // A zombie waiting for its exec status is reaped with it, as the
        // real effects do.
        let Life::Zombie(exit) = process.life else {
            return None;
        };
        process.life = Life::Reaped;
        self.probes.remove(&pid);
        let process = &self.processes[&pid];
        Some(Reaped {
            pid,
            exit,
            start_error: process.start_error,
        })
    }

    fn cancel_probe(&mut self, pid: i32) {
        self.probes.remove(&pid);
    }

    fn bind(&mut self, key: &SocketKey, _app: &str) -> Result<(RawFd, ListenAddress), BindError> {
        if self.busy.contains(&key.address) {
            return Err(BindError {
                address: key.address.clone(),
                reason: "Address already in use (simulated)".into(),
            });
        }
        let next = &mut self.next_fd;
        let fd = *self.sockets.entry(key.clone()).or_insert_with(|| {
            *next += 1;
            *next
        });
        Ok((fd, key.address.clone()))
    }

    fn retain_sockets(&mut self, wanted: &HashSet<SocketKey>) -> Vec<SocketKey> {
        let gone: Vec<SocketKey> = self
            .sockets
            .keys()
            .filter(|k| !wanted.contains(*k))
            .cloned()
            .collect();
        for key in &gone {
            self.sockets.remove(key);
        }
        gone
    }

    fn check(&mut self, order: &CheckOrder) {
        self.history.push(format!(
            "check {}.{} pid {} #{}",
            order.app, order.slot, order.pid, order.check
        ));
        self.checks.insert(order.pid, order.clone());
    }

    fn cancel_check(&mut self, pid: i32) {
        self.checks.remove(&pid);
    }

    fn take_check_answers(&mut self) -> Vec<CheckAnswer> {
        Vec::new()
    }

    fn sample_load(&mut self, app: &AppSpec, leaders: &[i32]) -> LoadSample {
        let (queue, cpu_each) = self.load.get(&app.name).copied().unwrap_or_default();
        let measured = leaders
            .iter()
            .filter(|pid| self.processes.get(pid).is_some_and(|p| p.is_alive()))
            .count() as u32;
        LoadSample {
            queue: Some(queue),
            cpu_percent: (measured > 0).then(|| cpu_each.saturating_mul(measured)),
            measured,
        }
    }

    fn measure_memory(&mut self, round: u64, pids: Vec<i32>) {
        self.history
            .push(format!("measure memory of {} instances", pids.len()));
        self.measuring = Some((round, pids));
    }

    fn start_room(&mut self) -> usize {
        self.start_room
    }

    fn limit_memory(&mut self, pgid: i32, bytes: Option<u64>) {
        self.history
            .push(format!("memory ceiling of {pgid}: {bytes:?}"));
    }

    fn notify_systemd(&mut self, state: &str) {
        self.systemd.push(state.to_string());
    }

    fn route_output(&mut self, desired: &model::spec::Desired) {
        let logged: Vec<&str> = desired
            .apps
            .iter()
            .filter(|app| app.log.is_some())
            .map(|app| app.name.as_str())
            .collect();
        if !logged.is_empty() {
            self.history
                .push(format!("route output of {}", logged.join(",")));
        }
    }

    fn forget_output(&mut self, app: &str, slot: Option<u32>) {
        self.history.push(match slot {
            Some(slot) => format!("forget output {app}.{slot}"),
            None => format!("forget output {app}"),
        });
    }

    type Handover = FakeHandover;

    fn handover(&self) -> FakeHandover {
        let mut sockets: Vec<(SocketKey, RawFd)> = self
            .sockets
            .iter()
            .map(|(k, fd)| (k.clone(), *fd))
            .collect();
        sockets.sort_by_key(|(_, fd)| *fd);
        FakeHandover { sockets }
    }

    fn start_upgrade_probe(
        &mut self,
        binary: &std::path::Path,
        state: Vec<u8>,
    ) -> Result<RunningProbe, String> {
        // The probe reads the state as a new image would.
        let decoded = supervise::upgrade::Handover::<
            supervise::supervisor::upgrade::SupervisorState,
            FakeHandover,
            crate::SimShellState,
        >::decode(&state)
        .and_then(|state| state.check());
        let pid = self.next_pid;
        self.next_pid += 1;
        self.history
            .push(format!("probe {} pid {pid}", binary.display()));
        let mut output = ProbeOutput::default();
        let exit = match decoded {
            Ok(()) if !self.probe_refuses => {
                let line = serde_json::json!({
                    "ok": true,
                    "version": supervise::upgrade::VERSION,
                    "format": supervise::upgrade::FORMAT,
                });
                output.stdout.take(format!("{line}\n").as_bytes());
                Exit::Code(0)
            }
            Ok(()) => {
                output.stderr.take(b"refused by the simulation");
                Exit::Code(1)
            }
            Err(why) => {
                output.stderr.take(why.to_string().as_bytes());
                Exit::Code(1)
            }
        };
        output.stdout.ended = true;
        output.stderr.ended = true;
        self.probe = Some(ProbeEnd::Exited(exit));
        let (_said, said) = tokio::sync::watch::channel(output);
        Ok(RunningProbe { pid, said })
    }

    fn probe_ended(&mut self) -> Option<ProbeEnd> {
        self.probe.take()
    }

    fn abandon_probe(&mut self) {
        self.probe = None;
    }

    fn abandon_transients(&mut self) {
        self.checks.clear();
    }

    fn prepare_exec(&mut self, _takeover: Duration, _flush: Duration) {}

    fn exec(
        &mut self,
        binary: &std::path::Path,
        _args: &[std::ffi::OsString],
        _state: &[u8],
        fds: &[RawFd],
    ) -> std::io::Result<()> {
        self.history.push(format!(
            "exec {} keeping {} fds",
            binary.display(),
            fds.len()
        ));
        self.execs += 1;
        Ok(())
    }

    fn exec_failed(&mut self) {}

    fn resume_probe(&mut self, _app: &str, _slot: u32, _readiness: &Readiness, pid: i32) {
        self.probes.insert(pid);
    }
}

impl FakeEffects {
    /// One start of [`Effects::spawn`].
    fn spawn_one(&mut self, order: &SpawnOrder) -> Result<i32, SpawnFailure> {
        if let Some(error) = self.spawn_failure {
            self.history.push(format!(
                "spawn {}.{} g{} failed",
                order.app, order.slot, order.generation
            ));
            return Err(SpawnFailure {
                error,
                detail: "the simulation refuses this spawn".into(),
            });
        }
        let pid = self.next_pid;
        self.next_pid += 1;
        self.history.push(format!(
            "spawn {}.{} g{} pid {pid}",
            order.app, order.slot, order.generation
        ));
        let behaviour = self.plans.pop_front().unwrap_or_default();
        let leftovers = behaviour.leftovers;
        let runs = self
            .runs
            .entry((order.app.clone(), order.slot))
            .or_default();
        *runs += 1;
        let ends = own_end(order, *runs, self.now);
        let beside_at_spawn = self
            .processes
            .values()
            .filter(|p| p.app == order.app && p.group_alive(self.now))
            .map(|p| p.pid)
            .collect();
        self.processes.insert(
            pid,
            FakeProcess {
                pid,
                app: order.app.clone(),
                slot: order.slot,
                generation: order.generation,
                readiness: order.readiness.clone(),
                behaviour,
                life: Life::Running,
                exec_reported: false,
                exec_known: false,
                start_error: None,
                leftovers,
                leftovers_until: None,
                spawned_at: self.now,
                ends,
                beside_at_spawn,
                injects: order.definition.listen.iter().any(|l| l.inject),
                injected: false,
            },
        );
        if matches!(order.readiness, Readiness::Probe(_)) {
            self.probes.insert(pid);
        }
        self.populated.insert(pid);
        Ok(pid)
    }
}

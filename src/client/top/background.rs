//! The talking to the supervisor, off the thread that reads keys: each kind
//! of request (status, logs, a command) has a thread of its own that takes
//! one job at a time, and the loop hands it a job only when the last one has
//! been answered. So a slow or stopped supervisor costs the UI nothing but
//! stale data: keys are still read and the screen still drawn, and each
//! request still ends within the client's bounds (`REPLY_TIMEOUT`).

use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::time::{Duration, Instant};

/// A thread that does `Job`s one at a time and hands back their outcomes.
pub(crate) struct Background<Job, Outcome> {
    jobs: SyncSender<Job>,
    outcomes: Receiver<Outcome>,
    /// Since when a job is being done (`None`: idle).
    busy_since: Option<Instant>,
}

impl<Job: Send + 'static, Outcome: Send + 'static> Background<Job, Outcome> {
    /// Start a thread named `name` that answers each job with `work`. It
    /// ends when this is dropped (or with the process: a job stuck on a
    /// silent supervisor is not waited for).
    pub(crate) fn spawn(
        name: &str,
        work: impl Fn(Job) -> Outcome + Send + 'static,
    ) -> std::io::Result<Background<Job, Outcome>> {
        // One job at a time: the loop gives a job only to an idle thread.
        let (jobs, inbox) = sync_channel::<Job>(1);
        let (outbox, outcomes) = sync_channel::<Outcome>(1);
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                for job in inbox {
                    if outbox.send(work(job)).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Background {
            jobs,
            outcomes,
            busy_since: None,
        })
    }

    /// Hand over `job` if the thread is idle (false: busy, or gone).
    pub(crate) fn offer(&mut self, job: Job) -> bool {
        if self.busy_since.is_some() {
            return false;
        }
        if self.jobs.try_send(job).is_err() {
            return false;
        }
        self.busy_since = Some(Instant::now());
        true
    }

    /// The outcome of the job, once done.
    pub(crate) fn take(&mut self) -> Option<Outcome> {
        match self.outcomes.try_recv() {
            Ok(outcome) => {
                self.busy_since = None;
                Some(outcome)
            }
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => None,
        }
    }

    /// How long the current job has been going (`None`: idle).
    pub(crate) fn busy_for(&self) -> Option<Duration> {
        self.busy_since.map(|since| since.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_job_at_a_time_and_its_outcome() {
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let gate = std::sync::Mutex::new(gate);
        let mut worker = Background::spawn("test", move |n: u32| {
            let _ = gate.lock().map(|g| g.recv());
            n * 2
        })
        .expect("a thread");
        assert!(worker.offer(21));
        assert!(!worker.offer(1), "busy");
        assert!(worker.busy_for().is_some());
        assert_eq!(worker.take(), None, "not done yet");
        release.send(()).expect("released");
        let deadline = Instant::now() + Duration::from_secs(5);
        let outcome = loop {
            if let Some(outcome) = worker.take() {
                break outcome;
            }
            assert!(Instant::now() < deadline, "no outcome");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(outcome, 42);
        assert_eq!(worker.busy_for(), None);
        assert!(worker.offer(1));
    }
}

//! The store's own threads: every async store call runs on one of them, never on the reactor,
//! and a burst of calls costs one wake-up, not one each.
//!
//! tokio's blocking pool wakes a thread per call (and, with calls arriving together, a
//! different thread for each), so a 5 µs read cost two thread switches and a few futex calls —
//! more than the read. Here calls wait in one queue; a thread that finishes a call takes the
//! next without sleeping, and a sleeping thread is woken only when no awake thread is free to
//! take the new call (so a call that arrives while every thread runs a long one gets another
//! thread; calls queued in the same instant, before a thread took the first, run one after
//! the other). Threads are started as calls find every thread busy, up to
//! [`MAX_THREADS`], and live as long as the store. A call that panics is reported to its
//! caller and its thread goes on.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The most threads: more concurrent store calls than this wait in the queue.
pub const MAX_THREADS: usize = 8;

/// One queued call.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// The queue and the threads' bookkeeping.
#[derive(Default)]
pub(super) struct Workers {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Threads started.
    threads: usize,
    /// Threads not waiting on the condition variable (running a job, or about to look for one).
    awake: usize,
    /// Threads running a job.
    busy: usize,
    /// Wake-ups issued and not yet taken by a thread.
    wakes: usize,
    /// No more jobs: the threads end.
    closed: bool,
}

/// What a new job needs.
#[derive(Debug, PartialEq, Eq)]
enum Need {
    /// A free thread (awake and not running a job, or being woken) will take it.
    Nothing,
    /// Wake a sleeping thread.
    Wake,
    /// Start a thread.
    Start,
}

impl State {
    fn need(&self) -> Need {
        if self.awake + self.wakes > self.busy {
            Need::Nothing
        } else if self.threads - self.awake > self.wakes {
            Need::Wake
        } else if self.threads < MAX_THREADS {
            Need::Start
        } else {
            Need::Nothing
        }
    }
}

impl Workers {
    /// Queues `job`, waking or starting a thread only when none is free to take it.
    pub(super) fn submit(self: &Arc<Self>, job: Job) {
        let mut state = self.lock();
        state.jobs.push_back(job);
        match state.need() {
            Need::Nothing => {}
            Need::Wake => {
                state.wakes += 1;
                drop(state);
                self.wake.notify_one();
            }
            Need::Start => {
                state.threads += 1;
                state.awake += 1;
                let n = state.threads;
                drop(state);
                let workers = Arc::clone(self);
                let started = std::thread::Builder::new().name(format!("store-{n}")).spawn(move || {
                    // Not the batch policy of a runtime thread that may have started this one.
                    if let Err(e) = crate::sched::normal_policy() {
                        tracing::warn!(cause = %e, "a store thread cannot take the normal scheduling policy");
                    }
                    workers.run()
                });
                if let Err(e) = started {
                    // The job stays queued for the threads there are; with none at all, its
                    // caller sees a closed channel (a worker failure).
                    tracing::error!(cause = %e, "cannot start a store thread");
                    let mut state = self.lock();
                    state.threads -= 1;
                    state.awake -= 1;
                    if state.threads == 0 {
                        state.jobs.clear();
                    }
                }
            }
        }
    }

    fn run(&self) {
        let mut state = self.lock();
        loop {
            if let Some(job) = state.jobs.pop_front() {
                state.busy += 1;
                drop(state);
                // The job's sender is dropped on unwinding: its caller gets an error.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                    tracing::error!("a store call panicked");
                }
                state = self.lock();
                state.busy -= 1;
                continue;
            }
            if state.closed {
                state.awake -= 1;
                return;
            }
            state.awake -= 1;
            while state.wakes == 0 && !state.closed {
                state = self.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            state.wakes = state.wakes.saturating_sub(1);
            state.awake += 1;
        }
    }

    /// Ends the threads once the queue is empty.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Threads started: for the tests.
    #[cfg(test)]
    pub(super) fn threads(&self) -> usize {
        self.lock().threads
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    fn job(f: impl FnOnce() + Send + 'static) -> Job {
        Box::new(f)
    }

    #[test]
    fn a_thread_is_woken_or_started_only_when_no_awake_thread_is_free() {
        let state = |threads, awake, busy, wakes| State { threads, awake, busy, wakes, ..State::default() };
        // An awake thread between jobs takes the new one; so does one being woken.
        assert_eq!(state(2, 1, 0, 0).need(), Need::Nothing);
        assert_eq!(state(2, 1, 1, 1).need(), Need::Nothing);
        // Every awake thread is running a job: wake a sleeper, else start one, up to the cap.
        assert_eq!(state(2, 1, 1, 0).need(), Need::Wake);
        assert_eq!(state(0, 0, 0, 0).need(), Need::Start);
        assert_eq!(state(2, 2, 2, 0).need(), Need::Start);
        assert_eq!(state(MAX_THREADS, MAX_THREADS, MAX_THREADS, 0).need(), Need::Nothing);
        // Every sleeper is already being woken: start another.
        assert_eq!(state(3, 2, 2, 1).need(), Need::Nothing);
        assert_eq!(state(3, 1, 1, 2).need(), Need::Nothing);
    }

    #[test]
    fn after_a_burst_every_thread_sleeps() {
        let workers = Arc::new(Workers::default());
        let (tx, rx) = std::sync::mpsc::channel();
        for i in 0..200 {
            let tx = tx.clone();
            workers.submit(job(move || tx.send(i).unwrap()));
        }
        let mut got: Vec<i32> = (0..200).map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, (0..200).collect::<Vec<_>>());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let state = workers.lock();
            if state.awake == 0 {
                assert_eq!((state.busy, state.jobs.len()), (0, 0));
                assert!((1..=MAX_THREADS).contains(&state.threads));
                break;
            }
            drop(state);
            assert!(std::time::Instant::now() < deadline, "a thread stayed awake with nothing to do");
            std::thread::sleep(Duration::from_millis(2));
        }
        workers.close();
    }

    #[test]
    fn a_long_call_does_not_hold_up_the_others() {
        let workers = Arc::new(Workers::default());
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock().unwrap();
        let long = Arc::clone(&gate);
        workers.submit(job(move || drop(long.lock().unwrap())));
        // Once the long call runs (a call queued in the same instant, before any thread took
        // the first, may wait behind it: the price of taking bursts on one thread).
        while workers.lock().busy == 0 {
            std::thread::yield_now();
        }
        let (tx, rx) = std::sync::mpsc::channel();
        workers.submit(job(move || tx.send(()).unwrap()));
        // The second call runs on another thread while the first is still blocked.
        rx.recv_timeout(Duration::from_secs(10)).expect("the second call ran");
        drop(held);
        workers.close();
    }

    /// A store thread started by a runtime thread (batch policy) runs under the normal one.
    #[test]
    fn a_store_thread_runs_under_the_normal_policy_whoever_started_it() {
        let workers = Arc::new(Workers::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let starter = Arc::clone(&workers);
        std::thread::spawn(move || {
            crate::sched::batch_this_thread();
            assert_eq!(crate::sched::policy(), nix::libc::SCHED_BATCH, "the starter runs batch");
            starter.submit(job(move || tx.send(crate::sched::policy()).unwrap()));
        })
        .join()
        .unwrap();
        let policy = rx.recv_timeout(Duration::from_secs(10)).expect("the call ran");
        assert_eq!(policy, nix::libc::SCHED_OTHER);
        workers.close();
    }

    #[test]
    fn a_panicking_call_leaves_its_thread_serving() {
        let workers = Arc::new(Workers::default());
        let done = Arc::new(AtomicUsize::new(0));
        workers.submit(job(|| panic!("a store call panics")));
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..3 {
            let (done, tx) = (Arc::clone(&done), tx.clone());
            workers.submit(job(move || {
                done.fetch_add(1, Ordering::SeqCst);
                tx.send(()).unwrap();
            }));
        }
        for _ in 0..3 {
            rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 3);
        workers.close();
    }

    #[test]
    fn concurrent_callers_never_lose_a_call() {
        let workers = Arc::new(Workers::default());
        let done = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..8)
            .map(|_| {
                let (workers, done) = (Arc::clone(&workers), Arc::clone(&done));
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        let done = Arc::clone(&done);
                        workers.submit(job(move || {
                            done.fetch_add(1, Ordering::SeqCst);
                        }));
                    }
                })
            })
            .collect();
        for c in callers {
            c.join().unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while done.load(Ordering::SeqCst) < 16_000 {
            assert!(std::time::Instant::now() < deadline, "{} of 16000 ran", done.load(Ordering::SeqCst));
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(workers.threads() <= MAX_THREADS);
        workers.close();
    }
}

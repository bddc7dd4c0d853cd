//! Shared `fdatasync` of the data file.
//!
//! Every flush of a file that took direct writes into preallocated
//! (unwritten) blocks also writes the file's changed extent blocks and inode,
//! each a synchronous device write (ext4 without a journal does them one
//! after another). Threads that flush the same file at the same time can
//! share one call: a flush covers every write completed before it started.
//!
//! So [`Flusher::flush`] runs at most one `fdatasync` at a time. A caller
//! needs a flush that *starts* after its call; if one is running, the caller
//! waits for it to end and then, with every other caller that arrived in the
//! meantime, is covered by the next one, which one of them runs. Measured on
//! a 3-OSD cluster under 4 MiB writes (`docs/performance.md`).
//!
//! A failed flush fails every caller it covered (their writes may not be
//! durable even if a later flush succeeds: the kernel reports a writeback
//! error once).

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::sync::{Condvar, Mutex, PoisonError};

/// Failed flushes remembered for callers that have not yet woken up.
const FAILURES_KEPT: usize = 64;

/// One file's flushes, shared by concurrent callers.
#[derive(Debug, Default)]
pub(crate) struct Flusher {
    state: Mutex<State>,
    ended: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Flushes started so far; the running one, if any, is number `started`.
    started: u64,
    /// Flushes ended so far (each ends before the next starts).
    ended: u64,
    running: bool,
    /// Callers waiting for the running flush to end.
    waiting: usize,
    /// Recent failed flushes: number, error kind and message.
    failures: VecDeque<(u64, io::ErrorKind, String)>,
}

impl Flusher {
    /// Makes every write to `file` completed before this call durable.
    ///
    /// # Errors
    /// The error of the flush that covered this call.
    pub fn flush(&self, file: &File) -> io::Result<()> {
        self.flush_with(|| file.sync_data())
    }

    /// [`Flusher::flush`] with the flush itself given.
    fn flush_with(&self, sync: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // The running flush may have started before the caller's writes
        // completed; the next one cannot have.
        let needed = state.started + 1;
        loop {
            if state.ended >= needed {
                return match state.failures.iter().find(|f| f.0 == needed) {
                    Some((_, kind, message)) => Err(io::Error::new(*kind, message.clone())),
                    None => Ok(()),
                };
            }
            if !state.running {
                state.running = true;
                state.started += 1;
                let number = state.started;
                drop(state);
                let result = sync();
                let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                state.running = false;
                state.ended = number;
                if let Err(e) = &result {
                    if state.failures.len() == FAILURES_KEPT {
                        state.failures.pop_front();
                    }
                    state.failures.push_back((number, e.kind(), e.to_string()));
                }
                drop(state);
                self.ended.notify_all();
                return result;
            }
            state.waiting += 1;
            state = self
                .ended
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.waiting -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn concurrent_callers_share_flushes_and_each_is_covered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = Arc::new(File::create(dir.path().join("f")).expect("create"));
        let flusher = Arc::new(Flusher::default());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (file, flusher) = (file.clone(), flusher.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        (&*file).write_all(b"x").expect("write");
                        flusher.flush(&file).expect("flush");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("join");
        }
        let state = flusher.state.lock().expect("lock");
        assert!(!state.running);
        assert_eq!((state.started, state.waiting), (state.ended, 0));
        assert!((1..=400).contains(&state.ended), "{}", state.ended);
    }

    /// Callers arriving during a flush are not covered by it (nor by its
    /// failure); they share the next one.
    #[test]
    fn callers_arriving_during_a_flush_share_the_next_and_failures_stay_with_theirs() {
        let flusher = Arc::new(Flusher::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let (release, released) = std::sync::mpsc::channel::<()>();
        let first = {
            let (flusher, runs) = (flusher.clone(), runs.clone());
            std::thread::spawn(move || {
                flusher.flush_with(|| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    released.recv().expect("released");
                    Err(io::Error::other("EIO"))
                })
            })
        };
        while runs.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let later: Vec<_> = (0..2)
            .map(|_| {
                let (flusher, runs) = (flusher.clone(), runs.clone());
                std::thread::spawn(move || {
                    flusher.flush_with(|| {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    })
                })
            })
            .collect();
        while flusher.state.lock().expect("lock").waiting < 2 {
            std::thread::yield_now();
        }
        release.send(()).expect("release");
        let error = first.join().expect("join").expect_err("its flush failed");
        assert_eq!(error.to_string(), "EIO");
        for t in later {
            t.join()
                .expect("join")
                .expect("covered by the second flush");
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            2,
            "the two later callers share one flush"
        );
        // A caller the failed flush covered, waking late, still sees it.
        let mut state = flusher.state.lock().expect("lock");
        state.started = 0;
        drop(state);
        let late = flusher.flush_with(|| Ok(()));
        assert_eq!(late.expect_err("flush 1 failed").to_string(), "EIO");
    }
}

//! The OSD's recovery throttle: a bounded pool of push slots shared by all
//! its PGs, granted degraded-first, and a byte-rate limit on what the
//! pushes send. Both bounds change live (`cairn config set`).
//!
//! Client I/O never passes through here: recovery and backfill take at
//! most `limit` concurrent object reads and at most `rate` bytes a second,
//! and the rest of the disk and network is the clients'.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Which pushes go first when slots are scarce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Priority {
    /// An object a client waits for.
    Client,
    /// An object with fewer copies than the pool's size: a further failure
    /// could lose it.
    Degraded,
    /// A complete object on the wrong OSDs (rebalancing).
    Misplaced,
}

#[derive(Debug)]
struct State {
    limit: usize,
    active: usize,
    /// Waiters in grant order: priority, then arrival.
    waiters: BTreeMap<(Priority, u64), oneshot::Sender<()>>,
    arrivals: u64,
    /// Bytes a second (0: unlimited).
    rate: u64,
    /// When the bytes sent so far have been paid for.
    paid_until: Option<Instant>,
}

/// See the module docs.
#[derive(Debug)]
pub struct Throttle {
    state: Mutex<State>,
}

/// A granted slot; dropping it hands the slot to the next waiter.
#[derive(Debug)]
pub struct Permit {
    throttle: Arc<Throttle>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut state = self.throttle.lock();
        state.active -= 1;
        grant(&mut state);
    }
}

fn grant(state: &mut State) {
    while state.active < state.limit {
        let Some((_, waiter)) = state.waiters.pop_first() else {
            return;
        };
        // A waiter that gave up is skipped.
        if waiter.send(()).is_ok() {
            state.active += 1;
        }
    }
}

impl Throttle {
    #[must_use]
    pub fn new(limit: usize, rate_bytes_per_sec: u64) -> Arc<Throttle> {
        Arc::new(Throttle {
            state: Mutex::new(State {
                limit: limit.max(1),
                active: 0,
                waiters: BTreeMap::new(),
                arrivals: 0,
                rate: rate_bytes_per_sec,
                paid_until: None,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("a thread panicked holding the recovery throttle")
    }

    /// Waits for a slot. A future dropped after its slot was granted but
    /// before it saw the grant keeps the slot: callers run to completion.
    pub async fn acquire(self: &Arc<Self>, priority: Priority) -> Permit {
        let waiting = {
            let mut state = self.lock();
            if state.active < state.limit && state.waiters.is_empty() {
                state.active += 1;
                None
            } else {
                let (tx, rx) = oneshot::channel();
                state.arrivals += 1;
                let key = (priority, state.arrivals);
                state.waiters.insert(key, tx);
                Some(rx)
            }
        };
        if let Some(rx) = waiting {
            // The sender lives in the map until it grants; it is never
            // dropped unsent while the throttle lives.
            drop(rx.await);
        }
        Permit {
            throttle: Arc::clone(self),
        }
    }

    /// Waits until sending `bytes` keeps within the rate.
    pub async fn pace(&self, bytes: u64) {
        let wait_until = {
            let mut state = self.lock();
            if state.rate == 0 {
                state.paid_until = None;
                return;
            }
            let now = Instant::now();
            let start = state.paid_until.filter(|t| *t > now).unwrap_or(now);
            let cost = Duration::from_secs_f64(bytes as f64 / state.rate as f64);
            state.paid_until = Some(start + cost);
            start
        };
        tokio::time::sleep_until(wait_until).await;
    }

    /// Changes the bounds; more slots are granted at once.
    pub fn set(&self, limit: usize, rate_bytes_per_sec: u64) {
        let mut state = self.lock();
        state.limit = limit.max(1);
        state.rate = rate_bytes_per_sec;
        grant(&mut state);
    }

    /// Slots in use and waiters.
    #[must_use]
    pub fn load(&self) -> (usize, usize) {
        let state = self.lock();
        (state.active, state.waiters.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn degraded_waiters_go_before_misplaced_ones() {
        let throttle = Throttle::new(1, 0);
        let held = throttle.acquire(Priority::Misplaced).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (i, priority) in [
            Priority::Misplaced,
            Priority::Misplaced,
            Priority::Degraded,
            Priority::Degraded,
        ]
        .into_iter()
        .enumerate()
        {
            let throttle = Arc::clone(&throttle);
            let order = Arc::clone(&order);
            tasks.push(tokio::spawn(async move {
                let _permit = throttle.acquire(priority).await;
                order.lock().expect("order lock").push(i);
            }));
            tokio::task::yield_now().await;
        }
        assert_eq!(throttle.load(), (1, 4));
        drop(held);
        for task in tasks {
            task.await.expect("waiter task");
        }
        assert_eq!(*order.lock().expect("order lock"), vec![2, 3, 0, 1]);
        assert_eq!(throttle.load(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn raising_the_limit_grants_waiters_at_once() {
        let throttle = Throttle::new(1, 0);
        let _held = throttle.acquire(Priority::Degraded).await;
        let waiter = {
            let throttle = Arc::clone(&throttle);
            tokio::spawn(async move {
                let _permit = throttle.acquire(Priority::Degraded).await;
            })
        };
        tokio::task::yield_now().await;
        assert_eq!(throttle.load(), (1, 1));
        throttle.set(2, 0);
        waiter.await.expect("waiter task");
    }

    #[tokio::test(start_paused = true)]
    async fn pacing_holds_the_byte_rate() {
        let throttle = Throttle::new(4, 1 << 20);
        let start = Instant::now();
        for _ in 0..4 {
            throttle.pace(1 << 20).await;
        }
        // Four MiB at one MiB/s: the fourth may start after three seconds.
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_secs(3), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
        throttle.set(4, 0);
        let before = Instant::now();
        throttle.pace(1 << 30).await;
        assert_eq!(before.elapsed(), Duration::ZERO, "unlimited: no wait");
    }
}

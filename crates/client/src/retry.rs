//! When a request is tried again, how long after, and when it is given up:
//! the one retry policy [`crate::Client`] and the simulator's clients
//! share.
//!
//! Sans-IO: a [`Retrier`] is told how each attempt failed and how long
//! the request has run, and answers with a [`Decision`]. It reads no
//! clock, sleeps nowhere and draws no random numbers, so the simulator
//! runs it in virtual time and a seed replays exactly.
//!
//! The policy: an OSD's `Retry` (stale map, not primary, PG not yet
//! servable) and an unreachable target (transport failure, no answer,
//! no primary in the map) are tried again after a fresh map; `Blocked`,
//! `Busy` and `Timeout` with the same map; `ObjectBusy` soon, with the
//! backoff capped at [`OBJECT_BUSY_BACKOFF_MAX`] and not counted against
//! `attempts_max` (only the deadline bounds them: recovering an object
//! may take longer than 200 quick retries). The backoff starts at
//! `backoff_initial` and doubles up to `backoff_max`. The request is
//! given up once `attempts_max` attempts (busy retries aside) failed, or
//! when the next attempt would start past `op_deadline`. Every other
//! error of an OSD is the request's answer.

use crate::error::ClientError;
use crate::limits::{ClientOptions, OBJECT_BUSY_BACKOFF_MAX};
use cairn_proto::osd::OpError;
use std::time::Duration;

/// How an attempt failed, when another one may succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Setback {
    /// Worth another attempt; `refetch_map`: with a fresh map first.
    Again { refetch_map: bool, why: String },
    /// The object is busy for a moment (being recovered or scrubbed, or
    /// a guarded write waits for writes to settle): retry soon.
    Soon(String),
}

/// What to do after a failed attempt.
#[derive(Clone, Debug)]
pub enum Decision {
    /// Attempt again `after` this wait, with a fresh map first if
    /// `refetch_map`; `why` the last attempt failed.
    Retry {
        refetch_map: bool,
        after: Duration,
        why: String,
    },
    /// Stop: the request's answer is this error (the OSD's final answer,
    /// or [`ClientError::GaveUp`] when attempts or time ran out).
    GiveUp(ClientError),
}

/// Sorts an OSD's error into a setback worth retrying, or the request's
/// final error.
///
/// # Errors
/// The client's error for an answer no retry changes.
pub fn classify(error: OpError) -> Result<Setback, ClientError> {
    match error {
        error @ OpError::Retry { .. } => Ok(Setback::Again {
            refetch_map: true,
            why: error.to_string(),
        }),
        error @ OpError::ObjectBusy => Ok(Setback::Soon(error.to_string())),
        error @ (OpError::Blocked { .. } | OpError::Busy { .. } | OpError::Timeout(_)) => {
            Ok(Setback::Again {
                refetch_map: false,
                why: error.to_string(),
            })
        }
        OpError::NotFound => Err(ClientError::NotFound),
        OpError::CompareFailed { guard, reason } => {
            Err(ClientError::CompareFailed { guard, reason })
        }
        OpError::Exists => Err(ClientError::Exists),
        OpError::Full(why) => Err(ClientError::Full(why)),
        error => Err(ClientError::Op(error)),
    }
}

/// The retry state of one request (one request id across its attempts).
#[derive(Clone, Debug)]
pub struct Retrier {
    attempts_max: u32,
    backoff_max: Duration,
    op_deadline: Duration,
    /// The wait before the next attempt.
    backoff: Duration,
    /// Attempts that failed, and of them those on a busy object.
    attempts: u32,
    busy_retries: u32,
}

impl Retrier {
    /// A request's retry state under `options`' bounds.
    #[must_use]
    pub fn new(options: &ClientOptions) -> Retrier {
        Retrier {
            attempts_max: options.attempts_max,
            backoff_max: options.backoff_max,
            op_deadline: options.op_deadline,
            backoff: options.backoff_initial,
            attempts: 0,
            busy_retries: 0,
        }
    }

    /// Attempts that failed so far.
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// An attempt failed with `setback`, `elapsed` after the request
    /// began: when to try again, or that the request is given up.
    pub fn failed(&mut self, setback: Setback, elapsed: Duration) -> Decision {
        self.attempts += 1;
        let (refetch_map, why) = match setback {
            Setback::Soon(why) => {
                self.backoff = self.backoff.min(OBJECT_BUSY_BACKOFF_MAX);
                self.busy_retries += 1;
                (false, why)
            }
            Setback::Again { refetch_map, why } => (refetch_map, why),
        };
        let counted = self.attempts - self.busy_retries;
        if counted >= self.attempts_max || elapsed + self.backoff >= self.op_deadline {
            return Decision::GiveUp(ClientError::GaveUp {
                attempts: self.attempts,
                elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                last: why,
            });
        }
        let after = self.backoff;
        self.backoff = (self.backoff * 2).min(self.backoff_max);
        Decision::Retry {
            refetch_map,
            after,
            why,
        }
    }

    /// An OSD answered an attempt with `error`, `elapsed` after the
    /// request began.
    pub fn answered(&mut self, error: OpError, elapsed: Duration) -> Decision {
        match classify(error) {
            Ok(setback) => self.failed(setback, elapsed),
            Err(error) => Decision::GiveUp(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> ClientOptions {
        ClientOptions {
            op_deadline: Duration::from_secs(10),
            attempts_max: 3,
            backoff_initial: Duration::from_millis(20),
            backoff_max: Duration::from_millis(100),
            ..ClientOptions::default()
        }
    }

    fn again(refetch_map: bool) -> Setback {
        Setback::Again {
            refetch_map,
            why: "x".into(),
        }
    }

    fn after(decision: &Decision) -> Option<Duration> {
        match decision {
            Decision::Retry { after, .. } => Some(*after),
            Decision::GiveUp(_) => None,
        }
    }

    #[test]
    fn backoff_doubles_to_its_maximum_and_attempts_run_out() {
        let options = ClientOptions {
            attempts_max: 5,
            ..options()
        };
        let mut retrier = Retrier::new(&options);
        let waits: Vec<Option<u64>> = (0..5)
            .map(|_| {
                let decision = retrier.failed(again(false), Duration::ZERO);
                after(&decision).map(|d| u64::try_from(d.as_millis()).unwrap_or(0))
            })
            .collect();
        assert_eq!(waits, [Some(20), Some(40), Some(80), Some(100), None]);
    }

    #[test]
    fn busy_retries_are_quick_and_bounded_by_the_deadline_only() {
        let mut retrier = Retrier::new(&options());
        let first = retrier.failed(again(true), Duration::ZERO);
        assert_eq!(after(&first), Some(Duration::from_millis(20)));
        let second = retrier.failed(again(true), Duration::ZERO);
        assert_eq!(after(&second), Some(Duration::from_millis(40)));
        // The busy object caps the wait, and does not count as an attempt.
        for _ in 0..50 {
            let busy = retrier.failed(Setback::Soon("busy".into()), Duration::from_secs(1));
            assert!(after(&busy).is_some_and(|d| d <= OBJECT_BUSY_BACKOFF_MAX));
        }
        let late = retrier.failed(Setback::Soon("busy".into()), Duration::from_secs(10));
        assert!(matches!(
            late,
            Decision::GiveUp(ClientError::GaveUp { attempts: 53, .. })
        ));
    }

    #[test]
    fn retry_refetches_the_map_and_final_errors_give_up() {
        let mut retrier = Retrier::new(&options());
        let retry = OpError::Retry {
            epoch: 3,
            reason: "not primary".into(),
        };
        assert!(matches!(
            retrier.answered(retry, Duration::ZERO),
            Decision::Retry {
                refetch_map: true,
                ..
            }
        ));
        let busy = OpError::Busy { inflight_max: 1 };
        assert!(matches!(
            retrier.answered(busy, Duration::ZERO),
            Decision::Retry {
                refetch_map: false,
                ..
            }
        ));
        assert!(matches!(
            retrier.answered(OpError::NotFound, Duration::ZERO),
            Decision::GiveUp(ClientError::NotFound)
        ));
        let past = retrier.failed(again(true), Duration::from_secs(10));
        assert!(matches!(past, Decision::GiveUp(ClientError::GaveUp { .. })));
    }
}

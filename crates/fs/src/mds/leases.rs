//! Leases on cached metadata, and the mailboxes recalls go out through.
//!
//! A session that was answered an inode's attributes may cache them, and
//! one that looked a name up (or made it) may cache that directory's
//! entries, each for the lease time. Before another session's change is
//! answered, every holder of a lease the change breaks gets a [`Recall`]
//! in its [`Mailbox`] (delivered on its next poll) and the answer waits
//! for the holder's acknowledgement, the lease's end, or the recall
//! timeout, after which the holder is evicted.

use crate::format::Delta;
use cairn_proto::mds::{Inval, Recall};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, watch};

/// Holders per key: (session, lease end).
type Holders = Vec<(u64, Instant)>;

/// Which sessions may cache what, until when.
#[derive(Debug)]
pub struct Leases {
    attrs: HashMap<u64, Holders>,
    entries: HashMap<u64, Holders>,
    /// Files whose written data a session may keep past `close`.
    buffers: HashMap<u64, (u64, Instant)>,
    lease: Duration,
}

fn put(holders: &mut Holders, session: u64, until: Instant) {
    match holders.iter_mut().find(|(s, _)| *s == session) {
        Some(h) => h.1 = h.1.max(until),
        None => holders.push((session, until)),
    }
}

/// The live holders of `key` other than `except`; forgets expired ones.
fn live(
    map: &mut HashMap<u64, Holders>,
    key: u64,
    except: u64,
    now: Instant,
) -> Vec<(u64, Instant)> {
    let Some(holders) = map.get_mut(&key) else {
        return Vec::new();
    };
    holders.retain(|(_, until)| *until > now);
    let found = holders
        .iter()
        .filter(|(s, _)| *s != except)
        .copied()
        .collect();
    if holders.is_empty() {
        map.remove(&key);
    }
    found
}

impl Leases {
    #[must_use]
    pub fn new(lease: Duration) -> Leases {
        Leases {
            attrs: HashMap::new(),
            entries: HashMap::new(),
            buffers: HashMap::new(),
            lease,
        }
    }

    #[must_use]
    pub fn lease(&self) -> Duration {
        self.lease
    }

    pub fn grant_attrs(&mut self, ino: u64, session: u64, now: Instant) {
        put(
            self.attrs.entry(ino).or_default(),
            session,
            now + self.lease,
        );
    }

    pub fn grant_entries(&mut self, dir: u64, session: u64, now: Instant) {
        put(
            self.entries.entry(dir).or_default(),
            session,
            now + self.lease,
        );
    }

    pub fn grant_buffer(&mut self, ino: u64, session: u64, now: Instant) {
        self.buffers.insert(ino, (session, now + self.lease));
    }

    /// The session that may buffer `ino`'s written data, while its lease
    /// lasts.
    pub fn buffer_holder(&mut self, ino: u64, now: Instant) -> Option<u64> {
        match self.buffers.get(&ino) {
            Some(&(session, until)) if until > now => Some(session),
            Some(_) => {
                self.buffers.remove(&ino);
                None
            }
            None => None,
        }
    }

    /// Ends `session`'s buffer lease on `ino`; whether it held one.
    pub fn end_buffer(&mut self, ino: u64, session: u64) -> bool {
        if self.buffers.get(&ino).is_some_and(|(s, _)| *s == session) {
            self.buffers.remove(&ino);
            return true;
        }
        false
    }

    /// What `deltas` (a change by `changer`) breaks: per other holder, the
    /// invalidations it needs and the end of its latest lease among them.
    /// The changer's own kernel updates its caches itself.
    pub fn broken_by(
        &mut self,
        deltas: &[Delta],
        changer: u64,
        now: Instant,
    ) -> HashMap<u64, (Vec<Inval>, Instant)> {
        let mut invals = BTreeSet::new();
        for delta in deltas {
            match delta {
                Delta::PutInode(rec) => {
                    invals.insert(Key::Inode(rec.attr.ino));
                }
                Delta::DropInode(ino) => {
                    invals.insert(Key::Inode(*ino));
                }
                Delta::PutDentry { dir, name, .. } | Delta::DropDentry { dir, name, .. } => {
                    invals.insert(Key::Entry(*dir, name.to_vec()));
                }
                // A split or merge moves entries without changing them.
                Delta::DropDir { .. }
                | Delta::Refrag { .. }
                | Delta::Purge { .. }
                | Delta::InoReserved(_)
                | Delta::PutUsage(_) => {}
            }
        }
        let mut out: HashMap<u64, (Vec<Inval>, Instant)> = HashMap::new();
        for key in invals {
            let (holders, inval) = match key {
                Key::Inode(ino) => (live(&mut self.attrs, ino, changer, now), Inval::Inode(ino)),
                Key::Entry(dir, name) => (
                    live(&mut self.entries, dir, changer, now),
                    Inval::Entry {
                        parent: dir,
                        name: name.into(),
                    },
                ),
            };
            for (session, until) in holders {
                let slot = out.entry(session).or_insert_with(|| (Vec::new(), until));
                slot.0.push(inval.clone());
                slot.1 = slot.1.max(until);
            }
        }
        out
    }

    pub fn drop_session(&mut self, session: u64) {
        self.buffers.retain(|_, (s, _)| *s != session);
        for map in [&mut self.attrs, &mut self.entries] {
            map.retain(|_, holders| {
                holders.retain(|(s, _)| *s != session);
                !holders.is_empty()
            });
        }
    }

    /// Forgets every expired lease.
    pub fn sweep(&mut self, now: Instant) {
        self.buffers.retain(|_, (_, until)| *until > now);
        for map in [&mut self.attrs, &mut self.entries] {
            map.retain(|_, holders| {
                holders.retain(|(_, until)| *until > now);
                !holders.is_empty()
            });
        }
    }

    /// Leases each session holds.
    #[must_use]
    pub fn counts(&self) -> HashMap<u64, u64> {
        let mut counts = HashMap::new();
        for holders in self.attrs.values().chain(self.entries.values()) {
            for (s, _) in holders {
                *counts.entry(*s).or_default() += 1;
            }
        }
        for (s, _) in self.buffers.values() {
            *counts.entry(*s).or_default() += 1;
        }
        counts
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Inode(u64),
    Entry(u64, Vec<u8>),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The recalls waiting for one session's poll.
#[derive(Debug)]
pub struct Mailbox {
    state: Mutex<MailState>,
    /// Wakes the session's waiting poll.
    pub wake: Notify,
    acked: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct MailState {
    last_id: u64,
    queue: VecDeque<Recall>,
}

impl Mailbox {
    #[must_use]
    pub fn new() -> Arc<Mailbox> {
        Arc::new(Mailbox {
            state: Mutex::new(MailState::default()),
            wake: Notify::new(),
            acked: watch::channel(0).0,
        })
    }

    /// Queues `invals`; returns the number the holder acknowledges them by.
    pub fn send(&self, invals: Vec<Inval>) -> u64 {
        let mut state = lock(&self.state);
        for inval in invals {
            state.last_id += 1;
            let id = state.last_id;
            state.queue.push_back(Recall { id, inval });
        }
        let last = state.last_id;
        drop(state);
        self.wake.notify_one();
        last
    }

    /// The holder has done every recall up to `upto`.
    pub fn ack(&self, upto: u64) {
        let mut state = lock(&self.state);
        let upto = upto.min(state.last_id);
        while state.queue.front().is_some_and(|r| r.id <= upto) {
            state.queue.pop_front();
        }
        drop(state);
        self.acked.send_if_modified(|a| {
            let newer = upto > *a;
            *a = (*a).max(upto);
            newer
        });
    }

    /// Recalls not yet acknowledged.
    #[must_use]
    pub fn pending(&self) -> Vec<Recall> {
        lock(&self.state).queue.iter().cloned().collect()
    }

    #[must_use]
    pub fn pending_count(&self) -> u64 {
        lock(&self.state).queue.len() as u64
    }

    #[must_use]
    pub fn acked(&self) -> watch::Receiver<u64> {
        self.acked.subscribe()
    }
}

/// An evicted session, as listed.
#[derive(Clone, Debug)]
pub struct Evicted {
    pub name: String,
    pub reason: String,
    pub at: Instant,
}

/// What the namespace actor and the connection handlers share.
#[derive(Debug, Default)]
pub struct Shared {
    pub mailboxes: HashMap<u64, Arc<Mailbox>>,
    pub evicted: HashMap<u64, Evicted>,
    /// Requests being answered: number → (since, session, operation).
    pub in_flight: BTreeMap<u64, (Instant, u64, &'static str)>,
    pub next_request: u64,
    /// Requests answered past the complaint time since the start.
    pub slow_total: u64,
}

pub type SharedState = Arc<Mutex<Shared>>;

impl Shared {
    pub fn mailbox(&mut self, session: u64) -> Arc<Mailbox> {
        Arc::clone(self.mailboxes.entry(session).or_insert_with(Mailbox::new))
    }
}

/// Locks the shared state.
pub fn shared(state: &SharedState) -> std::sync::MutexGuard<'_, Shared> {
    lock(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_bytes::ByteBuf;

    fn dentry_change(dir: u64, name: &str) -> Delta {
        Delta::DropDentry {
            dir,
            frag: crate::format::Frag::WHOLE,
            name: ByteBuf::from(name.as_bytes().to_vec()),
        }
    }

    #[test]
    fn a_change_recalls_other_holders_only_while_their_lease_lasts() {
        let t0 = Instant::now();
        let mut leases = Leases::new(Duration::from_secs(30));
        leases.grant_entries(1, 10, t0);
        leases.grant_entries(1, 20, t0);
        let broken = leases.broken_by(&[dentry_change(1, "a")], 10, t0);
        assert_eq!(broken.len(), 1, "the changer is not recalled");
        let (invals, until) = &broken[&20];
        assert_eq!(
            invals,
            &vec![Inval::Entry {
                parent: 1,
                name: ByteBuf::from(b"a".to_vec())
            }]
        );
        assert_eq!(*until, t0 + Duration::from_secs(30));
        let later = t0 + Duration::from_secs(31);
        assert!(
            leases
                .broken_by(&[dentry_change(1, "a")], 10, later)
                .is_empty()
        );
    }

    #[test]
    fn a_dropped_session_holds_nothing() {
        let t0 = Instant::now();
        let mut leases = Leases::new(Duration::from_secs(30));
        leases.grant_attrs(5, 20, t0);
        leases.grant_entries(1, 20, t0);
        assert_eq!(leases.counts()[&20], 2);
        leases.drop_session(20);
        assert!(leases.counts().is_empty());
        assert!(leases.broken_by(&[Delta::DropInode(5)], 10, t0).is_empty());
    }

    #[test]
    fn a_mailbox_keeps_recalls_until_acknowledged() {
        let mailbox = Mailbox::new();
        let acked = mailbox.acked();
        let id = mailbox.send(vec![Inval::Inode(1), Inval::Inode(2)]);
        assert_eq!(id, 2);
        assert_eq!(mailbox.pending().len(), 2);
        mailbox.ack(1);
        assert_eq!(mailbox.pending().len(), 1);
        assert_eq!(*acked.borrow(), 1);
        // An acknowledgement past what was sent counts only what was.
        mailbox.ack(99);
        assert!(mailbox.pending().is_empty());
        assert_eq!(*acked.borrow(), 2);
    }
}

//! Advisory byte-range locks, coherent across every client of the file
//! system: the MDS holds them (in memory: after a failover clients take
//! their locks again, as after a reboot). Sans-IO; the server parks a
//! waiting request and retries it whenever a lock goes away.
//!
//! POSIX rules: a lock is owned by (session, owner); read locks share, a
//! write lock excludes every other owner's lock on an overlapping range;
//! an owner's new lock replaces its own locks on the range, and an unlock
//! of part of a range splits it.

use cairn_proto::mds::{LockInfo, LockKind, MdsOp};
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    session: u64,
    owner: u64,
    start: u64,
    end: u64,
    write: bool,
    pid: u32,
}

/// Who asks, and for which inclusive range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockRange {
    pub session: u64,
    pub owner: u64,
    pub start: u64,
    pub end: u64,
}

/// What a `SetLock` from `session` asks: (inode, range, kind, pid).
#[must_use]
pub fn requested(op: &MdsOp, session: u64) -> Option<(u64, LockRange, LockKind, u32)> {
    let MdsOp::SetLock {
        ino,
        owner,
        start,
        end,
        kind,
        pid,
        ..
    } = *op
    else {
        return None;
    };
    let range = LockRange {
        session,
        owner,
        start,
        end,
    };
    Some((ino, range, kind, pid))
}

/// The locks of every inode.
#[derive(Debug, Default)]
pub struct Locks {
    held: HashMap<u64, Vec<Held>>,
}

impl Locks {
    /// The first lock of another owner that conflicts with `kind` on
    /// `range`.
    #[must_use]
    pub fn conflict(&self, ino: u64, range: LockRange, kind: LockKind) -> Option<LockInfo> {
        if kind == LockKind::Unlock {
            return None;
        }
        let write = kind == LockKind::Write;
        self.held.get(&ino)?.iter().find_map(|h| {
            let other = (h.session, h.owner) != (range.session, range.owner);
            let overlaps = h.start <= range.end && range.start <= h.end;
            (other && overlaps && (h.write || write)).then_some(LockInfo {
                start: h.start,
                end: h.end,
                kind: if h.write {
                    LockKind::Write
                } else {
                    LockKind::Read
                },
                pid: h.pid,
            })
        })
    }

    /// Takes (or, for `Unlock`, releases) a lock.
    ///
    /// # Errors
    /// The conflicting lock; nothing changes then.
    pub fn set(
        &mut self,
        ino: u64,
        range: LockRange,
        kind: LockKind,
        pid: u32,
    ) -> Result<(), LockInfo> {
        if let Some(c) = self.conflict(ino, range, kind) {
            return Err(c);
        }
        let list = self.held.entry(ino).or_default();
        // The owner's own locks on the range give way (split at its ends).
        let mut kept = Vec::with_capacity(list.len() + 1);
        for h in list.drain(..) {
            let own = (h.session, h.owner) == (range.session, range.owner);
            if !own || h.end < range.start || range.end < h.start {
                kept.push(h);
                continue;
            }
            if h.start < range.start {
                kept.push(Held {
                    end: range.start - 1,
                    ..h
                });
            }
            if h.end > range.end {
                kept.push(Held {
                    start: range.end + 1,
                    ..h
                });
            }
        }
        if kind != LockKind::Unlock {
            kept.push(Held {
                session: range.session,
                owner: range.owner,
                start: range.start,
                end: range.end,
                write: kind == LockKind::Write,
                pid,
            });
        }
        if kept.is_empty() {
            self.held.remove(&ino);
        } else {
            *list = kept;
        }
        Ok(())
    }

    /// Every lock held: (inode, range, kind, pid), for a client to take
    /// its locks again from a new MDS.
    #[must_use]
    pub fn all(&self) -> Vec<(u64, LockRange, LockKind, u32)> {
        let mut out: Vec<_> = self
            .held
            .iter()
            .flat_map(|(ino, list)| {
                list.iter().map(|h| {
                    let range = LockRange {
                        session: h.session,
                        owner: h.owner,
                        start: h.start,
                        end: h.end,
                    };
                    let kind = if h.write {
                        LockKind::Write
                    } else {
                        LockKind::Read
                    };
                    (*ino, range, kind, h.pid)
                })
            })
            .collect();
        out.sort_by_key(|(ino, r, _, _)| (*ino, r.owner, r.start));
        out
    }

    /// Releases every lock of a session that went away; whether any was
    /// held.
    pub fn drop_session(&mut self, session: u64) -> bool {
        let before: usize = self.held.values().map(Vec::len).sum();
        for list in self.held.values_mut() {
            list.retain(|h| h.session != session);
        }
        self.held.retain(|_, l| !l.is_empty());
        let after: usize = self.held.values().map(Vec::len).sum();
        before != after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(session: u64, owner: u64, start: u64, end: u64) -> LockRange {
        LockRange {
            session,
            owner,
            start,
            end,
        }
    }

    #[test]
    fn readers_share_writers_exclude_and_unlocks_split() {
        let mut l = Locks::default();
        l.set(1, r(1, 1, 0, 99), LockKind::Read, 10).expect("read");
        l.set(1, r(2, 1, 50, 60), LockKind::Read, 20)
            .expect("shared read");
        let c = l
            .set(1, r(2, 2, 0, 10), LockKind::Write, 30)
            .expect_err("conflict");
        assert_eq!((c.start, c.end, c.pid), (0, 99, 10));
        // Disjoint ranges do not conflict; another inode neither.
        l.set(1, r(2, 2, 100, 200), LockKind::Write, 30)
            .expect("disjoint");
        l.set(2, r(2, 2, 0, 10), LockKind::Write, 30)
            .expect("other inode");
        // Owner 1 unlocks the middle: 0..=9 and 61..=99 stay.
        l.set(1, r(1, 1, 10, 60), LockKind::Unlock, 10)
            .expect("unlock");
        assert!(l.conflict(1, r(3, 1, 5, 5), LockKind::Write).is_some());
        assert!(l.conflict(1, r(3, 1, 30, 40), LockKind::Write).is_none());
        assert!(l.conflict(1, r(3, 1, 61, 61), LockKind::Write).is_some());
        // An owner's own lock is upgraded in place, never a conflict.
        l.set(1, r(1, 1, 0, 9), LockKind::Write, 10)
            .expect("upgrade");
        assert_eq!(
            l.all()
                .iter()
                .map(|(ino, r, k, _)| (*ino, r.session, r.start, r.end, *k))
                .collect::<Vec<_>>(),
            vec![
                (1, 1, 0, 9, LockKind::Write),
                (1, 2, 50, 60, LockKind::Read),
                (1, 1, 61, 99, LockKind::Read),
                (1, 2, 100, 200, LockKind::Write),
                (2, 2, 0, 10, LockKind::Write),
            ]
        );
        assert!(l.drop_session(1));
        assert!(l.drop_session(2));
        assert!(!l.drop_session(2));
        assert!(
            l.conflict(1, r(3, 1, 0, u64::MAX), LockKind::Write)
                .is_none()
        );
    }
}

//! The MDS's cache budget: the namespace cache is trimmed to a configured
//! size by dropping the least recently used inodes and directories whose
//! every change is written back to the metadata pool (so loading them
//! again reads what the cache held). Open inodes and the root stay.

use crate::format::{Delta, Frag, InodeRec, frag_of, name_hash};
use crate::mds::namespace::Namespace;
use cairn_proto::mds::{MdsOp, ROOT_INO};

/// Estimated bytes of one cached inode (its record, xattrs aside, and
/// the maps that index it).
pub const INODE_BYTES: usize = 320;

/// Estimated bytes of one cached directory entry beyond its name (kept
/// twice: by cookie and by name).
pub const DENTRY_BYTES: usize = 160;

/// Estimated bytes of one cached inode: its record with its xattrs,
/// symlink target and inline data.
fn inode_bytes(rec: &InodeRec) -> usize {
    let xattrs: usize = rec.xattrs.iter().map(|(n, v)| n.len() + v.len()).sum();
    let target = rec.target.as_ref().map_or(0, |t| t.len());
    let inline = rec.inline.as_ref().map_or(0, |d| d.capacity());
    INODE_BYTES + xattrs + target + inline
}

/// What trimming did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Trimmed {
    pub inodes: usize,
    /// Directory fragments.
    pub dirs: usize,
}

/// Something the cache holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Held {
    Inode(u64),
    Frag(u64, Frag),
}

impl Namespace {
    /// Notes that `op` used these inodes (for least-recently-used order).
    pub(crate) fn note_use(&mut self, op: &MdsOp) {
        let (first, second) = match op {
            MdsOp::Lookup { parent, name }
            | MdsOp::Create { parent, name, .. }
            | MdsOp::Symlink { parent, name, .. }
            | MdsOp::Unlink { parent, name, .. }
            | MdsOp::Rmdir { parent, name } => {
                self.touch_name(*parent, name);
                (*parent, None)
            }
            MdsOp::Rename {
                parent,
                name,
                new_parent,
                new_name,
                ..
            } => {
                self.touch_name(*parent, name);
                self.touch_name(*new_parent, new_name);
                (*parent, Some(*new_parent))
            }
            MdsOp::Link {
                ino, parent, name, ..
            } => {
                self.touch_name(*parent, name);
                (*ino, Some(*parent))
            }
            MdsOp::GetAttr { ino }
            | MdsOp::SetAttr { ino, .. }
            | MdsOp::ReadDir { ino, .. }
            | MdsOp::Readlink { ino }
            | MdsOp::Open { ino, .. }
            | MdsOp::Release { ino }
            | MdsOp::Written { ino, .. }
            | MdsOp::WriteInline { ino, .. }
            | MdsOp::Uninline { ino }
            | MdsOp::ReadInline { ino }
            | MdsOp::SetXattr { ino, .. }
            | MdsOp::GetXattr { ino, .. }
            | MdsOp::ListXattr { ino }
            | MdsOp::RemoveXattr { ino, .. } => (*ino, None),
            _ => return,
        };
        self.touch(first);
        if let Some(second) = second {
            self.touch(second);
        }
    }

    /// Notes that `ino` was just used or loaded.
    pub(crate) fn touch(&mut self, ino: u64) {
        self.clock += 1;
        let clock = self.clock;
        self.last_used.insert(ino, clock);
    }

    /// Notes that the fragment of `dir` holding `name` was just used.
    fn touch_name(&mut self, dir: u64, name: &[u8]) {
        let Some(rec) = self.inodes.get(&dir) else {
            return;
        };
        let frag = frag_of(&rec.frags, name_hash(name));
        self.touch_frag(dir, frag, None);
    }

    /// Notes that fragment `frag` of `dir` was used (and changed under
    /// journal sequence `changed`).
    fn touch_frag(&mut self, dir: u64, frag: Frag, changed: Option<u64>) {
        self.clock += 1;
        let clock = self.clock;
        if let Some(f) = self.dirs.get_mut(&dir).and_then(|d| d.frags.get_mut(&frag)) {
            f.last_used = clock;
            if let Some(seq) = changed {
                f.changed_at = seq;
            }
        }
    }

    /// Notes that `deltas`, journaled under `seq`, changed these inodes
    /// and directory fragments: they stay cached until written back.
    pub fn note_changed(&mut self, deltas: &[Delta], seq: u64) {
        for delta in deltas {
            let ino = match delta {
                Delta::PutInode(rec) | Delta::PutUsage(rec) => rec.attr.ino,
                Delta::PutDentry { dir, frag, .. } | Delta::DropDentry { dir, frag, .. } => {
                    self.touch_frag(*dir, *frag, Some(seq));
                    continue;
                }
                Delta::Refrag { dir, to, .. } => {
                    for frag in to {
                        self.touch_frag(*dir, *frag, Some(seq));
                    }
                    continue;
                }
                Delta::DropInode(ino) | Delta::DropDir { ino, .. } => *ino,
                Delta::Purge { .. } | Delta::InoReserved(_) => continue,
            };
            self.changed_at.insert(ino, seq);
            self.touch(ino);
        }
    }

    /// The cache's estimated size in bytes.
    #[must_use]
    pub fn cache_bytes(&self) -> usize {
        let inodes: usize = self.inodes.values().map(inode_bytes).sum();
        let dentries: usize = self.dirs.values().map(|d| d.bytes(DENTRY_BYTES)).sum();
        inodes + dentries
    }

    /// Drops the least recently used clean entries until the cache fits
    /// in 90 % of `budget` bytes; `written_back`: every change up to this
    /// journal sequence is in the metadata pool.
    pub fn trim(&mut self, budget: usize, written_back: u64) -> Trimmed {
        let mut size = self.cache_bytes();
        if size <= budget {
            return Trimmed::default();
        }
        let target = budget / 10 * 9;
        let clean = |ns: &Namespace, ino: u64| {
            ino != ROOT_INO
                && !ns.opens.contains_key(&ino)
                && ns.changed_at.get(&ino).is_none_or(|s| *s <= written_back)
        };
        let mut candidates: Vec<(u64, Held)> = self
            .inodes
            .keys()
            .filter(|ino| clean(self, **ino))
            .map(|ino| {
                let used = self.last_used.get(ino).copied().unwrap_or(0);
                (used, Held::Inode(*ino))
            })
            .collect();
        // A directory's fragments go one at a time (the root's too: a
        // huge root directory must not outgrow the budget).
        for (ino, dir) in &self.dirs {
            for (frag, f) in &dir.frags {
                if f.changed_at <= written_back {
                    candidates.push((f.last_used, Held::Frag(*ino, *frag)));
                }
            }
        }
        candidates.sort_unstable();
        let mut trimmed = Trimmed::default();
        for (_, held) in candidates {
            if size <= target {
                break;
            }
            match held {
                Held::Frag(ino, frag) => {
                    let Some(dir) = self.dirs.get_mut(&ino) else {
                        continue;
                    };
                    if let Some(f) = dir.frags.remove(&frag) {
                        size = size.saturating_sub(f.bytes(DENTRY_BYTES));
                        trimmed.dirs += 1;
                    }
                    if dir.frags.is_empty() {
                        self.dirs.remove(&ino);
                    }
                }
                Held::Inode(ino) => {
                    if let Some(rec) = self.inodes.remove(&ino) {
                        size = size.saturating_sub(inode_bytes(&rec));
                        trimmed.inodes += 1;
                    }
                    self.last_used.remove(&ino);
                    self.changed_at.remove(&ino);
                }
            }
        }
        if trimmed.inodes + trimmed.dirs > 0 {
            self.inodes.shrink_to(self.inodes.len() * 2);
            self.dirs.shrink_to(self.dirs.len() * 2);
            self.last_used.shrink_to(self.last_used.len() * 2);
            self.changed_at.shrink_to(self.changed_at.len() * 2);
        }
        trimmed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mds::namespace::{Need, Stop};
    use cairn_proto::mds::{Caller, MdsAnswer, Time};

    fn create(ns: &mut Namespace, name: &str) -> (u64, Vec<Delta>) {
        let op = crate::mds::namespace::create_op(ROOT_INO, name, libc::S_IFREG | 0o644);
        let out = ns
            .execute(&op, Caller::default(), Time::default())
            .expect("create");
        let MdsAnswer::Attr(a) = out.answer else {
            panic!("no attr")
        };
        (a.ino, out.deltas)
    }

    #[test]
    fn only_written_back_entries_leave_and_they_are_loaded_again() {
        let mut ns = Namespace::new(2, 2);
        ns.insert_inode(Namespace::root_inode(Time::default()));
        ns.insert_frag(ROOT_INO, Frag::WHOLE, []);
        let mut inos = Vec::new();
        for i in 0..200 {
            let (ino, deltas) = create(&mut ns, &format!("f{i}"));
            ns.note_changed(&deltas, i + 1);
            inos.push(ino);
        }
        let full = ns.cache_bytes();
        // Nothing written back: nothing may go, whatever the budget.
        assert_eq!(ns.trim(1000, 0), Trimmed::default());
        // Written back up to the 100th create: only those may go.
        let trimmed = ns.trim(1000, 100);
        assert_eq!(trimmed.inodes, 100, "{trimmed:?}");
        assert!(ns.cache_bytes() < full);
        let get = |ns: &mut Namespace, ino| {
            ns.execute(&MdsOp::GetAttr { ino }, Caller::default(), Time::default())
        };
        assert!(matches!(
            get(&mut ns, inos[0]),
            Err(Stop::Need(Need::Inode(i))) if i == inos[0]
        ));
        assert!(get(&mut ns, inos[150]).is_ok(), "an unwritten entry stayed");
        // Everything written back and a roomy budget: nothing goes.
        assert_eq!(ns.trim(usize::MAX, 200), Trimmed::default());
    }
}

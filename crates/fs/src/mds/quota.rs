//! Directory quotas (as CephFS's `ceph.quota.*`): a directory with
//! `cairn.quota.max_files` or `cairn.quota.max_bytes` set is a **realm**;
//! it keeps the usage of its subtree (`cairn.dir.rfiles`: inodes below it,
//! `cairn.dir.rbytes`: bytes of the regular files below it) as xattrs of
//! its own inode, updated by every change below it, and a change that
//! would take any realm it is in past a limit is refused `EDQUOT`. The
//! root is always a realm (without limits unless set): its usage is the
//! file system's (`cairn fs df`).
//!
//! A file counts in the realms of its primary parent (the directory it
//! was made or last renamed into); a hard link in another realm does not
//! count there.

use crate::format::{Delta, InodeRec};
use crate::mds::namespace::{Namespace, Need, Stop};
use cairn_proto::mds::ROOT_INO;
use serde_bytes::ByteBuf;

pub const MAX_BYTES_XATTR: &[u8] = b"cairn.quota.max_bytes";
pub const MAX_FILES_XATTR: &[u8] = b"cairn.quota.max_files";
pub const RBYTES_XATTR: &[u8] = b"cairn.dir.rbytes";
pub const RFILES_XATTR: &[u8] = b"cairn.dir.rfiles";

/// A change of usage: inodes and bytes (negative for removals).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub files: i64,
    pub bytes: i64,
}

impl Usage {
    #[must_use]
    pub fn new(files: i64, bytes: i64) -> Usage {
        Usage { files, bytes }
    }

    #[must_use]
    pub fn is_zero(self) -> bool {
        self.files == 0 && self.bytes == 0
    }
}

impl std::ops::Neg for Usage {
    type Output = Usage;

    fn neg(self) -> Usage {
        Usage::new(-self.files, -self.bytes)
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A decimal number xattr of `rec`.
#[must_use]
pub fn xattr_u64(rec: &InodeRec, name: &[u8]) -> Option<u64> {
    let (_, v) = rec.xattrs.iter().find(|(n, _)| n.as_slice() == name)?;
    std::str::from_utf8(v).ok()?.trim().parse().ok()
}

pub fn set_xattr_u64(rec: &mut InodeRec, name: &[u8], value: u64) {
    let text = ByteBuf::from(value.to_string().into_bytes());
    match rec.xattrs.iter_mut().find(|(n, _)| n.as_slice() == name) {
        Some(slot) => slot.1 = text,
        None => rec.xattrs.push((ByteBuf::from(name.to_vec()), text)),
    }
}

pub fn remove_xattr(rec: &mut InodeRec, name: &[u8]) {
    rec.xattrs.retain(|(n, _)| n.as_slice() != name);
}

/// Whether `rec` keeps the usage of its subtree.
#[must_use]
pub fn is_realm(rec: &InodeRec) -> bool {
    rec.attr.ino == ROOT_INO
        || xattr_u64(rec, MAX_BYTES_XATTR).is_some()
        || xattr_u64(rec, MAX_FILES_XATTR).is_some()
}

/// Whether `name` is one of the quota xattrs an administrator sets.
#[must_use]
pub fn is_limit(name: &[u8]) -> bool {
    name == MAX_BYTES_XATTR || name == MAX_FILES_XATTR
}

/// Whether `name` is a usage xattr (kept by the MDS, read-only).
#[must_use]
pub fn is_usage(name: &[u8]) -> bool {
    name == RBYTES_XATTR || name == RFILES_XATTR
}

/// The stored usage of a realm.
#[must_use]
pub fn usage_of(rec: &InodeRec) -> Usage {
    Usage::new(
        to_i64(xattr_u64(rec, RFILES_XATTR).unwrap_or(0)),
        to_i64(xattr_u64(rec, RBYTES_XATTR).unwrap_or(0)),
    )
}

impl Namespace {
    /// The file system's usage (the root's), if the root is cached.
    #[must_use]
    pub fn root_usage(&self) -> Usage {
        self.inode_rec(ROOT_INO).map(usage_of).unwrap_or_default()
    }

    /// Whether a quota limit applies in `dir` (or it cannot be told
    /// from the cache).
    #[must_use]
    pub fn limited(&self, dir: u64) -> bool {
        let Ok(realms) = self.realms(dir) else {
            return true;
        };
        realms.iter().any(|r| {
            self.inode_rec(*r).is_ok_and(|rec| {
                xattr_u64(rec, MAX_BYTES_XATTR).is_some_and(|m| m > 0)
                    || xattr_u64(rec, MAX_FILES_XATTR).is_some_and(|m| m > 0)
            })
        })
    }

    /// The realms `dir` is in (itself included), nearest first; the root
    /// is always last.
    pub(crate) fn realms(&self, dir: u64) -> Result<Vec<u64>, Stop> {
        let mut out = Vec::new();
        let mut ino = dir;
        for _ in 0..100_000 {
            let rec = self.inode_rec(ino)?;
            if is_realm(rec) {
                out.push(ino);
            }
            if ino == ROOT_INO {
                break;
            }
            ino = rec.parent;
        }
        Ok(out)
    }

    /// `EDQUOT` if adding `add` would take a realm of `realms` past a
    /// limit (removals always fit).
    pub(crate) fn check_room(&self, realms: &[u64], add: Usage) -> Result<(), Stop> {
        for realm in realms {
            let rec = self.inode_rec(*realm)?;
            let used = usage_of(rec);
            let over = |limit: &[u8], used: i64, more: i64| {
                more > 0
                    && xattr_u64(rec, limit)
                        .is_some_and(|max| max > 0 && used.saturating_add(more) > to_i64(max))
            };
            if over(MAX_FILES_XATTR, used.files, add.files)
                || over(MAX_BYTES_XATTR, used.bytes, add.bytes)
            {
                return Err(Stop::Errno(libc::EDQUOT));
            }
        }
        Ok(())
    }

    /// Adds `add` to the usage of every realm of `realms`, with the
    /// records to store (which change no cached attribute).
    pub(crate) fn charge(&mut self, realms: &[u64], add: Usage, deltas: &mut Vec<Delta>) {
        if add.is_zero() {
            return;
        }
        for realm in realms {
            if let Some(rec) = self.inode_mut(*realm) {
                let used = usage_of(rec);
                let files = u64::try_from(used.files.saturating_add(add.files)).unwrap_or(0);
                let bytes = u64::try_from(used.bytes.saturating_add(add.bytes)).unwrap_or(0);
                set_xattr_u64(rec, RFILES_XATTR, files);
                set_xattr_u64(rec, RBYTES_XATTR, bytes);
                deltas.push(Delta::PutUsage(rec.clone()));
            }
        }
    }

    /// The usage below `dir` (not counting `dir` itself): from its record
    /// if it is a realm, else by walking its subtree, which asks for every
    /// missing directory and inode of a level at once.
    pub(crate) fn subtree_usage(&self, dir: u64) -> Result<Usage, Stop> {
        let rec = self.inode_rec(dir)?;
        if is_realm(rec) && xattr_u64(rec, RFILES_XATTR).is_some() {
            return Ok(usage_of(rec));
        }
        self.walk_usage(dir)
    }

    /// The usage below `dir`, counted from its entries.
    pub(crate) fn walk_usage(&self, dir: u64) -> Result<Usage, Stop> {
        let mut usage = Usage::default();
        let mut missing = Vec::new();
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            let entries = match self.dir_entries(d) {
                Ok(entries) => entries,
                Err(needs) => {
                    missing.extend(needs);
                    continue;
                }
            };
            for dentry in entries {
                usage.files += 1;
                if dentry.kind == libc::S_IFDIR {
                    stack.push(dentry.ino);
                    continue;
                }
                if dentry.kind == libc::S_IFREG {
                    match self.inode_rec(dentry.ino) {
                        Ok(rec) => usage.bytes = usage.bytes.saturating_add(to_i64(rec.attr.size)),
                        Err(_) => missing.push(Need::Inode(dentry.ino)),
                    }
                }
            }
        }
        if missing.is_empty() {
            Ok(usage)
        } else {
            Err(Stop::NeedMany(missing))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_of_zero_is_no_limit_and_removals_always_fit() {
        let mut rec = Namespace::root_inode(cairn_proto::mds::Time::default());
        set_xattr_u64(&mut rec, RFILES_XATTR, 10);
        set_xattr_u64(&mut rec, MAX_FILES_XATTR, 10);
        assert_eq!(usage_of(&rec), Usage::new(10, 0));
        let mut ns = Namespace::new(2, 2);
        ns.insert_inode(rec.clone());
        assert_eq!(
            ns.check_room(&[ROOT_INO], Usage::new(1, 0)),
            Err(Stop::Errno(libc::EDQUOT))
        );
        assert_eq!(ns.check_room(&[ROOT_INO], Usage::new(-1, 0)), Ok(()));
        set_xattr_u64(&mut rec, MAX_FILES_XATTR, 0);
        ns.insert_inode(rec);
        assert_eq!(ns.check_room(&[ROOT_INO], Usage::new(1, 0)), Ok(()));
    }
}

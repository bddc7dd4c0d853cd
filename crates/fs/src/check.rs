//! `cairn fs check`: reads a file system's namespace as stored (directory
//! and inode objects, with the journal's not yet written-back changes laid
//! over them in order) and reports every inconsistency: a dangling entry,
//! an inode no entry reaches, a link count that differs from the entries,
//! a directory whose parent or kind is wrong, a stale directory object,
//! and on request a data object of no file (an orphan). It only reads;
//! run it on a quiet file system (a change written back while it reads is
//! caught by comparing the journal head before and after, and the check is
//! redone).

use crate::format::{
    self, Delta, Dentry, Entry, Frag, HEAD_OBJECT, HEAD_XATTR, Head, INODES_PER_OBJECT_SHIFT,
    InodeRec, segment_object,
};
use bytes::Bytes;
use cairn_client::{Client, ClientError, ReadRange};
use cairn_proto::mds::ROOT_INO;
use std::collections::{BTreeMap, BTreeSet};

/// Attempts before the check gives up on a namespace that keeps changing.
const ATTEMPTS_MAX: u32 = 5;

/// Omap entries read per page.
const PAGE_ENTRIES: u32 = 1024;

/// What the check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub inodes: u64,
    pub dentries: u64,
    pub directories: u64,
    /// Journal entries laid over the stored objects.
    pub journal_entries: u64,
    pub problems: Vec<String>,
}

/// The namespace as stored.
#[derive(Debug, Default)]
struct Stored {
    inodes: BTreeMap<u64, InodeRec>,
    /// (directory, name) → the fragment object holding it, and the entry.
    dentries: BTreeMap<(u64, Vec<u8>), (Frag, Dentry)>,
    frag_objects: BTreeSet<(u64, Frag)>,
    /// Names found in two fragment objects of one directory.
    doubled: Vec<String>,
}

fn bad(e: impl std::fmt::Display) -> ClientError {
    ClientError::Unexpected(e.to_string())
}

async fn head(client: &Client, pool: &str) -> Result<Head, ClientError> {
    match client.get_xattrs(pool, HEAD_OBJECT.as_bytes()).await {
        Ok(x) => match x.get(HEAD_XATTR) {
            Some(b) => format::decode(b).map_err(bad),
            None => Ok(Head::default()),
        },
        Err(ClientError::NotFound) => Ok(Head::default()),
        Err(e) => Err(e),
    }
}

async fn omap_all(
    client: &Client,
    pool: &str,
    object: &[u8],
) -> Result<Vec<(Bytes, Bytes)>, ClientError> {
    let mut out = Vec::new();
    let mut after: Option<Bytes> = None;
    loop {
        let page = client
            .omap_range(pool, object, after.as_deref(), PAGE_ENTRIES)
            .await?;
        // Inode records with inline data fill a page by bytes before
        // entries: the end is an empty page.
        let Some((last, _)) = page.last() else {
            return Ok(out);
        };
        after = Some(last.clone());
        out.extend(page);
    }
}

async fn load(client: &Client, pool: &str) -> Result<Stored, ClientError> {
    let mut stored = Stored::default();
    let mut cursor = None;
    loop {
        let page = client.list(pool, cursor, 1024).await?;
        for name in &page.names {
            let text = String::from_utf8_lossy(name);
            if text.starts_with("dir.") {
                let (dir, frag) = format::parse_dir_object(&text)
                    .ok_or_else(|| bad(format!("{text}: not a directory object name")))?;
                stored.frag_objects.insert((dir, frag));
                for (k, v) in omap_all(client, pool, name).await? {
                    let dentry: Dentry = format::decode(&v).map_err(bad)?;
                    if let Some((other, _)) =
                        stored.dentries.insert((dir, k.to_vec()), (frag, dentry))
                    {
                        stored.doubled.push(format!(
                            "entry {:?} of {dir:x} is in two fragment objects ({}, {})",
                            String::from_utf8_lossy(&k),
                            format::dir_object(dir, other),
                            format::dir_object(dir, frag)
                        ));
                    }
                }
            } else if let Some(shard_hex) = text.strip_prefix("inode.") {
                let shard = u64::from_str_radix(shard_hex, 16).map_err(bad)?;
                for (k, v) in omap_all(client, pool, name).await? {
                    let rec: InodeRec = format::decode(&v).map_err(bad)?;
                    if format::ino_of_key(&k) != Some(rec.attr.ino)
                        || rec.attr.ino >> INODES_PER_OBJECT_SHIFT != shard
                    {
                        return Err(bad(format!(
                            "{text}: inode {} under the wrong key",
                            rec.attr.ino
                        )));
                    }
                    stored.inodes.insert(rec.attr.ino, rec);
                }
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(stored),
        }
    }
}

async fn journal(client: &Client, pool: &str, first: u64) -> Result<Vec<Entry>, ClientError> {
    let mut all = Vec::new();
    for seq in first.. {
        let name = segment_object(seq);
        match client
            .read(pool, name.as_bytes(), ReadRange::default())
            .await
        {
            Ok(bytes) => all.extend(format::decode_segment(&bytes).map_err(bad)?),
            Err(ClientError::NotFound) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(all)
}

impl Stored {
    fn apply(&mut self, delta: &Delta) {
        match delta {
            Delta::PutInode(rec) | Delta::PutUsage(rec) => {
                self.inodes.insert(rec.attr.ino, rec.clone());
            }
            Delta::DropInode(ino) => {
                self.inodes.remove(ino);
            }
            Delta::PutDentry {
                dir,
                frag,
                name,
                dentry,
            } => {
                self.dentries
                    .insert((*dir, name.to_vec()), (*frag, *dentry));
                self.frag_objects.insert((*dir, *frag));
            }
            Delta::DropDentry { dir, name, .. } => {
                self.dentries.remove(&(*dir, name.to_vec()));
            }
            Delta::DropDir { ino, frags } => {
                self.dentries.retain(|(d, _), _| d != ino);
                for f in frags {
                    self.frag_objects.remove(&(*ino, *f));
                }
            }
            Delta::Refrag {
                dir,
                from,
                to,
                entries,
            } => {
                self.dentries
                    .retain(|(d, _), (f, _)| d != dir || !from.contains(f));
                for f in from {
                    self.frag_objects.remove(&(*dir, *f));
                }
                for (name, dentry) in entries {
                    let frag = format::frag_of(to, format::name_hash(name));
                    self.dentries.insert((*dir, name.to_vec()), (frag, *dentry));
                    self.frag_objects.insert((*dir, frag));
                }
            }
            Delta::Purge { .. } | Delta::InoReserved(_) => {}
        }
    }

    fn check(&self) -> Vec<String> {
        let mut problems = self.doubled.clone();
        let is_dir = |r: &InodeRec| r.attr.mode & libc::S_IFMT == libc::S_IFDIR;
        let tree = |dir: u64| -> Vec<Frag> {
            match self.inodes.get(&dir) {
                Some(r) if r.frags.is_empty() => vec![Frag::WHOLE],
                Some(r) => r.frags.clone(),
                None => Vec::new(),
            }
        };
        match self.inodes.get(&ROOT_INO) {
            Some(root) if is_dir(root) => {}
            _ => problems.push("the root directory (inode 1) is missing or not a directory".into()),
        }
        let mut links: BTreeMap<u64, u32> = BTreeMap::new();
        let mut subdirs: BTreeMap<u64, u32> = BTreeMap::new();
        for ((dir, name), (frag, d)) in &self.dentries {
            let shown = String::from_utf8_lossy(name);
            match self.inodes.get(dir) {
                Some(r) if is_dir(r) => {
                    if !tree(*dir).contains(frag) || !frag.contains(format::name_hash(name)) {
                        problems.push(format!(
                            "entry {shown:?} of {dir:x} is in object {}, not its fragment's",
                            format::dir_object(*dir, *frag)
                        ));
                    }
                }
                _ => problems.push(format!(
                    "entry {shown:?} in {dir:x}, which is not a directory"
                )),
            }
            let Some(rec) = self.inodes.get(&d.ino) else {
                problems.push(format!(
                    "dangling entry {shown:?} in {dir:x}: inode {:x} does not exist",
                    d.ino
                ));
                continue;
            };
            if rec.attr.mode & libc::S_IFMT != d.kind {
                problems.push(format!(
                    "entry {shown:?} in {dir:x} says kind {:o}, inode {:x} is {:o}",
                    d.kind,
                    d.ino,
                    rec.attr.mode & libc::S_IFMT
                ));
            }
            *links.entry(d.ino).or_default() += 1;
            if is_dir(rec) {
                *subdirs.entry(*dir).or_default() += 1;
                if rec.parent != *dir {
                    problems.push(format!(
                        "directory {:x} is in {dir:x} but names {:x} its parent",
                        d.ino, rec.parent
                    ));
                }
            }
        }
        for (ino, rec) in &self.inodes {
            let found = links.get(ino).copied().unwrap_or(0);
            if *ino == ROOT_INO {
                continue;
            }
            if found == 0 && rec.attr.nlink == 0 {
                // Unlinked while open: kept until the last close.
                continue;
            }
            if found == 0 {
                problems.push(format!(
                    "orphan inode {ino:x} (nlink {}): no entry reaches it",
                    rec.attr.nlink
                ));
            } else if is_dir(rec) {
                if found != 1 {
                    problems.push(format!("directory {ino:x} has {found} entries"));
                }
            } else if found != rec.attr.nlink {
                problems.push(format!(
                    "inode {ino:x} has nlink {} but {found} entries",
                    rec.attr.nlink
                ));
            }
        }
        for (ino, rec) in &self.inodes {
            if is_dir(rec) {
                let want = 2 + subdirs.get(ino).copied().unwrap_or(0);
                if rec.attr.nlink != want {
                    problems.push(format!(
                        "directory {ino:x} has nlink {} but {want} by its subdirectories",
                        rec.attr.nlink
                    ));
                }
            }
        }
        for (ino, rec) in &self.inodes {
            if let Some(data) = &rec.inline {
                if rec.attr.mode & libc::S_IFMT != libc::S_IFREG {
                    problems.push(format!("inode {ino:x} keeps inline data but is no file"));
                } else if data.len() as u64 != rec.attr.size {
                    problems.push(format!(
                        "inode {ino:x} keeps {} bytes of inline data but its size is {}",
                        data.len(),
                        rec.attr.size
                    ));
                }
            }
        }
        for (ino, rec) in &self.inodes {
            if is_dir(rec) && !format::valid_tree(&rec.frags) {
                problems.push(format!(
                    "directory {ino:x}: its fragments do not cover its hashes"
                ));
            }
        }
        for (dir, frag) in &self.frag_objects {
            let object = format::dir_object(*dir, *frag);
            if !self.inodes.get(dir).is_some_and(is_dir) {
                problems.push(format!("directory object {object} of no directory"));
            } else if !tree(*dir).contains(frag) {
                problems.push(format!(
                    "directory object {object} of a fragment {dir:x} no longer has"
                ));
            }
        }
        problems
    }
}

/// Orphan data objects named in a report before the rest are counted.
const ORPHANS_NAMED_MAX: usize = 20;

/// The inode numbers whose data objects the purge queue still holds.
async fn purging(client: &Client, meta_pool: &str) -> Result<BTreeSet<u64>, ClientError> {
    let entries = match omap_all(client, meta_pool, format::PURGE_OBJECT.as_bytes()).await {
        Ok(entries) => entries,
        Err(ClientError::NotFound) => Vec::new(),
        Err(e) => return Err(e),
    };
    Ok(entries
        .iter()
        .filter_map(|(k, _)| format::ino_of_key(k))
        .collect())
}

/// Data objects (`<ino>.<index>`, hexadecimal) in `data_pool` of no inode
/// in `known` and not queued for purging: space no file holds.
async fn orphan_data(
    client: &Client,
    data_pool: &str,
    known: &BTreeMap<u64, InodeRec>,
    purging: &BTreeSet<u64>,
) -> Result<Vec<String>, ClientError> {
    let mut orphans = Vec::new();
    let mut count = 0usize;
    let mut cursor = None;
    loop {
        let page = client.list(data_pool, cursor, 1024).await?;
        for name in &page.names {
            let text = String::from_utf8_lossy(name);
            let Some(ino) = text
                .split_once('.')
                .and_then(|(ino, _)| u64::from_str_radix(ino, 16).ok())
            else {
                continue;
            };
            if known.contains_key(&ino) || purging.contains(&ino) {
                continue;
            }
            count += 1;
            if orphans.len() < ORPHANS_NAMED_MAX {
                orphans.push(format!(
                    "orphan data object {text} (inode {ino} does not exist and is not being purged)"
                ));
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if count > orphans.len() {
        orphans.push(format!(
            "{} more orphan data objects",
            count - orphans.len()
        ));
    }
    Ok(orphans)
}

/// Checks the namespace in metadata pool `meta_pool`, and with
/// `data_pool` also that every data object there belongs to a file (or
/// waits in the purge queue): that scan lists the whole pool.
///
/// # Errors
/// A read error, damaged records, or a namespace that kept changing for
/// [`ATTEMPTS_MAX`] attempts.
pub async fn check(
    client: &Client,
    meta_pool: &str,
    data_pool: Option<&str>,
) -> Result<CheckReport, ClientError> {
    for _ in 0..ATTEMPTS_MAX {
        let before = head(client, meta_pool).await?;
        let mut stored = match load(client, meta_pool).await {
            Ok(stored) => stored,
            // An object listed was removed before it was read (a fragment
            // merged or a directory removed by the write-back meanwhile).
            Err(ClientError::NotFound) => continue,
            Err(e) => return Err(e),
        };
        let entries = journal(client, meta_pool, before.first_segment).await?;
        if head(client, meta_pool).await?.first_segment != before.first_segment {
            // Segments were written back and trimmed while we read.
            continue;
        }
        for entry in &entries {
            for delta in &entry.deltas {
                stored.apply(delta);
            }
        }
        let directories = stored
            .inodes
            .values()
            .filter(|r| r.attr.mode & libc::S_IFMT == libc::S_IFDIR)
            .count() as u64;
        let mut problems = stored.check();
        if let Some(data_pool) = data_pool {
            // The queue before the listing: an entry gone from it by then
            // had its objects deleted first.
            let mut queued = purging(client, meta_pool).await?;
            queued.extend(
                entries
                    .iter()
                    .flat_map(|e| &e.deltas)
                    .filter_map(|d| match d {
                        Delta::Purge { ino, .. } => Some(*ino),
                        _ => None,
                    }),
            );
            problems.extend(orphan_data(client, data_pool, &stored.inodes, &queued).await?);
        }
        return Ok(CheckReport {
            inodes: stored.inodes.len() as u64,
            dentries: stored.dentries.len() as u64,
            directories,
            journal_entries: entries.len() as u64,
            problems,
        });
    }
    Err(ClientError::Unexpected(
        "the namespace kept changing while it was read; run the check on a quiet file system"
            .into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::mds::Attr;

    fn rec(ino: u64, mode: u32, nlink: u32, parent: u64) -> InodeRec {
        InodeRec {
            attr: Attr {
                ino,
                mode,
                nlink,
                ..Attr::default()
            },
            parent,
            ..InodeRec::default()
        }
    }

    #[test]
    fn a_sound_namespace_passes_and_each_fault_is_named() {
        let mut s = Stored::default();
        s.inodes.insert(1, rec(1, libc::S_IFDIR | 0o755, 3, 1));
        let mut split = rec(2, libc::S_IFDIR | 0o755, 2, 1);
        split.frags = Frag::WHOLE.split(3);
        s.inodes.insert(2, split.clone());
        s.inodes.insert(3, rec(3, libc::S_IFREG | 0o644, 2, 2));
        let whole = |ino, kind| (Frag::WHOLE, Dentry { ino, kind });
        let f_frag = format::frag_of(&split.frags, format::name_hash(b"f"));
        s.dentries
            .insert((1, b"d".to_vec()), whole(2, libc::S_IFDIR));
        s.dentries.insert(
            (2, b"f".to_vec()),
            (
                f_frag,
                Dentry {
                    ino: 3,
                    kind: libc::S_IFREG,
                },
            ),
        );
        s.dentries
            .insert((1, b"hard".to_vec()), whole(3, libc::S_IFREG));
        s.frag_objects.insert((1, Frag::WHOLE));
        s.frag_objects.insert((2, f_frag));
        assert_eq!(s.check(), Vec::<String>::new());
        s.dentries
            .insert((1, b"gone".to_vec()), whole(9, libc::S_IFREG));
        s.inodes.insert(7, rec(7, libc::S_IFREG | 0o644, 1, 1));
        let mut small = rec(8, libc::S_IFREG | 0o644, 1, 1);
        small.attr.size = 5;
        small.inline = Some(serde_bytes::ByteBuf::from(b"abc".to_vec()));
        s.inodes.insert(8, small);
        s.dentries
            .insert((1, b"small".to_vec()), whole(8, libc::S_IFREG));
        s.apply(&Delta::DropDentry {
            dir: 1,
            frag: Frag::WHOLE,
            name: serde_bytes::ByteBuf::from(b"hard".to_vec()),
        });
        // The split directory's old whole object left behind, and an
        // entry in a fragment its name does not hash to.
        s.frag_objects.insert((2, Frag::WHOLE));
        let wrong = split.frags.iter().find(|f| **f != f_frag).copied();
        s.dentries.get_mut(&(2, b"f".to_vec())).expect("f").0 = wrong.expect("8 fragments");
        let problems = s.check().join("\n");
        assert!(problems.contains("dangling entry \"gone\""), "{problems}");
        assert!(problems.contains("orphan inode 7"), "{problems}");
        assert!(
            problems.contains("inode 3 has nlink 2 but 1 entries"),
            "{problems}"
        );
        assert!(
            problems.contains("dir.2: a fragment")
                || problems.contains("object dir.2 of a fragment"),
            "{problems}"
        );
        assert!(problems.contains("not its fragment's"), "{problems}");
        assert!(
            problems.contains("inode 8 keeps 3 bytes of inline data but its size is 5"),
            "{problems}"
        );
    }
}

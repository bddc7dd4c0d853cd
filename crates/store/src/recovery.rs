//! Bringing a store's directory up at open: created with durable names,
//! its metadata database opened (or, for a new store, created whole and
//! renamed into place), the superblock checked (and upgraded from format
//! 1), and the commit log replayed.

use crate::failpoint::{CrashPoint, SyncSite};
use crate::record::{self, Superblock};
use crate::shared::{Shared, StoreConfig, apply_changes, flush_store, statvfs};
use crate::wal::Wal;
use crate::{StoreError, limits};
use fjall::{Database, Keyspace, KeyspaceCreateOptions};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The metadata database's keyspaces.
const KEYSPACES: [&str; 5] = ["super", "collections", "objects", "omap", "meta"];

pub(crate) fn open_db(path: &Path, config: &StoreConfig) -> Result<Database, StoreError> {
    // `max_write_buffer_size` is marked deprecated with the note "todo";
    // it is the documented bound on all memtables, which we need.
    #[allow(deprecated)]
    let db = Database::builder(path)
        .cache_size(config.cache_bytes)
        .manual_journal_persist(true)
        .max_write_buffer_size(Some(limits::META_WRITE_BUFFER_BYTES_MAX))
        .open()?;
    Ok(db)
}

pub(crate) fn open_keyspace(db: &Database, name: &str) -> Result<Keyspace, StoreError> {
    Ok(db.keyspace(name, || {
        KeyspaceCreateOptions::default().max_memtable_size(limits::META_MEMTABLE_BYTES_MAX)
    })?)
}

/// Creates the metadata database of a new store atomically: built whole in
/// `meta.new` (every keyspace and the superblock, flushed, every directory
/// synced), then renamed to `meta`. fjall's own creation is not atomic: a
/// crash inside it followed by a power loss left a journal without the
/// files that describe it, which fjall then refused to open ("File
/// exists"), so an OSD whose first start was cut short could never start.
/// A `meta.new` left by a crash held nothing acknowledged and is removed.
pub(crate) fn create_metadata(dir: &Path, config: &StoreConfig) -> Result<(), StoreError> {
    let staging = dir.join("meta.new");
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    {
        let db = open_db(&staging, config)?;
        for name in KEYSPACES {
            open_keyspace(&db, name)?;
        }
        let superblock = open_keyspace(&db, "super")?;
        check_superblock(&db, &superblock)?;
    }
    if !crate::failpoint::skip(SyncSite::MetaCreate) {
        sync_tree(&staging)?;
    }
    // The rename becomes durable with the fsync of `dir` that ends the
    // store's creation in `DiskStore::open`.
    std::fs::rename(&staging, dir.join("meta"))?;
    Ok(())
}

/// `fsync`s every directory under `path` (and `path`), so every name in
/// the tree survives a power loss whatever the file system's rules for new
/// names.
fn sync_tree(path: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        }
    }
    File::open(path)?.sync_all()
}

/// Creates `path` and any missing parents, fsyncing each new directory's
/// parent so the names survive a power loss (fjall does not do this for the
/// directory it is given).
pub(crate) fn create_dirs_durably(path: &Path) -> Result<(), StoreError> {
    let mut missing = Vec::new();
    let mut at = Some(path);
    while let Some(p) = at {
        if p.exists() {
            break;
        }
        missing.push(p);
        at = p.parent();
    }
    for p in missing.into_iter().rev() {
        std::fs::create_dir(p)?;
        if crate::failpoint::skip(SyncSite::StoreParents) {
            continue;
        }
        if let Some(parent) = p.parent() {
            File::open(if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            })?
            .sync_all()?;
        }
    }
    Ok(())
}

/// Checks the superblock, writing it into a new store. A format 1 store
/// (before the commit log) is upgraded in place: it has no log to replay,
/// and once its superblock says 2 an older build refuses it rather than
/// miss records in a log it does not know.
pub(crate) fn check_superblock(db: &Database, keyspace: &Keyspace) -> Result<(), StoreError> {
    let current = Superblock::current();
    if let Some(value) = keyspace.get(record::SUPERBLOCK_KEY)? {
        let body = record::open(record::SUPERBLOCK_KEY, &value, "superblock")?;
        let found: Superblock = postcard::from_bytes(body)
            .map_err(|e| StoreError::Corrupt(format!("superblock: {e}")))?;
        let upgradable = Superblock {
            format_version: 1,
            ..current.clone()
        };
        if found == current {
            return Ok(());
        }
        if found != upgradable {
            return Err(StoreError::Corrupt(format!(
                "superblock {found:?} is not this build's format {current:?}"
            )));
        }
    }
    let body = postcard::to_allocvec(&current).map_err(|e| StoreError::Io(e.to_string()))?;
    let durability = if crate::failpoint::skip(SyncSite::MetaCreate) {
        None
    } else {
        Some(fjall::PersistMode::SyncAll)
    };
    let mut batch = db.batch().durability(durability);
    batch.insert(
        keyspace,
        record::SUPERBLOCK_KEY,
        record::seal(record::SUPERBLOCK_KEY, &body),
    );
    batch.commit()?;
    Ok(())
}

/// Opens the commit log and replays the records its last checkpoint does
/// not cover: their small data back into the data file, their key images
/// into the metadata database; then makes both durable and checkpoints.
pub(crate) fn recover(shared: &Shared) -> Result<Wal, StoreError> {
    let capacity = if shared.config.wal_bytes > 0 {
        shared.config.wal_bytes
    } else {
        statvfs(&shared.dir)
            .map(|(total, _, _)| total / 128)
            .unwrap_or(0)
    }
    .clamp(limits::WAL_BYTES_MIN, limits::WAL_BYTES_MAX);
    let (mut wal, records) = Wal::open(&shared.dir, capacity).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            StoreError::Corrupt(format!("commit log: {e}"))
        } else {
            StoreError::from(e)
        }
    })?;
    if records.is_empty() {
        return Ok(wal);
    }
    for body in &records {
        for write in &body.data {
            shared.data.write_all_at(&write.bytes, write.offset)?;
        }
        apply_changes(shared, &body.changes)?;
    }
    crate::failpoint::crash_point(CrashPoint::ReplayApplied);
    flush_store(shared)?;
    wal.checkpoint()?;
    Ok(wal)
}

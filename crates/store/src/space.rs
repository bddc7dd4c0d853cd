//! Space accounting: the full check that refuses a write, the file
//! system's usage as the store reports it, the allocator rebuilt from the
//! object records at open and audited against them, and freed extents
//! returned to reuse (or, once the file system is nearfull, to the file
//! system).

use crate::alloc::Allocator;
use crate::data::punch;
use crate::record::{self, Data, ObjectRecord};
use crate::shared::{Shared, UsageSample, statvfs};
use crate::txn::Transaction;
use crate::{CollectionId, CollectionUsage, StoreError, limits};
use std::collections::BTreeMap;
use std::sync::PoisonError;

/// Refuses writes that would take the file system past the full ratio.
///
/// `statfs` on every transaction was 4.8% of the CPU of 16 writers of
/// 4 KiB objects, so a sample of the file system's usage serves for up
/// to [`limits::USAGE_SAMPLE_INTERVAL`], with every payload byte
/// accepted since counted as used (frees are not subtracted). A write
/// that the sample would refuse is decided on a fresh sample, so the
/// sample only ever saves a call, never refuses wrongly.
pub(crate) fn check_space(shared: &Shared, txn: &Transaction) -> Result<(), StoreError> {
    if txn.only_frees_space() {
        return Ok(());
    }
    let needed = txn.payload_bytes();
    let full_ratio = shared.config.full_ratio;
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let limit = |total: u64| (total as f64 * full_ratio) as u64;
    let mut usage = shared.usage.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(sample) = usage.as_mut()
        && sample.taken.elapsed() < limits::USAGE_SAMPLE_INTERVAL
        && sample.used_bytes.saturating_add(needed) <= limit(sample.total_bytes)
    {
        sample.used_bytes += needed;
        return Ok(());
    }
    let (total_bytes, used_bytes, _) = store_usage(shared)?;
    if used_bytes.saturating_add(needed) > limit(total_bytes) {
        *usage = None;
        return Err(StoreError::Full {
            used_bytes,
            total_bytes,
            full_ratio,
        });
    }
    *usage = Some(UsageSample {
        taken: std::time::Instant::now(),
        total_bytes,
        used_bytes: used_bytes + needed,
    });
    Ok(())
}

/// The file system's size, usage and available bytes as the store sees
/// them: blocks the data file holds that no extent uses (freed runs kept
/// for reuse, preallocated growth) count as available, not used.
pub(crate) fn store_usage(shared: &Shared) -> Result<(u64, u64, u64), StoreError> {
    use std::os::unix::fs::MetadataExt;
    let (total, used, available) = statvfs(&shared.dir)?;
    let held = shared
        .data
        .metadata()
        .map_or(0, |m| m.blocks().saturating_mul(512));
    let idle = held.saturating_sub(shared.space.allocator().allocated_bytes());
    Ok((
        total,
        used.saturating_sub(idle),
        available.saturating_add(idle).min(total),
    ))
}

/// Whether freed extents stay allocated in the data file instead of being
/// punched back to the file system: while it is below the nearfull ratio.
///
/// A direct write into blocks that were written before is a plain
/// overwrite; into a punched hole or preallocated (unwritten) blocks, its
/// flush must also write the file's extent blocks and inode, synchronously
/// (measured with fio, 4 MiB direct writes each flushed, 12 writers:
/// 1,450 MiB/s into written blocks, 950 into preallocated ones; a 3-OSD
/// cluster writing 4 MiB objects after deleting earlier ones ran 1.4 to
/// 1.6 times faster when the freed space was kept, see
/// `docs/performance.md`). Like a block device a store owns, the file keeps
/// what it once held; [`store_usage`] counts the unused part as available;
/// once the file system is nearfull, what is freed goes back to it.
pub(crate) fn keeps_freed_space(shared: &Shared) -> bool {
    statvfs(&shared.dir)
        .map(|(total, used, _)| {
            #[allow(clippy::cast_precision_loss)]
            let ratio = used as f64 / total.max(1) as f64;
            ratio < shared.config.nearfull_ratio
        })
        .unwrap_or(false)
}

/// Every extent any object record names is in use; the rest is free.
/// Records that fail their checksum are reported by reads; their extents
/// cannot be known, so a repair rewrites those objects.
pub(crate) fn rebuild_allocator(
    shared: &Shared,
) -> Result<(Allocator, BTreeMap<CollectionId, CollectionUsage>), StoreError> {
    let mut used = Vec::new();
    let mut per_collection: BTreeMap<CollectionId, CollectionUsage> = BTreeMap::new();
    for item in shared.objects.iter() {
        let (key, value) = item.into_inner()?;
        let Ok(record) = ObjectRecord::decode(&key, &value, &|| "object".into()) else {
            continue;
        };
        if let Some((c, _)) = record::parse_object_key(&key) {
            per_collection.entry(c).or_default().add(&record.usage());
        }
        if let Data::Extents { extents, .. } = &record.data {
            used.extend(extents.iter().map(|e| (e.offset, e.allocated_bytes())));
        }
    }
    Ok((Allocator::rebuild(used), per_collection))
}

/// Gives free runs (left by deletes or by transactions a crash cut short)
/// back to the file system. Only at open: no writer can be allocating
/// them then.
pub(crate) fn punch_free_runs(shared: &Shared) {
    for (offset, length) in shared.space.allocator().free_runs() {
        let _ = punch(&shared.data, offset, length);
    }
}

/// Releases the extents no reader can still see, for reuse. They stay
/// allocated in the data file, where the next write overwrites them without
/// the file system allocating or converting blocks, unless the file system
/// is nearfull: then they are punched back to it
/// ([`keeps_freed_space`]).
pub(crate) fn reclaim(shared: &Shared) {
    let ready = shared.space.reclaimable();
    if ready.is_empty() {
        return;
    }
    let keep = keeps_freed_space(shared);
    if !keep {
        for e in &ready {
            // Best effort: without hole punching the space stays in
            // the data file, where it is reused all the same.
            let _ = punch(&shared.data, e.offset, e.allocated_bytes());
        }
    }
    // Runs kept while there was room stay free in the file: writes reuse
    // them without the file system (punching them here would race with
    // writers allocating them); the next open punches them if the file
    // system is still nearfull.
    shared.space.release(&ready);
}

/// What [`DiskStore::audit_space`] found: the data file's space agrees
/// with the object records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceAudit {
    /// Extents object records name.
    pub extents: u64,
    /// Their space in the data file.
    pub referenced_bytes: u64,
    /// Space the allocator counts as held (referenced, in flight or
    /// waiting for reuse).
    pub allocated_bytes: u64,
    /// Freed extents waiting for readers before reuse.
    pub pending_bytes: u64,
}

/// The check behind [`DiskStore::audit_space`](crate::DiskStore::audit_space).
pub(crate) fn audit_space(shared: &Shared) -> Result<SpaceAudit, StoreError> {
    let mut used: Vec<(u64, u64, Vec<u8>)> = Vec::new();
    for item in shared.objects.iter() {
        let (key, value) = item.into_inner()?;
        if let Ok(ObjectRecord {
            data: Data::Extents { extents, .. },
            ..
        }) = ObjectRecord::decode(&key, &value, &|| "object".into())
        {
            used.extend(
                extents
                    .iter()
                    .map(|e| (e.offset, e.allocated_bytes(), key.to_vec())),
            );
        }
    }
    used.sort_unstable();
    let file_bytes = shared.data.metadata()?.len();
    let name = |key: &[u8]| String::from_utf8_lossy(key).into_owned();
    for pair in used.windows(2) {
        let ((a, a_len, a_key), (b, _, b_key)) = ((&pair[0]), (&pair[1]));
        if a + a_len > *b {
            return Err(StoreError::Corrupt(format!(
                "extent at {a} ({a_len} bytes) of {} overlaps extent at {b} of {}: space handed out twice",
                name(a_key),
                name(b_key)
            )));
        }
    }
    let alloc = shared.space.allocator();
    let pending_bytes = shared.space.pending_bytes();
    let mut referenced_bytes = 0;
    for (offset, length, key) in &used {
        referenced_bytes += length;
        if offset + length > file_bytes.max(alloc.end()) {
            return Err(StoreError::Corrupt(format!(
                "extent at {offset} ({length} bytes) of {} ends past the data file ({file_bytes} bytes)",
                name(key)
            )));
        }
        if alloc.any_free(*offset, *length) {
            return Err(StoreError::Corrupt(format!(
                "extent at {offset} ({length} bytes) of {} is free in the allocator: it would be handed out again",
                name(key)
            )));
        }
    }
    let allocated_bytes = alloc.allocated_bytes();
    if allocated_bytes < referenced_bytes {
        return Err(StoreError::Corrupt(format!(
            "the allocator holds {allocated_bytes} bytes but records name {referenced_bytes}"
        )));
    }
    Ok(SpaceAudit {
        extents: used.len() as u64,
        referenced_bytes,
        allocated_bytes,
        pending_bytes,
    })
}

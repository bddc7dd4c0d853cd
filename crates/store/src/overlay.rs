//! A batch's overlay: every collection, object, omap entry and metadata
//! key the transactions of one group commit changed, not yet committed.
//! Each transaction applies to it with an undo log, so one that fails (a
//! missing object, a corrupt record) is rolled back alone while the rest of
//! the batch commits; [`DataWriter`] changes an object's pieces and
//! extents, writing small payloads itself. The committer (`commit.rs`)
//! takes the overlay's changes as key images for its log record.

use crate::data::{read_record, write_extents};
use crate::mem::split_mask;
use crate::record::{self, Data, Extent, ObjectRecord, Piece};
use crate::shared::Shared;
use crate::txn::{Op, Transaction};
use crate::wal::{Change, Space as WalSpace};
use crate::{CollectionId, CollectionUsage, ObjectKey, StoreError, limits};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

/// What a submitter already wrote for one operation.
#[derive(Debug)]
pub(crate) enum Payload {
    /// Nothing: the operation carries no data, or small data the committer
    /// stores itself.
    None,
    /// The operation's data, already in these fresh extents; `durable` once
    /// the submitter has flushed them (it does for large payloads, so the
    /// committer's flush does not wait for them).
    Written { extents: Vec<Extent>, durable: bool },
}

impl Payload {
    pub fn into_extents(self) -> Vec<Extent> {
        match self {
            Payload::None => Vec::new(),
            Payload::Written { extents, .. } => extents,
        }
    }
}

/// Whether any of `extents` is large: written to the data file without
/// going into the log, so it must be durable before a record names it.
pub(crate) fn any_large(extents: &[Extent]) -> bool {
    extents
        .iter()
        .any(|e| e.length >= limits::DIRECT_WRITE_BYTES_MIN)
}

/// An object as the batch sees it.
#[derive(Clone, Debug, Default)]
struct ObjState {
    record: Option<ObjectRecord>,
    /// `cleared`: every committed omap entry is gone; `entries` are set
    /// (`Some`) or removed (`None`) on top.
    omap_cleared: bool,
    omap: BTreeMap<Bytes, Option<Bytes>>,
    /// What the committed record adds to its collection's usage.
    base: CollectionUsage,
}

type ObjId = (CollectionId, ObjectKey);

/// One undo step: the overlay entry before the transaction first touched it.
enum Undo {
    Collection(CollectionId, Option<bool>),
    Object(ObjId, Option<ObjState>),
    Meta((CollectionId, Bytes), Option<Option<Bytes>>),
    MetaCleared(CollectionId, bool),
}

/// A transaction in progress.
#[derive(Default)]
pub(crate) struct TxnCtx {
    undo: Vec<Undo>,
    touched_objects: BTreeSet<ObjId>,
    touched_collections: BTreeSet<CollectionId>,
    touched_meta: BTreeSet<(CollectionId, Bytes)>,
    touched_meta_cleared: BTreeSet<CollectionId>,
    /// Extents written for this transaction (by its submitter or here).
    pub(crate) allocated: Vec<Extent>,
    /// Some of them are large and not yet flushed.
    pub(crate) unsynced: bool,
    /// The bytes of the small ones, by data-file offset, for the log
    /// record (so the committer need not read them back).
    pub(crate) small_bytes: Vec<(u64, Bytes)>,
    /// Extents this transaction stopped referencing.
    pub(crate) freed: Vec<Extent>,
}

/// Everything a batch changed, not yet committed.
#[derive(Default)]
struct Overlay {
    collections: BTreeMap<CollectionId, bool>,
    objects: BTreeMap<ObjId, ObjState>,
    meta: BTreeMap<(CollectionId, Bytes), Option<Bytes>>,
    meta_cleared: BTreeSet<CollectionId>,
}

/// The transactions of one group commit, applied in order to an
/// [`Overlay`] over what the store holds committed.
pub(crate) struct Batch<'a> {
    shared: &'a Shared,
    overlay: Overlay,
    wrote_data: bool,
}

impl Batch<'_> {
    /// An empty batch over what `shared` holds committed.
    pub(crate) fn new(shared: &Shared) -> Batch<'_> {
        Batch {
            shared,
            overlay: Overlay::default(),
            wrote_data: false,
        }
    }

    pub(crate) fn apply(
        &mut self,
        ctx: &mut TxnCtx,
        txn: Transaction,
        payloads: Vec<Payload>,
    ) -> Result<(), StoreError> {
        let c = txn.collection;
        for p in &payloads {
            if let Payload::Written { extents, durable } = p {
                self.wrote_data = true;
                ctx.unsynced |= !durable && any_large(extents);
                ctx.allocated.extend(extents.iter().cloned());
            }
        }
        for (op, payload) in txn.ops.into_iter().zip(payloads) {
            if let (
                Op::Write { data, .. } | Op::WriteFull { data, .. } | Op::Append { data, .. },
                Payload::Written { extents, .. },
            ) = (&op, &payload)
                && let [extent] = extents.as_slice()
                && extent.length < limits::DIRECT_WRITE_BYTES_MIN
            {
                ctx.small_bytes.push((extent.offset, data.bytes().clone()));
            }
            self.apply_op(ctx, c, op, payload)?;
        }
        Ok(())
    }

    fn apply_op(
        &mut self,
        ctx: &mut TxnCtx,
        c: CollectionId,
        op: Op,
        payload: Payload,
    ) -> Result<(), StoreError> {
        match op {
            Op::CreateCollection => {
                if self.collection_exists(c)? {
                    return Err(StoreError::CollectionExists(c));
                }
                self.set_collection(ctx, c, true);
            }
            Op::RemoveCollection => self.remove_collection(ctx, c)?,
            Op::SplitCollection { to, bits, value } => {
                self.split(ctx, c, to, split_mask(bits), value)?
            }
            Op::MetaSet { key, value } => {
                self.require_collection(c)?;
                self.set_meta(ctx, c, key, Some(value));
            }
            Op::MetaRemove { key } => {
                self.require_collection(c)?;
                self.set_meta(ctx, c, key, None);
            }
            other => {
                self.require_collection(c)?;
                self.apply_object_op(ctx, c, other, payload)?;
            }
        }
        Ok(())
    }

    fn apply_object_op(
        &mut self,
        ctx: &mut TxnCtx,
        c: CollectionId,
        op: Op,
        payload: Payload,
    ) -> Result<(), StoreError> {
        let missing = |o: &ObjectKey| StoreError::NotFound {
            collection: c,
            object: o.clone(),
        };
        match op {
            Op::Remove { object } => {
                let state = self.object_mut(ctx, c, &object)?;
                let rec = state.record.take().ok_or_else(|| missing(&object))?;
                state.omap_cleared = true;
                state.omap.clear();
                ctx.freed.extend(extents_of(rec));
            }
            Op::Clone { from, to } => self.clone_object(ctx, c, &from, &to)?,
            Op::CloneRange {
                from,
                to,
                offset,
                length,
                to_offset,
            } => self.clone_range(ctx, c, &from, &to, offset..offset + length, to_offset)?,
            Op::Rename { from, to } => self.rename(ctx, c, &from, &to)?,
            Op::RemoveXattr { object, name } => {
                let rec = self.existing(ctx, c, &object)?;
                rec.xattrs.remove(name.as_ref());
            }
            Op::OmapRemove { object, keys } => {
                self.existing(ctx, c, &object)?;
                let state = self.object_mut(ctx, c, &object)?;
                for key in keys {
                    state.omap.insert(key, None);
                }
            }
            Op::OmapRemoveRange { object, start, end } => {
                self.existing(ctx, c, &object)?;
                if start < end {
                    let doomed: Vec<Bytes> = self
                        .omap_entries(c, &object)?
                        .range(start..end)
                        .map(|(k, _)| k.clone())
                        .collect();
                    let state = self.object_mut(ctx, c, &object)?;
                    for key in doomed {
                        state.omap.insert(key, None);
                    }
                }
            }
            Op::OmapClear { object } => {
                self.existing(ctx, c, &object)?;
                let state = self.object_mut(ctx, c, &object)?;
                state.omap_cleared = true;
                state.omap.clear();
            }
            Op::OmapSet { object, entries } => {
                let state = self.object_mut(ctx, c, &object)?;
                state.record.get_or_insert_with(ObjectRecord::empty);
                for (k, v) in entries {
                    state.omap.insert(k, Some(v));
                }
            }
            data_op => self.apply_data_op(ctx, c, data_op, payload)?,
        }
        Ok(())
    }

    /// Operations that create the object if needed and change its record.
    fn apply_data_op(
        &mut self,
        ctx: &mut TxnCtx,
        c: CollectionId,
        op: Op,
        payload: Payload,
    ) -> Result<(), StoreError> {
        let object = op
            .object()
            .cloned()
            .ok_or_else(|| StoreError::Invalid("operation without object".into()))?;
        let shared = self.shared;
        let state = self.object_mut(ctx, c, &object)?;
        let mut rec = state.record.take().unwrap_or_else(ObjectRecord::empty);
        let mut writer = DataWriter {
            shared,
            ctx,
            wrote_data: false,
        };
        let result = match op {
            Op::Write { offset, data, .. } => writer.write(&mut rec, offset, &data, payload),
            Op::WriteFull { data, .. } => writer.write_full(&mut rec, &data, payload),
            Op::Append { data, .. } => {
                let offset = rec.size;
                writer.write(&mut rec, offset, &data, payload)
            }
            Op::Truncate { size, .. } => writer.truncate(&mut rec, size),
            Op::Zero { offset, length, .. } => writer.zero(&mut rec, offset, length),
            Op::SetVersion { version, .. } => {
                rec.version = version;
                Ok(())
            }
            Op::SetXattrs { xattrs, .. } => {
                rec.xattrs
                    .extend(xattrs.into_iter().map(|(k, v)| (k.to_vec(), v.to_vec())));
                Ok(())
            }
            _ => Ok(()), // Touch
        };
        let wrote = writer.wrote_data;
        // Put the record back even on error: the undo log restores the
        // state before this transaction.
        self.object_mut_loaded(c, &object).record = Some(rec);
        self.wrote_data |= wrote;
        result
    }

    fn clone_object(
        &mut self,
        ctx: &mut TxnCtx,
        c: CollectionId,
        from: &ObjectKey,
        to: &ObjectKey,
    ) -> Result<(), StoreError> {
        let source = self.existing(ctx, c, from)?.clone();
        let omap = self.omap_entries(c, from)?;
        let what = || format!("clone source {from} in {c}");
        let bytes = read_record(self.shared, &source, 0, source.size, true, &what)?;
        let mut rec = ObjectRecord {
            version: source.version,
            size: 0,
            data: Data::Inline(Vec::new()),
            xattrs: source.xattrs,
        };
        let shared = self.shared;
        let mut writer = DataWriter {
            shared,
            ctx,
            wrote_data: false,
        };
        writer.write_full(&mut rec, &bytes, Payload::None)?;
        let wrote = writer.wrote_data;
        self.wrote_data |= wrote;
        let state = self.object_mut(ctx, c, to)?;
        if let Some(old) = state.record.replace(rec) {
            ctx.freed.extend(extents_of(old));
        }
        state.omap_cleared = true;
        state.omap = omap.into_iter().map(|(k, v)| (k, Some(v))).collect();
        Ok(())
    }

    fn clone_range(
        &mut self,
        ctx: &mut TxnCtx,
        c: CollectionId,
        from: &ObjectKey,
        to: &ObjectKey,
        range: std::ops::Range<u64>,
        to_offset: u64,
    ) -> Result<(), StoreError> {
        let source = self.existing(ctx, c, from)?.clone();
        let end = range.end.min(source.size);
        if range.start >= end {
            return Ok(());
        }
        let what = || format!("clone source {from} in {c}");
        // Rot is copied as rot: bytes whose checksums fail are copied as
        // they are, and the blocks they land in fail their checksums too,
        // so a roll-back stash neither refuses the transaction (the OSD
        // would stop) nor turns rotten bytes into sound ones.
        let (bytes, rotten) = match read_record(self.shared, &source, range.start, end, true, &what)
        {
            Ok(bytes) => (bytes, Vec::new()),
            Err(StoreError::Corrupt(_)) => (
                read_record(self.shared, &source, range.start, end, false, &what)?,
                failing_ranges(self.shared, &source, range.start..end, &what)?,
            ),
            Err(error) => return Err(error),
        };
        let shared = self.shared;
        let state = self.object_mut(ctx, c, to)?;
        let mut rec = state.record.take().unwrap_or_else(ObjectRecord::empty);
        let mut writer = DataWriter {
            shared,
            ctx,
            wrote_data: false,
        };
        let mut result = Ok(());
        if !rotten.is_empty() {
            // Inline data has no checksums to fail.
            result = writer.move_inline_to_extent(&mut rec);
        }
        if result.is_ok() {
            result = writer.write(&mut rec, to_offset, &bytes, Payload::None);
        }
        if result.is_ok() {
            for bad in &rotten {
                let at = to_offset + (bad.start - range.start);
                fail_checksums(&mut rec, at..at + (bad.end - bad.start));
            }
        }
        let wrote = writer.wrote_data;
        self.object_mut_loaded(c, to).record = Some(rec);
        self.wrote_data |= wrote;
        result
    }

    fn rename(
        &mut self,
        ctx: &mut TxnCtx,
        c: CollectionId,
        from: &ObjectKey,
        to: &ObjectKey,
    ) -> Result<(), StoreError> {
        self.existing(ctx, c, from)?;
        if from == to {
            return Ok(());
        }
        let omap = self.omap_entries(c, from)?;
        let state = self.object_mut(ctx, c, from)?;
        let rec = state.record.take();
        // Clearing an omap scans its keys at commit: not needed when it
        // has none (entries this batch removed stay removals).
        if !omap.is_empty() {
            state.omap_cleared = true;
            state.omap.clear();
        }
        let target = self.object_mut(ctx, c, to)?;
        let replaced = std::mem::replace(&mut target.record, rec);
        // An object without a record has no omap.
        if replaced.is_some() || !target.omap.is_empty() {
            target.omap_cleared = true;
            target.omap.clear();
        }
        if let Some(old) = replaced {
            ctx.freed.extend(extents_of(old));
        }
        target
            .omap
            .extend(omap.into_iter().map(|(k, v)| (k, Some(v))));
        Ok(())
    }

    fn split(
        &mut self,
        ctx: &mut TxnCtx,
        c: CollectionId,
        to: CollectionId,
        mask: u32,
        value: u32,
    ) -> Result<(), StoreError> {
        self.require_collection(c)?;
        if !self.collection_exists(to)? {
            self.set_collection(ctx, to, true);
        }
        for object in self.objects_of(c)? {
            if object.hash & mask != value {
                continue;
            }
            let omap = self.omap_entries(c, &object)?;
            let state = self.object_mut(ctx, c, &object)?;
            let Some(rec) = state.record.take() else {
                continue;
            };
            state.omap_cleared = true;
            state.omap.clear();
            let target = self.object_mut(ctx, to, &object)?;
            target.record = Some(rec);
            target.omap_cleared = true;
            target.omap = omap.into_iter().map(|(k, v)| (k, Some(v))).collect();
        }
        Ok(())
    }

    fn remove_collection(&mut self, ctx: &mut TxnCtx, c: CollectionId) -> Result<(), StoreError> {
        self.require_collection(c)?;
        if !self.objects_of(c)?.is_empty() {
            return Err(StoreError::CollectionNotEmpty(c));
        }
        self.set_collection(ctx, c, false);
        if ctx.touched_meta_cleared.insert(c) {
            ctx.undo
                .push(Undo::MetaCleared(c, self.overlay.meta_cleared.contains(&c)));
        }
        self.overlay.meta_cleared.insert(c);
        let keys: Vec<_> = self
            .overlay
            .meta
            .keys()
            .filter(|(mc, _)| *mc == c)
            .cloned()
            .collect();
        for key in keys {
            self.set_meta(ctx, c, key.1, None);
        }
        Ok(())
    }

    // ---- overlay access with undo ----

    fn collection_exists(&self, c: CollectionId) -> Result<bool, StoreError> {
        if let Some(&exists) = self.overlay.collections.get(&c) {
            return Ok(exists);
        }
        Ok(self
            .shared
            .collections
            .get(record::collection_prefix(c))?
            .is_some())
    }

    fn require_collection(&self, c: CollectionId) -> Result<(), StoreError> {
        if self.collection_exists(c)? {
            Ok(())
        } else {
            Err(StoreError::NoCollection(c))
        }
    }

    fn set_collection(&mut self, ctx: &mut TxnCtx, c: CollectionId, exists: bool) {
        if ctx.touched_collections.insert(c) {
            ctx.undo.push(Undo::Collection(
                c,
                self.overlay.collections.get(&c).copied(),
            ));
        }
        self.overlay.collections.insert(c, exists);
    }

    fn set_meta(&mut self, ctx: &mut TxnCtx, c: CollectionId, key: Bytes, value: Option<Bytes>) {
        let id = (c, key);
        if ctx.touched_meta.insert(id.clone()) {
            ctx.undo
                .push(Undo::Meta(id.clone(), self.overlay.meta.get(&id).cloned()));
        }
        self.overlay.meta.insert(id, value);
    }

    /// The object's state for changing, loaded from disk on first use and
    /// saved for undo on first change by this transaction.
    fn object_mut(
        &mut self,
        ctx: &mut TxnCtx,
        c: CollectionId,
        o: &ObjectKey,
    ) -> Result<&mut ObjState, StoreError> {
        let id = (c, o.clone());
        if !self.overlay.objects.contains_key(&id) {
            let key = record::object_key(c, o);
            let record = match self.shared.objects.get(&key)? {
                Some(value) => Some(ObjectRecord::decode(&key, &value, &|| {
                    format!("object {o} in {c}")
                })?),
                None => None,
            };
            if ctx.touched_objects.insert(id.clone()) {
                ctx.undo.push(Undo::Object(id.clone(), None));
            }
            self.overlay.objects.insert(
                id.clone(),
                ObjState {
                    base: record.as_ref().map(ObjectRecord::usage).unwrap_or_default(),
                    record,
                    ..ObjState::default()
                },
            );
        } else if ctx.touched_objects.insert(id.clone()) {
            ctx.undo.push(Undo::Object(
                id.clone(),
                self.overlay.objects.get(&id).cloned(),
            ));
        }
        Ok(self.overlay.objects.get_mut(&id).expect("inserted above"))
    }

    fn object_mut_loaded(&mut self, c: CollectionId, o: &ObjectKey) -> &mut ObjState {
        self.overlay
            .objects
            .get_mut(&(c, o.clone()))
            .expect("object was loaded by object_mut")
    }

    /// The existing object's record, for changing; `NotFound` if missing.
    fn existing(
        &mut self,
        ctx: &mut TxnCtx,
        c: CollectionId,
        o: &ObjectKey,
    ) -> Result<&mut ObjectRecord, StoreError> {
        self.object_mut(ctx, c, o)?
            .record
            .as_mut()
            .ok_or_else(|| StoreError::NotFound {
                collection: c,
                object: o.clone(),
            })
    }

    /// The object's omap as it stands in this batch.
    fn omap_entries(
        &self,
        c: CollectionId,
        o: &ObjectKey,
    ) -> Result<BTreeMap<Bytes, Bytes>, StoreError> {
        let state = self.overlay.objects.get(&(c, o.clone()));
        let mut entries = BTreeMap::new();
        if !state.is_some_and(|s| s.omap_cleared) {
            let prefix = record::omap_prefix(c, o);
            for item in self.shared.omap.prefix(&prefix) {
                let (key, value) = item.into_inner()?;
                let body = record::open(&key, &value, &format!("omap of {o} in {c}"))?;
                entries.insert(
                    Bytes::copy_from_slice(&key[prefix.len()..]),
                    Bytes::copy_from_slice(body),
                );
            }
        }
        if let Some(state) = state {
            for (k, v) in &state.omap {
                match v {
                    Some(v) => entries.insert(k.clone(), v.clone()),
                    None => entries.remove(k),
                };
            }
        }
        Ok(entries)
    }

    /// Objects of a collection as they stand in this batch.
    fn objects_of(&self, c: CollectionId) -> Result<Vec<ObjectKey>, StoreError> {
        let mut found = BTreeSet::new();
        for item in self.shared.objects.prefix(record::collection_prefix(c)) {
            let key = item.key()?;
            if let Some((_, o)) = record::parse_object_key(&key) {
                found.insert(o);
            }
        }
        for ((oc, o), state) in &self.overlay.objects {
            if *oc == c {
                if state.record.is_some() {
                    found.insert(o.clone());
                } else {
                    found.remove(o);
                }
            }
        }
        Ok(found.into_iter().collect())
    }

    pub(crate) fn roll_back(&mut self, ctx: TxnCtx) {
        for undo in ctx.undo.into_iter().rev() {
            match undo {
                Undo::Collection(c, before) => restore(&mut self.overlay.collections, c, before),
                Undo::Object(id, before) => restore(&mut self.overlay.objects, id, before),
                Undo::Meta(id, before) => restore(&mut self.overlay.meta, id, before),
                Undo::MetaCleared(c, was) => {
                    if was {
                        self.overlay.meta_cleared.insert(c);
                    } else {
                        self.overlay.meta_cleared.remove(&c);
                    }
                }
            }
        }
        // Nothing committed refers to what this transaction wrote.
        self.shared.space.release(&ctx.allocated);
    }

    /// What the batch does to each collection's usage: the objects it
    /// touched as committed, and as they will be.
    pub(crate) fn usage_changes(
        &self,
    ) -> BTreeMap<CollectionId, (CollectionUsage, CollectionUsage)> {
        let mut out: BTreeMap<CollectionId, (CollectionUsage, CollectionUsage)> = BTreeMap::new();
        for ((c, _), state) in &self.overlay.objects {
            let (before, after) = out.entry(*c).or_default();
            before.add(&state.base);
            if let Some(record) = &state.record {
                after.add(&record.usage());
            }
        }
        out
    }

    /// Every metadata change of the batch, as whole key images.
    pub(crate) fn changes(&self) -> Result<Vec<Change>, StoreError> {
        let s = self.shared;
        let mut out = Vec::new();
        let mut put = |space, key: Vec<u8>, value: Option<Vec<u8>>| {
            out.push(Change {
                space,
                key,
                value: value.map(serde_bytes::ByteBuf::from),
            });
        };
        for (&c, &exists) in &self.overlay.collections {
            let key = record::collection_prefix(c);
            let value = exists.then(|| record::seal(&key, &[]));
            put(WalSpace::Collections, key.to_vec(), value);
        }
        // One batch must not both remove and insert a key (its items share a
        // sequence number), so cleared keys set again are left to the insert.
        for &c in &self.overlay.meta_cleared {
            for item in s.meta.prefix(record::collection_prefix(c)) {
                let key = item.key()?;
                let user = Bytes::copy_from_slice(&key[8..]);
                if !self.overlay.meta.contains_key(&(c, user)) {
                    put(WalSpace::Meta, key.to_vec(), None);
                }
            }
        }
        for ((c, key), value) in &self.overlay.meta {
            let full = record::meta_key(*c, key);
            let value = value.as_ref().map(|v| record::seal(&full, v));
            put(WalSpace::Meta, full, value);
        }
        for ((c, o), state) in &self.overlay.objects {
            let key = record::object_key(*c, o);
            let value = state.record.as_ref().map(|rec| rec.encode(&key));
            put(WalSpace::Objects, key, value);
            let prefix = record::omap_prefix(*c, o);
            if state.omap_cleared {
                for item in s.omap.prefix(&prefix) {
                    let key = item.key()?;
                    if !state.omap.contains_key(&key[prefix.len()..]) {
                        put(WalSpace::Omap, key.to_vec(), None);
                    }
                }
            }
            for (k, v) in &state.omap {
                let full = [prefix.as_slice(), k].concat();
                let value = v.as_ref().map(|v| record::seal(&full, v));
                put(WalSpace::Omap, full, value);
            }
        }
        Ok(out)
    }
}

fn restore<K: Ord, V>(map: &mut BTreeMap<K, V>, key: K, before: Option<V>) {
    match before {
        Some(v) => map.insert(key, v),
        None => map.remove(&key),
    };
}

/// The ranges of `source`'s bytes in `range` whose checksums fail, one
/// checksum block's span of object bytes at a time (a rotten block that
/// straddles two spans marks both).
fn failing_ranges(
    shared: &Shared,
    source: &ObjectRecord,
    range: std::ops::Range<u64>,
    what: &dyn Fn() -> String,
) -> Result<Vec<std::ops::Range<u64>>, StoreError> {
    let block = limits::CSUM_BLOCK_BYTES;
    let mut bad: Vec<std::ops::Range<u64>> = Vec::new();
    let mut at = range.start;
    while at < range.end {
        let end = ((at / block + 1) * block).min(range.end);
        match read_record(shared, source, at, end, true, what) {
            Ok(_) => {}
            Err(StoreError::Corrupt(_)) => match bad.last_mut() {
                Some(last) if last.end == at => last.end = end,
                _ => bad.push(at..end),
            },
            Err(error) => return Err(error),
        }
        at = end;
    }
    Ok(bad)
}

/// Makes every checksum block holding a byte of `range` of `rec` fail
/// (its recorded checksum inverted): bytes copied from rotten ones read
/// as `Corrupt`, as their source did.
fn fail_checksums(rec: &mut ObjectRecord, range: std::ops::Range<u64>) {
    let Data::Extents { extents, pieces } = &mut rec.data else {
        return;
    };
    let block = limits::CSUM_BLOCK_BYTES;
    for piece in pieces.iter() {
        let start = range.start.max(piece.logical);
        let end = range.end.min(piece.end());
        if start >= end {
            continue;
        }
        let Some(extent) = extents.get_mut(piece.extent as usize) else {
            continue;
        };
        let first = (piece.offset + (start - piece.logical)) / block;
        let last = (piece.offset + (end - piece.logical) - 1) / block;
        for index in first..=last {
            if let Some(csum) = extent.csums.get_mut(to_index(index)) {
                *csum = !*csum;
            }
        }
    }
}

fn extents_of(rec: ObjectRecord) -> Vec<Extent> {
    match rec.data {
        Data::Inline(_) => Vec::new(),
        Data::Extents { extents, .. } => extents,
    }
}

/// Changes one record's data, writing small payloads and inline
/// conversions itself.
struct DataWriter<'a> {
    shared: &'a Shared,
    ctx: &'a mut TxnCtx,
    wrote_data: bool,
}

impl DataWriter<'_> {
    fn write(
        &mut self,
        rec: &mut ObjectRecord,
        offset: u64,
        data: &[u8],
        payload: Payload,
    ) -> Result<(), StoreError> {
        let end = offset + data.len() as u64;
        if let (Data::Inline(bytes), Payload::None) = (&mut rec.data, &payload)
            && end.max(rec.size) <= limits::INLINE_SIZE_BYTES_MAX
        {
            let (start, stop) = (to_index(offset), to_index(end));
            if bytes.len() < stop {
                bytes.resize(stop, 0);
            }
            bytes[start..stop].copy_from_slice(data);
            rec.size = bytes.len() as u64;
            return Ok(());
        }
        self.move_inline_to_extent(rec)?;
        let new = match payload {
            Payload::Written { extents, .. } => extents,
            Payload::None if data.is_empty() => Vec::new(),
            Payload::None => self.write_new(data)?,
        };
        self.place(rec, offset, new);
        rec.size = rec.size.max(end);
        Ok(())
    }

    fn write_full(
        &mut self,
        rec: &mut ObjectRecord,
        data: &[u8],
        payload: Payload,
    ) -> Result<(), StoreError> {
        let old = std::mem::replace(&mut rec.data, Data::Inline(Vec::new()));
        self.ctx.freed.extend(extents_of(ObjectRecord {
            data: old,
            ..ObjectRecord::empty()
        }));
        rec.size = 0;
        match payload {
            Payload::None if data.len() as u64 <= limits::INLINE_SIZE_BYTES_MAX => {
                rec.data = Data::Inline(data.to_vec());
                rec.size = data.len() as u64;
                Ok(())
            }
            payload => self.write(rec, 0, data, payload),
        }
    }

    fn truncate(&mut self, rec: &mut ObjectRecord, size: u64) -> Result<(), StoreError> {
        if let Data::Inline(bytes) = &mut rec.data
            && size <= limits::INLINE_SIZE_BYTES_MAX
        {
            bytes.resize(to_index(size), 0);
            rec.size = size;
            return Ok(());
        }
        self.move_inline_to_extent(rec)?;
        if let Data::Extents { pieces, .. } = &mut rec.data {
            punch_pieces(pieces, size, u64::MAX);
        }
        self.collect_garbage(rec);
        rec.size = size;
        Ok(())
    }

    fn zero(&mut self, rec: &mut ObjectRecord, offset: u64, length: u64) -> Result<(), StoreError> {
        let start = offset.min(rec.size);
        let end = offset.saturating_add(length).min(rec.size);
        match &mut rec.data {
            Data::Inline(bytes) => bytes[to_index(start)..to_index(end)].fill(0),
            Data::Extents { pieces, .. } => {
                punch_pieces(pieces, start, end);
                self.collect_garbage(rec);
            }
        }
        Ok(())
    }

    /// Moves inline data to an extent, so extents can be placed around it.
    fn move_inline_to_extent(&mut self, rec: &mut ObjectRecord) -> Result<(), StoreError> {
        let Data::Inline(bytes) = &rec.data else {
            return Ok(());
        };
        let bytes = bytes.clone();
        rec.data = Data::Extents {
            extents: Vec::new(),
            pieces: Vec::new(),
        };
        if !bytes.is_empty() {
            let new = self.write_new(&bytes)?;
            self.place(rec, 0, new);
        }
        Ok(())
    }

    fn write_new(&mut self, data: &[u8]) -> Result<Vec<Extent>, StoreError> {
        let extents = write_extents(self.shared, data, None, false)?;
        self.ctx.unsynced |= any_large(&extents);
        if let [extent] = extents.as_slice()
            && extent.length < limits::DIRECT_WRITE_BYTES_MIN
        {
            self.ctx
                .small_bytes
                .push((extent.offset, Bytes::copy_from_slice(data)));
        }
        self.ctx.allocated.extend(extents.iter().cloned());
        self.wrote_data = true;
        Ok(extents)
    }

    /// Makes `new` (consecutive extents) the object's bytes from `offset`.
    fn place(&mut self, rec: &mut ObjectRecord, offset: u64, new: Vec<Extent>) {
        let Data::Extents { extents, pieces } = &mut rec.data else {
            unreachable!("move_inline_to_extent ran first");
        };
        let total: u64 = new.iter().map(|e| e.length).sum();
        punch_pieces(pieces, offset, offset + total);
        let mut logical = offset;
        for extent in new {
            let index = u32::try_from(extents.len()).expect("extent count fits u32");
            pieces.push(Piece {
                logical,
                length: extent.length,
                extent: index,
                offset: 0,
            });
            logical += extent.length;
            extents.push(extent);
        }
        pieces.sort_by_key(|p| p.logical);
        self.collect_garbage(rec);
    }

    /// Drops extents no piece refers to any more.
    fn collect_garbage(&mut self, rec: &mut ObjectRecord) {
        let Data::Extents { extents, pieces } = &mut rec.data else {
            return;
        };
        let used: BTreeSet<u32> = pieces.iter().map(|p| p.extent).collect();
        let mut renumber = BTreeMap::new();
        let mut kept = Vec::with_capacity(used.len());
        for (i, extent) in std::mem::take(extents).into_iter().enumerate() {
            let i = u32::try_from(i).expect("extent count fits u32");
            if used.contains(&i) {
                renumber.insert(i, u32::try_from(kept.len()).expect("extent count fits u32"));
                kept.push(extent);
            } else {
                self.ctx.freed.push(extent);
            }
        }
        for p in pieces.iter_mut() {
            p.extent = renumber[&p.extent];
        }
        *extents = kept;
    }
}

/// Removes `[start, end)` from the pieces, splitting those that straddle it.
fn punch_pieces(pieces: &mut Vec<Piece>, start: u64, end: u64) {
    if start >= end {
        return;
    }
    let mut out = Vec::with_capacity(pieces.len() + 1);
    for p in pieces.drain(..) {
        if p.end() <= start || p.logical >= end {
            out.push(p);
            continue;
        }
        if p.logical < start {
            out.push(Piece {
                length: start - p.logical,
                ..p
            });
        }
        if p.end() > end {
            out.push(Piece {
                logical: end,
                length: p.end() - end,
                extent: p.extent,
                offset: p.offset + (end - p.logical),
            });
        }
    }
    *pieces = out;
}

fn to_index(n: u64) -> usize {
    usize::try_from(n).expect("inline sizes are small")
}

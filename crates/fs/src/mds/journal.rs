//! The journal in the object store: group commit, write-back of the
//! namespace objects, trimming, and replay at takeover.
//!
//! Entries are appended in batches to segment objects (`mds.journal.N`).
//! One append is in flight at a time; whatever arrives meanwhile goes in
//! the next batch (group commit). Each append is guarded by the segment's
//! `gen` xattr: a new active MDS sets it to its own generation first, so
//! an old active that lives on can append nothing more (fencing).
//!
//! Durable entries are written back to the directory and inode objects,
//! coalesced per object, one round at a time; once a round covers a whole
//! segment, the head moves past it and the segment is removed. Replay
//! applies every entry from the head's first segment again: each delta
//! holds whole values, so applying one twice changes nothing.

use crate::format::{
    self, Delta, Dentry, Entry, Frag, GEN_XATTR, HEAD_OBJECT, HEAD_XATTR, Head, dir_object,
    inode_key, inode_object, segment_object,
};
use crate::layout;
use crate::mds::limits::{
    JOURNAL_BATCH_BYTES_MAX, JOURNAL_FLUSH_DELAY_MS, PURGE_OPS_IN_FLIGHT, PURGE_PAGE_FILES,
    SEGMENT_BYTES_MAX, WRITEBACK_DELAY_MS, WRITEBACK_OP_BYTES_MAX, WRITEBACK_OPS_IN_FLIGHT,
};
use bytes::Bytes;
use cairn_client::{Client, ClientError, Guard, WriteOp};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, mpsc, watch};

/// Why the journal stopped.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JournalError {
    /// Another MDS took over: this one must stop.
    #[error("fenced: a newer MDS (generation above {0}) owns the journal")]
    Fenced(u64),
    #[error("metadata pool: {0}")]
    Client(#[from] ClientError),
    #[error("damaged journal: {0}")]
    Damaged(String),
}

impl JournalError {
    /// Whether the write may pass if tried again later: the cluster is
    /// slow, peering or full (its OSDs gave up within the client's
    /// deadline, or refused for space). The MDS then waits rather than
    /// stops, as Ceph's does on slow OSDs; its requests meanwhile show as
    /// slow in `cairn status`. Journal appends and write-backs may be
    /// repeated: a batch appended twice in a row, or written back twice,
    /// replays and applies to the same state.
    fn transient(&self) -> bool {
        matches!(
            self,
            JournalError::Client(ClientError::GaveUp { .. } | ClientError::Full(_))
        )
    }
}

/// Runs `attempt` until it succeeds or fails for good, pausing between
/// transient failures (half a second, doubling to 5 s).
async fn until_done<F, Fut>(what: &str, mut attempt: F) -> Result<(), JournalError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), JournalError>>,
{
    let mut pause = Duration::from_millis(500);
    loop {
        match attempt().await {
            Err(e) if e.transient() => {
                tracing::warn!(error = %e, ?pause, "{what} failed; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

fn gen_bytes(generation: u64) -> Bytes {
    Bytes::copy_from_slice(&generation.to_le_bytes())
}

/// Where the pools are and who writes.
#[derive(Clone, Debug)]
pub struct Pools {
    pub client: Client,
    pub meta_pool: String,
    pub data_pool: String,
    pub generation: u64,
}

/// What replay found.
#[derive(Debug)]
pub struct Replayed {
    pub head: Head,
    /// The first segment the new MDS appends to.
    pub segment: u64,
    /// The last sequence in the journal.
    pub seq: u64,
    /// `(session, tid)` of every replayed entry, so replays of them from
    /// clients are recognised.
    pub completed: BTreeSet<(u64, u64)>,
    /// Entries written back at takeover (the old active had not).
    pub entries: usize,
    /// Entries in the journal's live segments (a takeover without a
    /// follower would have read and written back all of them).
    pub live_entries: usize,
}

async fn read_head(pools: &Pools) -> Result<Head, JournalError> {
    match pools
        .client
        .get_xattrs(&pools.meta_pool, HEAD_OBJECT.as_bytes())
        .await
    {
        Ok(xattrs) => match xattrs.get(HEAD_XATTR) {
            Some(bytes) => format::decode(bytes).map_err(|e| JournalError::Damaged(e.to_string())),
            None => Ok(Head::default()),
        },
        Err(ClientError::NotFound) => Ok(Head::default()),
        Err(e) => Err(e.into()),
    }
}

async fn write_head(pools: &Pools, head: &Head) -> Result<(), JournalError> {
    pools
        .client
        .set_xattr(
            &pools.meta_pool,
            HEAD_OBJECT.as_bytes(),
            HEAD_XATTR,
            Bytes::from(format::encode(head)),
        )
        .await?;
    Ok(())
}

/// Sets segment `seq`'s generation to ours if it exists; `false` if it
/// does not exist.
async fn seal(pools: &Pools, seq: u64) -> Result<bool, JournalError> {
    let name = segment_object(seq);
    loop {
        let xattrs = match pools
            .client
            .get_xattrs(&pools.meta_pool, name.as_bytes())
            .await
        {
            Ok(x) => x,
            Err(ClientError::NotFound) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let current = xattrs.get(GEN_XATTR).cloned();
        let current_gen = current
            .as_deref()
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes);
        if current_gen > pools.generation {
            return Err(JournalError::Fenced(pools.generation));
        }
        if current_gen == pools.generation {
            return Ok(true);
        }
        let op = WriteOp::new()
            .guard(Guard::Xattr {
                name: Bytes::from_static(GEN_XATTR),
                value: current,
            })
            .set_xattr(GEN_XATTR, &gen_bytes(pools.generation));
        match pools
            .client
            .operate(&pools.meta_pool, name.as_bytes(), op)
            .await
        {
            Ok(_) => return Ok(true),
            // Its old owner appended or someone sealed it meanwhile: look
            // again.
            Err(ClientError::CompareFailed { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// A standby's copy of the journal, kept by reading what the active
/// appends (each segment from where the last read ended): the entries
/// not yet written back, and who made every entry of the live segments
/// (for recognising client replays). At takeover only the tail appended
/// since the last read is read, and only entries past the head's
/// written-back sequence are written back again.
#[derive(Debug, Default)]
pub struct Follower {
    head: Head,
    /// Live segment → `(session, tid)` of its entries.
    made: BTreeMap<u64, Vec<(u64, u64)>>,
    /// Entries past `head.seq`, in order.
    unwritten: Vec<Entry>,
    /// The segment being read and the bytes of it read so far.
    segment: u64,
    offset: u64,
    /// The newest segment found to exist.
    newest: Option<u64>,
}

impl Follower {
    /// The newest journal sequence read.
    #[must_use]
    pub fn seq(&self) -> u64 {
        self.unwritten.last().map_or(self.head.seq, |e| e.seq)
    }

    /// Entries read that the active had not written back.
    #[must_use]
    pub fn unwritten(&self) -> usize {
        self.unwritten.len()
    }

    /// Reads the head and whatever was appended since the last call.
    ///
    /// # Errors
    /// A pool error, or a damaged segment.
    pub async fn follow(&mut self, pools: &Pools) -> Result<(), JournalError> {
        let head = read_head(pools).await?;
        if head.first_segment > self.segment {
            // The segments being read were written back and removed.
            self.segment = head.first_segment;
            self.offset = 0;
        }
        self.made.retain(|s, _| *s >= head.first_segment);
        self.head = head;
        self.unwritten.retain(|e| e.seq > head.seq);
        loop {
            let name = segment_object(self.segment);
            let range = cairn_client::ReadRange {
                offset_bytes: self.offset,
                length_bytes: None,
            };
            let bytes = match pools
                .client
                .read(&pools.meta_pool, name.as_bytes(), range)
                .await
            {
                Ok(b) => Some(b),
                Err(ClientError::NotFound) => None,
                Err(e) => return Err(e.into()),
            };
            if let Some(bytes) = &bytes {
                self.newest = Some(self.segment);
                let entries = format::decode_segment(bytes)
                    .map_err(|e| JournalError::Damaged(format!("{name}: {e}")))?;
                self.offset += bytes.len() as u64;
                let made = self.made.entry(self.segment).or_default();
                for e in entries {
                    made.push((e.session, e.tid));
                    if e.seq > self.head.seq {
                        self.unwritten.push(e);
                    }
                }
            }
            // A later segment means this one is closed: go on to it.
            let next = segment_object(self.segment + 1);
            match pools.client.stat(&pools.meta_pool, next.as_bytes()).await {
                Ok(_) => {
                    self.segment += 1;
                    self.offset = 0;
                }
                Err(ClientError::NotFound) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Takes the journal over: fences every segment from the head on, reads
/// what `follower` has not read yet, writes back what the old active had
/// not, and opens a new segment under our generation.
///
/// # Errors
/// [`JournalError::Fenced`] if a newer MDS owns it, or the pool's error.
pub async fn take_over(pools: &Pools, follower: &mut Follower) -> Result<Replayed, JournalError> {
    let head = read_head(pools).await?;
    let mut seq_in = head.first_segment;
    while seal(pools, seq_in).await? {
        seq_in += 1;
    }
    // Sealed: nothing more is appended, so this reads the journal's end.
    follower.follow(pools).await?;
    let head = follower.head;
    let completed: BTreeSet<(u64, u64)> = follower.made.values().flatten().copied().collect();
    let live_entries = follower.made.values().map(Vec::len).sum();
    let all = std::mem::take(&mut follower.unwritten);
    let last_seq = all.last().map_or(head.seq, |e| e.seq).max(head.seq);
    let ino_reserved = all
        .iter()
        .flat_map(|e| &e.deltas)
        .filter_map(|d| match d {
            Delta::InoReserved(n) => Some(*n),
            _ => None,
        })
        .fold(head.ino_reserved, u64::max);
    let count = all.len();
    write_back(pools, &all).await?;
    // A new segment under our generation; creating it exclusively fails if
    // an old active raced one in after we looked, and then we go round.
    if follower.newest.is_some_and(|s| s >= seq_in) {
        // A segment made after the sealing: its maker (an old active)
        // may append to it still. Start over.
        return Err(JournalError::Fenced(pools.generation));
    }
    let segment = seq_in;
    create_segment(pools, segment).await?;
    let old_first = head.first_segment;
    let head = Head {
        first_segment: segment,
        ino_reserved,
        seq: last_seq,
    };
    write_head(pools, &head).await?;
    for s in old_first..segment {
        remove_ignoring_missing(pools, &pools.meta_pool, &segment_object(s)).await?;
    }
    Ok(Replayed {
        head,
        segment,
        seq: last_seq,
        completed,
        entries: count,
        live_entries,
    })
}

/// Creates segment `seq` under our generation. Exclusively: if it exists,
/// another MDS made it after us, so ours is fenced.
async fn create_segment(pools: &Pools, seq: u64) -> Result<(), JournalError> {
    let op = WriteOp::new()
        .create(true)
        .set_xattr(GEN_XATTR, &gen_bytes(pools.generation));
    match pools
        .client
        .operate(&pools.meta_pool, segment_object(seq).as_bytes(), op)
        .await
    {
        Ok(_) => Ok(()),
        Err(ClientError::Exists) => Err(JournalError::Fenced(pools.generation)),
        Err(e) => Err(e.into()),
    }
}

async fn remove_ignoring_missing(
    pools: &Pools,
    pool: &str,
    name: &str,
) -> Result<(), JournalError> {
    match pools.client.remove(pool, name.as_bytes()).await {
        Ok(()) | Err(ClientError::NotFound) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A name's last change: the fragment it was made in, and the entry
/// (`None`: removed).
type NameChange = (Frag, Option<Dentry>);

/// The keys to set and the keys to remove in one omap object.
type OmapChange = (Vec<(Vec<u8>, Vec<u8>)>, Vec<Vec<u8>>);

/// The coalesced effect of many deltas on the namespace objects. Each
/// name keeps its last change and the fragment it was made in (a later
/// split or merge re-puts every entry it moves, so the last change of a
/// name is in a fragment that is live at the end, or in one removed).
#[derive(Debug, Default)]
struct Pending {
    /// dir → name → (fragment, entry; `None`: removed).
    dentries: BTreeMap<u64, BTreeMap<Vec<u8>, NameChange>>,
    /// Fragment objects to remove: of removed directories, and of
    /// fragments split or merged away (unless made again later).
    dropped_frags: BTreeSet<(u64, Frag)>,
    /// inode → record bytes (`None`: removed).
    inodes: BTreeMap<u64, Option<Vec<u8>>>,
    purges: Vec<(u64, u64, cairn_proto::mds::Layout)>,
}

impl Pending {
    fn add(&mut self, delta: &Delta) {
        match delta {
            Delta::PutInode(rec) | Delta::PutUsage(rec) => {
                self.inodes.insert(rec.attr.ino, Some(format::encode(rec)));
            }
            Delta::DropInode(ino) => {
                self.inodes.insert(*ino, None);
            }
            Delta::PutDentry {
                dir,
                frag,
                name,
                dentry,
            } => {
                self.dentries
                    .entry(*dir)
                    .or_default()
                    .insert(name.to_vec(), (*frag, Some(*dentry)));
            }
            Delta::DropDentry { dir, frag, name } => {
                self.dentries
                    .entry(*dir)
                    .or_default()
                    .insert(name.to_vec(), (*frag, None));
            }
            Delta::DropDir { ino, frags } => {
                self.dentries.remove(ino);
                for f in frags {
                    self.dropped_frags.insert((*ino, *f));
                }
            }
            Delta::Refrag {
                dir,
                from,
                to,
                entries,
            } => {
                for f in from {
                    self.dropped_frags.insert((*dir, *f));
                }
                for f in to {
                    self.dropped_frags.remove(&(*dir, *f));
                }
                let names = self.dentries.entry(*dir).or_default();
                // A name removed from a fragment that goes is removed from
                // the one that takes its hashes (an object made again, by
                // a merge after a split, may still hold it).
                for (name, (frag, _)) in names.iter_mut() {
                    if from.contains(frag) {
                        *frag = format::frag_of(to, format::name_hash(name));
                    }
                }
                for (name, dentry) in entries {
                    let frag = format::frag_of(to, format::name_hash(name));
                    names.insert(name.to_vec(), (frag, Some(*dentry)));
                }
            }
            Delta::Purge { ino, size, layout } => self.purges.push((*ino, *size, *layout)),
            Delta::InoReserved(_) => {}
        }
    }
}

/// What write-back does to the metadata pool for some entries: omap
/// changes (object, keys to set, keys to remove), made first and in any
/// order, then objects to remove; and data to purge.
#[derive(Debug, Default)]
struct Plan {
    changes: Vec<(String, OmapChange)>,
    removals: Vec<String>,
    purges: Vec<(u64, u64, cairn_proto::mds::Layout)>,
}

/// The coalesced changes of `entries`. Applied over the stored namespace
/// as it was before them, or over any state a partly applied plan of these
/// or later entries left, it stores the namespace as it is after them.
fn plan(entries: &[Entry]) -> Plan {
    let mut pending = Pending::default();
    for e in entries {
        for d in &e.deltas {
            pending.add(d);
        }
    }
    let mut plan = Plan::default();
    for (dir, names) in &pending.dentries {
        let mut by_frag: BTreeMap<Frag, OmapChange> = BTreeMap::new();
        for (name, (frag, dentry)) in names {
            if pending.dropped_frags.contains(&(*dir, *frag)) {
                // Its object is removed below.
                continue;
            }
            let slot = by_frag.entry(*frag).or_default();
            match dentry {
                Some(d) => slot.0.push((name.clone(), format::encode(d))),
                None => slot.1.push(name.clone()),
            }
        }
        for (frag, change) in by_frag {
            plan.changes.push((dir_object(*dir, frag), change));
        }
    }
    let mut by_object: BTreeMap<String, OmapChange> = BTreeMap::new();
    for (ino, rec) in &pending.inodes {
        let slot = by_object.entry(inode_object(*ino)).or_default();
        match rec {
            Some(bytes) => slot.0.push((inode_key(*ino).to_vec(), bytes.clone())),
            None => slot.1.push(inode_key(*ino).to_vec()),
        }
    }
    plan.changes.extend(by_object);
    plan.removals = pending
        .dropped_frags
        .iter()
        .map(|(dir, frag)| dir_object(*dir, *frag))
        .collect();
    plan.purges = pending.purges;
    plan
}

/// One object's omap change as writes of at most
/// [`WRITEBACK_OP_BYTES_MAX`] of keys and values each (a request's body
/// is bounded; inode records with inline data are kilobytes). Each key
/// appears once in a change, so the writes may land in any order.
fn omap_ops(set: &[(Vec<u8>, Vec<u8>)], remove: &[Vec<u8>]) -> Vec<WriteOp> {
    /// Splits `items` into runs of at most the bound in bytes (one item
    /// past it alone).
    fn runs<T>(items: &[T], size: impl Fn(&T) -> usize) -> Vec<&[T]> {
        let mut out = Vec::new();
        let (mut start, mut bytes) = (0, 0);
        for (i, item) in items.iter().enumerate() {
            let n = size(item) + 16;
            if i > start && bytes + n > WRITEBACK_OP_BYTES_MAX {
                out.push(&items[start..i]);
                (start, bytes) = (i, 0);
            }
            bytes += n;
        }
        if start < items.len() {
            out.push(&items[start..]);
        }
        out
    }
    let sets = runs(set, |(k, v)| k.len() + v.len());
    let removes = runs(remove, Vec::len);
    if sets.len() + removes.len() <= 1 {
        // One write, sets first (they create the object the removes need).
        return vec![
            WriteOp::new()
                .omap_set(set.iter().map(|(k, v)| (&k[..], &v[..])))
                .omap_remove(remove.iter().map(|k| &k[..])),
        ];
    }
    let mut ops: Vec<WriteOp> = sets
        .into_iter()
        .map(|run| WriteOp::new().omap_set(run.iter().map(|(k, v)| (&k[..], &v[..]))))
        .collect();
    // These may land before the sets: each makes sure the object is there.
    ops.extend(removes.into_iter().map(|run| {
        WriteOp::new()
            .create(false)
            .omap_remove(run.iter().map(|k| &k[..]))
    }));
    ops
}

/// Applies `entries` to the namespace objects, with bounded concurrency.
/// Removed files' data objects go to the purge queue (`mds.purge`, in
/// the same writes), which [`run_purger`] empties in the background: an
/// unlink storm waits for no OSD delete.
///
/// # Errors
/// The first pool error.
pub async fn write_back(pools: &Pools, entries: &[Entry]) -> Result<(), JournalError> {
    let mut plan = plan(entries);
    if !plan.purges.is_empty() {
        let queued = plan
            .purges
            .iter()
            .map(|(ino, size, layout)| {
                let rec = format::PurgeRec {
                    size: *size,
                    layout: *layout,
                };
                (inode_key(*ino).to_vec(), format::encode(&rec))
            })
            .collect();
        plan.changes
            .push((format::PURGE_OBJECT.to_owned(), (queued, Vec::new())));
    }
    let ops: Vec<(String, String, WriteOp)> = plan
        .changes
        .iter()
        .flat_map(|(object, (set, remove))| {
            omap_ops(set, remove)
                .into_iter()
                .map(|op| (pools.meta_pool.clone(), object.clone(), op))
        })
        .collect();
    run_ops(pools, ops).await?;
    let mut removals = Vec::new();
    for object in plan.removals {
        removals.push((pools.meta_pool.clone(), object));
    }
    let pools_arc = Arc::new(pools.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for (pool, name) in removals {
        while tasks.len() >= WRITEBACK_OPS_IN_FLIGHT {
            if let Some(r) = tasks.join_next().await {
                r.map_err(|e| JournalError::Damaged(e.to_string()))??;
            }
        }
        let pools = Arc::clone(&pools_arc);
        tasks.spawn(async move { remove_ignoring_missing(&pools, &pool, &name).await });
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(|e| JournalError::Damaged(e.to_string()))??;
    }
    Ok(())
}

async fn run_ops(pools: &Pools, ops: Vec<(String, String, WriteOp)>) -> Result<(), JournalError> {
    let mut tasks = tokio::task::JoinSet::new();
    for (pool, object, op) in ops {
        while tasks.len() >= WRITEBACK_OPS_IN_FLIGHT {
            if let Some(r) = tasks.join_next().await {
                r.map_err(|e| JournalError::Damaged(e.to_string()))??;
            }
        }
        let client = pools.client.clone();
        tasks.spawn(async move {
            client
                .operate(&pool, object.as_bytes(), op)
                .await
                .map(drop)
                .map_err(JournalError::from)
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(|e| JournalError::Damaged(e.to_string()))??;
    }
    Ok(())
}

/// The journal writer: appends entries in batches, publishes the durable
/// sequence, and hands durable entries to write-back. Ends with the error
/// that stopped it (the MDS must then stop: its cache is ahead of the
/// journal).
pub async fn run_writer(
    pools: Pools,
    mut segment: u64,
    mut queue: mpsc::Receiver<Entry>,
    flush_now: Arc<Notify>,
    durable: watch::Sender<u64>,
    writeback: mpsc::UnboundedSender<(u64, Vec<Entry>)>,
) -> JournalError {
    let mut segment_bytes = 0usize;
    while let Some(first) = queue.recv().await {
        let batch = gather(first, &mut queue, &flush_now).await;
        let encoded = Bytes::from(format::encode_batch(&batch));
        if segment_bytes + encoded.len() > SEGMENT_BYTES_MAX && segment_bytes > 0 {
            segment += 1;
            segment_bytes = 0;
            if let Err(e) = create_segment(&pools, segment).await {
                return e;
            }
        }
        let append = || async {
            let op = WriteOp::new()
                .guard(Guard::Xattr {
                    name: Bytes::from_static(GEN_XATTR),
                    value: Some(gen_bytes(pools.generation)),
                })
                .append(encoded.clone());
            match pools
                .client
                .operate(&pools.meta_pool, segment_object(segment).as_bytes(), op)
                .await
            {
                Ok(_) => Ok(()),
                Err(ClientError::CompareFailed { .. }) => {
                    Err(JournalError::Fenced(pools.generation))
                }
                Err(e) => Err(e.into()),
            }
        };
        if let Err(e) = until_done("a journal append", append).await {
            return e;
        }
        segment_bytes += encoded.len();
        let last = batch.last().map_or(0, |e| e.seq);
        durable.send_replace(last);
        if writeback.send((segment, batch)).is_err() {
            return JournalError::Damaged("write-back stopped".into());
        }
    }
    JournalError::Damaged("journal queue closed".into())
}

/// One batch: `first` and whatever arrives within
/// [`JOURNAL_FLUSH_DELAY_MS`] (clients do not wait for the journal, so a
/// short wait buys fewer, larger appends), unless someone waits for
/// durability (`flush_now`) or the batch is full.
async fn gather(first: Entry, queue: &mut mpsc::Receiver<Entry>, flush_now: &Notify) -> Vec<Entry> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(JOURNAL_FLUSH_DELAY_MS);
    let weight = |e: &Entry| 64 + e.deltas.iter().map(Delta::approx_bytes).sum::<usize>();
    let mut bytes = weight(&first);
    let mut batch = vec![first];
    while bytes < JOURNAL_BATCH_BYTES_MAX {
        tokio::select! {
            biased;
            () = flush_now.notified() => break,
            () = tokio::time::sleep_until(deadline) => break,
            next = queue.recv() => match next {
                Some(e) => {
                    bytes += weight(&e);
                    batch.push(e);
                }
                None => break,
            },
        }
    }
    // Whatever is already queued goes too.
    while bytes < JOURNAL_BATCH_BYTES_MAX {
        let Ok(e) = queue.try_recv() else { break };
        bytes += weight(&e);
        batch.push(e);
    }
    batch
}

/// The write-back worker: writes durable entries to the namespace objects
/// a round at a time, then moves the head past every segment older than
/// the newest one written back, and removes them.
pub async fn run_writeback(
    pools: Pools,
    mut head: Head,
    mut queue: mpsc::UnboundedReceiver<(u64, Vec<Entry>)>,
    written: tokio::sync::watch::Sender<u64>,
    purge_wake: Arc<tokio::sync::Notify>,
) -> JournalError {
    while let Some(first) = queue.recv().await {
        // A moment's wait lets many batches coalesce into one write per
        // object (a directory's creates become one omap update).
        tokio::time::sleep(Duration::from_millis(WRITEBACK_DELAY_MS)).await;
        let mut rounds = vec![first];
        while let Ok(more) = queue.try_recv() {
            rounds.push(more);
        }
        let newest_segment = rounds
            .iter()
            .map(|(s, _)| *s)
            .max()
            .unwrap_or(head.first_segment);
        let entries: Vec<Entry> = rounds.into_iter().flat_map(|(_, e)| e).collect();
        if let Err(e) = until_done("a write-back", || write_back(&pools, &entries)).await {
            return e;
        }
        let last_seq = entries.last().map_or(head.seq, |e| e.seq);
        // The namespace cache may now drop what these entries changed.
        written.send_replace(last_seq);
        if entries
            .iter()
            .flat_map(|e| &e.deltas)
            .any(|d| matches!(d, Delta::Purge { .. }))
        {
            purge_wake.notify_one();
        }
        let reserved = entries
            .iter()
            .flat_map(|e| &e.deltas)
            .filter_map(|d| match d {
                Delta::InoReserved(n) => Some(*n),
                _ => None,
            })
            .fold(head.ino_reserved, u64::max);
        head.ino_reserved = reserved;
        head.seq = last_seq;
        if newest_segment > head.first_segment {
            // Everything in the older segments was written back (rounds
            // go in order).
            let old = head.first_segment;
            head.first_segment = newest_segment;
            if let Err(e) = write_head(&pools, &head).await {
                return e;
            }
            for s in old..newest_segment {
                if let Err(e) =
                    remove_ignoring_missing(&pools, &pools.meta_pool, &segment_object(s)).await
                {
                    return e;
                }
            }
        } else if let Err(e) = write_head(&pools, &head).await {
            return e;
        }
    }
    JournalError::Damaged("write-back queue closed".into())
}

/// Purges removed files' data objects from the purge queue, oldest
/// inode numbers first, and takes them off it; wakes on `wake` (a
/// write-back that queued some) or every second. Never stops the MDS: a
/// failed delete is tried again later.
pub async fn run_purger(pools: Pools, wake: Arc<tokio::sync::Notify>, stats: Arc<PurgeStats>) {
    let mut purged = 0u64;
    loop {
        match purge_some(&pools, &stats).await {
            Ok(0) => {
                if purged > 0 {
                    tracing::debug!(files = purged, "purge queue empty");
                    purged = 0;
                }
                drop(tokio::time::timeout(Duration::from_secs(1), wake.notified()).await);
            }
            Ok(n) => {
                purged += n;
                stats
                    .purged
                    .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
            Err(error) => {
                tracing::warn!(%error, "purging removed files' data failed; trying again");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }
}

/// The purge queue as the purger last saw it, for `cairn status`.
#[derive(Debug, Default)]
pub struct PurgeStats {
    /// Files in the page the purger read last (its page holds at most
    /// [`PURGE_PAGE_FILES`]; a full page means there may be more).
    pub waiting: std::sync::atomic::AtomicU64,
    /// Files purged since this MDS started.
    pub purged: std::sync::atomic::AtomicU64,
}

/// Purges one page of the queue; how many files it purged.
async fn purge_some(pools: &Pools, stats: &PurgeStats) -> Result<u64, JournalError> {
    let queue = format::PURGE_OBJECT.as_bytes();
    let page = match pools
        .client
        .omap_range(&pools.meta_pool, queue, None, PURGE_PAGE_FILES)
        .await
    {
        Ok(page) => page,
        Err(ClientError::NotFound) => {
            stats.waiting.store(0, std::sync::atomic::Ordering::Relaxed);
            return Ok(0);
        }
        Err(e) => return Err(e.into()),
    };
    stats
        .waiting
        .store(page.len() as u64, std::sync::atomic::Ordering::Relaxed);
    if page.is_empty() {
        return Ok(0);
    }
    let mut objects = Vec::new();
    for (key, value) in &page {
        match (
            format::ino_of_key(key),
            format::decode::<format::PurgeRec>(value),
        ) {
            (Some(ino), Ok(rec)) => {
                for index in 0..layout::object_count(&rec.layout, rec.size).max(1) {
                    objects.push(layout::object_name(ino, index));
                }
            }
            // Damaged: dropped from the queue (its objects, if any, are
            // left to `cairn fs check`'s successors), never retried for ever.
            _ => tracing::warn!(key = ?key, "a damaged purge queue entry is dropped"),
        }
    }
    let mut tasks = tokio::task::JoinSet::new();
    for name in objects {
        while tasks.len() >= PURGE_OPS_IN_FLIGHT {
            if let Some(r) = tasks.join_next().await {
                r.map_err(|e| JournalError::Damaged(e.to_string()))??;
            }
        }
        let pools = pools.clone();
        tasks.spawn(async move { remove_ignoring_missing(&pools, &pools.data_pool, &name).await });
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(|e| JournalError::Damaged(e.to_string()))??;
    }
    let keys: Vec<Vec<u8>> = page.iter().map(|(k, _)| k.to_vec()).collect();
    let ops = omap_ops(&[], &keys)
        .into_iter()
        .map(|op| (pools.meta_pool.clone(), format::PURGE_OBJECT.to_owned(), op))
        .collect();
    run_ops(pools, ops).await?;
    Ok(page.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn gave_up() -> JournalError {
        JournalError::Client(ClientError::GaveUp {
            attempts: 1,
            elapsed_ms: 1,
            last: "slow".into(),
        })
    }

    #[tokio::test]
    async fn a_slow_or_full_cluster_is_waited_out_a_fence_is_not() {
        let tries = AtomicU32::new(0);
        let done = until_done("test", || async {
            match tries.fetch_add(1, Ordering::Relaxed) {
                0 => Err(gave_up()),
                1 => Err(JournalError::Client(ClientError::Full("full".into()))),
                _ => Ok(()),
            }
        })
        .await;
        assert!(done.is_ok());
        assert_eq!(tries.load(Ordering::Relaxed), 3);
        let fenced = until_done("test", || async { Err(JournalError::Fenced(7)) }).await;
        assert!(matches!(fenced, Err(JournalError::Fenced(7))));
        let damaged = until_done("test", || async {
            Err(JournalError::Damaged("bad".into()))
        })
        .await;
        assert!(matches!(damaged, Err(JournalError::Damaged(_))));
    }
}

#[cfg(test)]
mod fragment_tests {
    //! Write-back of directories that split and merge, checked against a
    //! model of the metadata pool: whatever the grouping of entries into
    //! rounds, and after a round cut short and replayed, the stored
    //! fragments hold exactly the cached directory.

    use super::*;
    use crate::format::InodeRec;
    use crate::mds::namespace::{Namespace, Stop, create_op};
    use cairn_proto::mds::{Caller, MdsAnswer, MdsOp, ROOT_INO, Time};
    use serde_bytes::ByteBuf;

    type Store = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

    /// Applies `plan`'s first `changes` omap changes (all if `None`: then
    /// its removals too).
    fn apply(store: &mut Store, plan: &Plan, changes: Option<usize>) {
        let n = changes.unwrap_or(plan.changes.len());
        for (object, (set, remove)) in plan.changes.iter().take(n) {
            let o = store.entry(object.clone()).or_default();
            for (k, v) in set {
                o.insert(k.clone(), v.clone());
            }
            for k in remove {
                o.remove(k);
            }
        }
        if changes.is_none() {
            for object in &plan.removals {
                store.remove(object);
            }
        }
    }

    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    fn entry(i: u64) -> String {
        format!("entry-{i}")
    }

    fn name(i: u64) -> ByteBuf {
        ByteBuf::from(entry(i).into_bytes())
    }

    /// An empty file system whose fragments split past 8 entries.
    fn small_fragments() -> Namespace {
        let mut ns = Namespace::new(2, 2);
        ns.set_split_entries(8);
        ns.insert_inode(Namespace::root_inode(Time::default()));
        ns.insert_frag(ROOT_INO, Frag::WHOLE, []);
        ns
    }

    /// Runs a create-heavy, then unlink-heavy, then mixed storm over two
    /// directories with fragments of at most 8 entries: the journal.
    fn storm(ns: &mut Namespace, seed: u64) -> (Vec<Entry>, u64) {
        let mut rng = Rng(seed | 1);
        let mut entries = Vec::new();
        let mut seq = 0;
        let mut run = |ns: &mut Namespace, op: MdsOp, entries: &mut Vec<Entry>| match ns.execute(
            &op,
            Caller::default(),
            Time::default(),
        ) {
            Ok(out) => {
                seq += 1;
                entries.push(Entry {
                    seq,
                    session: 1,
                    tid: seq,
                    deltas: out.deltas,
                });
                Some(out.answer)
            }
            Err(Stop::Errno(_)) => None,
            Err(other) => panic!("everything is cached, yet {other:?}"),
        };
        let mkdir = create_op(ROOT_INO, "d", libc::S_IFDIR | 0o755);
        let Some(MdsAnswer::Attr(d)) = run(ns, mkdir, &mut entries) else {
            panic!("mkdir")
        };
        for step in 0..3000u64 {
            let create_odds = match step {
                0..800 => 9,
                800..2000 => 1,
                _ => 5,
            };
            let dir = if rng.below(2) == 0 { ROOT_INO } else { d.ino };
            let i = rng.below(100);
            let n = name(i);
            let op = match rng.below(10) {
                r if r < create_odds => create_op(dir, &entry(i), libc::S_IFREG | 0o644),
                _ if rng.below(4) == 0 => MdsOp::Rename {
                    parent: dir,
                    name: n,
                    new_parent: if dir == ROOT_INO { d.ino } else { ROOT_INO },
                    new_name: name(rng.below(100)),
                    flags: 0,
                },
                _ => MdsOp::Unlink {
                    parent: dir,
                    name: n,
                    time: None,
                },
            };
            run(ns, op, &mut entries);
        }
        (entries, d.ino)
    }

    /// The directory `dir` as cached: name → entry.
    fn cached(ns: &mut Namespace, dir: u64) -> BTreeMap<Vec<u8>, (u64, u64)> {
        let op = MdsOp::ReadDir {
            ino: dir,
            cookie: 0,
            max: u32::MAX,
        };
        let mut out = BTreeMap::new();
        let mut cookie = 0;
        loop {
            let op = match &op {
                MdsOp::ReadDir { ino, max, .. } => MdsOp::ReadDir {
                    ino: *ino,
                    cookie,
                    max: *max,
                },
                _ => unreachable!(),
            };
            let answer = ns
                .execute(&op, Caller::default(), Time::default())
                .expect("readdir");
            let MdsAnswer::Entries { entries, eof } = answer.answer else {
                panic!("entries")
            };
            for e in entries {
                assert!(e.cookie > cookie, "cookies ascend");
                cookie = e.cookie;
                out.insert(e.name.to_vec(), (e.ino, e.cookie));
            }
            if eof {
                return out;
            }
        }
    }

    /// The directory `dir` as stored, checking every object is one of its
    /// fragments and every name is in its fragment's object.
    fn stored(store: &Store, dir: u64) -> (Vec<Frag>, BTreeMap<Vec<u8>, u64>) {
        let rec: InodeRec = format::decode(
            store
                .get(&inode_object(dir))
                .and_then(|o| o.get(&inode_key(dir).to_vec()))
                .expect("directory record stored"),
        )
        .expect("decodes");
        assert!(format::valid_tree(&rec.frags), "{:?}", rec.frags);
        let tree = if rec.frags.is_empty() {
            vec![Frag::WHOLE]
        } else {
            rec.frags.clone()
        };
        let mut names = BTreeMap::new();
        for (object, keys) in store {
            let Some((ino, frag)) = format::parse_dir_object(object) else {
                continue;
            };
            if ino != dir {
                continue;
            }
            assert!(tree.contains(&frag), "stale object {object} of {tree:?}");
            for (k, v) in keys {
                assert!(frag.contains(format::name_hash(k)), "{k:?} in {object}");
                let d: Dentry = format::decode(v).expect("dentry");
                assert!(names.insert(k.clone(), d.ino).is_none());
            }
        }
        (rec.frags, names)
    }

    fn assert_same(ns: &mut Namespace, store: &Store, dirs: &[u64], when: &str) {
        for &dir in dirs {
            let want: BTreeMap<Vec<u8>, u64> = cached(ns, dir)
                .into_iter()
                .map(|(n, (ino, _))| (n, ino))
                .collect();
            let (frags, got) = stored(store, dir);
            assert_eq!(got, want, "directory {dir} {when}");
            assert_eq!(
                frags,
                ns.inode_rec(dir).expect("cached").frags,
                "fragments of {dir} {when}"
            );
        }
    }

    #[test]
    fn stored_fragments_hold_the_cached_directory_in_any_grouping_and_after_a_cut() {
        for seed in [1u64, 7, 1234, 99_991] {
            let mut ns = small_fragments();
            let root = Entry {
                seq: 0,
                session: 0,
                tid: 0,
                deltas: vec![Delta::PutInode(Namespace::root_inode(Time::default()))],
            };
            let (entries, d) = storm(&mut ns, seed);
            let refrags = entries
                .iter()
                .flat_map(|e| &e.deltas)
                .filter(|d| matches!(d, Delta::Refrag { to, .. } if to.len() > 1))
                .count();
            let merges = entries
                .iter()
                .flat_map(|e| &e.deltas)
                .filter(|d| matches!(d, Delta::Refrag { to, .. } if to.len() == 1))
                .count();
            assert!(
                refrags > 4 && merges > 2,
                "splits {refrags}, merges {merges}"
            );
            let mut rng = Rng(seed.wrapping_mul(31) | 1);
            // Rounds of random length, one cut short and replayed from an
            // earlier round's start (a crash mid write-back; the head had
            // not moved).
            let mut store = Store::new();
            apply(&mut store, &plan(std::slice::from_ref(&root)), None);
            let mut at = 0;
            let mut starts = vec![0];
            while at < entries.len() {
                let end = (at + 1 + rng.below(200) as usize).min(entries.len());
                let p = plan(&entries[at..end]);
                if rng.below(5) == 0 {
                    let cut = rng.below(p.changes.len() as u64 + 1) as usize;
                    apply(&mut store, &p, Some(cut));
                    let from = starts[rng.below(starts.len() as u64) as usize];
                    apply(&mut store, &plan(&entries[from..end]), None);
                } else {
                    apply(&mut store, &p, None);
                }
                starts.push(end);
                at = end;
            }
            assert_same(&mut ns, &store, &[ROOT_INO, d], &format!("seed {seed}"));
            // Replaying everything again over the final state changes
            // nothing.
            apply(&mut store, &plan(&entries), None);
            assert_same(
                &mut ns,
                &store,
                &[ROOT_INO, d],
                &format!("seed {seed}, replayed"),
            );
        }
    }

    #[test]
    fn a_split_and_merge_in_one_round_leave_no_removed_name_behind() {
        let mut ns = small_fragments();
        let mut entries = vec![Entry {
            seq: 0,
            session: 0,
            tid: 0,
            deltas: vec![Delta::PutInode(Namespace::root_inode(Time::default()))],
        }];
        let run = |ns: &mut Namespace, entries: &mut Vec<Entry>, op: MdsOp| {
            let out = ns
                .execute(&op, Caller::default(), Time::default())
                .expect("runs");
            entries.push(Entry {
                seq: entries.len() as u64,
                session: 1,
                tid: entries.len() as u64,
                deltas: out.deltas,
            });
        };
        let create = |i| create_op(ROOT_INO, &entry(i), libc::S_IFREG | 0o644);
        let unlink = |i| MdsOp::Unlink {
            parent: ROOT_INO,
            name: name(i),
            time: None,
        };
        for i in 0..8 {
            run(&mut ns, &mut entries, create(i));
        }
        let first_round = entries.len();
        // One round: the ninth entry splits the directory, removals
        // merge it back into the object the first round wrote.
        run(&mut ns, &mut entries, create(8));
        assert!(!ns.inode_rec(ROOT_INO).expect("root").frags.is_empty());
        for i in 0..8 {
            run(&mut ns, &mut entries, unlink(i));
        }
        assert!(ns.inode_rec(ROOT_INO).expect("root").frags.is_empty());
        let mut store = Store::new();
        apply(&mut store, &plan(&entries[..first_round]), None);
        apply(&mut store, &plan(&entries[first_round..]), None);
        assert_same(&mut ns, &store, &[ROOT_INO], "after the round");
    }

    #[test]
    fn cookies_stay_through_splits_and_merges() {
        let mut ns = small_fragments();
        let create = |ns: &mut Namespace, i| {
            let op = create_op(ROOT_INO, &entry(i), libc::S_IFREG | 0o644);
            ns.execute(&op, Caller::default(), Time::default())
                .expect("create");
        };
        for i in 0..5 {
            create(&mut ns, i);
        }
        let before = cached(&mut ns, ROOT_INO);
        for i in 5..200 {
            create(&mut ns, i);
        }
        assert!(ns.inode_rec(ROOT_INO).expect("root").frags.len() > 8);
        let grown = cached(&mut ns, ROOT_INO);
        assert_eq!(grown.len(), 200);
        for (n, v) in &before {
            assert_eq!(grown.get(n), Some(v), "cookie of {n:?} moved in a split");
        }
        for i in 5..200 {
            let op = MdsOp::Unlink {
                parent: ROOT_INO,
                name: name(i),
                time: None,
            };
            ns.execute(&op, Caller::default(), Time::default())
                .expect("unlink");
        }
        assert!(
            ns.inode_rec(ROOT_INO).expect("root").frags.len() <= 8,
            "merged back: {:?}",
            ns.inode_rec(ROOT_INO).expect("root").frags
        );
        assert_eq!(cached(&mut ns, ROOT_INO), before, "cookies after merges");
    }
}

//! The committer: one thread that applies queued transactions in order and
//! makes each batch of them durable together.
//!
//! A batch keeps an overlay (`overlay.rs`) of every collection, object,
//! omap entry and metadata key it changed. Each transaction applies to that
//! overlay with an undo log, so a transaction that fails (a missing object,
//! a corrupt record) is rolled back alone while the rest of the batch
//! commits. The batch then becomes durable with one record in the commit
//! log (`wal.rs`: its key images and the bytes of its small extents; the
//! data file is flushed first only for large extents), and its changes go
//! to fjall unflushed. Checkpoints, on their own thread, flush the data
//! file and fjall and move the log's start; extents a batch freed are
//! reused only after the checkpoint that follows it.

use crate::failpoint::{CrashPoint, SyncSite};
use crate::overlay::{Batch, Payload, TxnCtx, any_large};
use crate::record::Extent;
use crate::shared::{Active, Shared, apply_changes, flush_store};
use crate::space::reclaim;
use crate::txn::Transaction;
use crate::wal::{self, Change, DataWrite, Wal, WalBody};
use crate::{CollectionId, CollectionUsage, StoreError, limits};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

/// A queued transaction.
#[derive(Debug)]
pub(crate) struct Job {
    pub txn: Transaction,
    pub payloads: Vec<Payload>,
    pub reply: SyncSender<Result<(), StoreError>>,
    /// Dropped once the reply is sent.
    pub active: Option<Active>,
}

pub(crate) struct Committer {
    shared: Shared,
    wal: Wal,
    /// Extents freed by batches since the last checkpoint. They are not
    /// reused before it: replaying an older record rewrites its small
    /// extents, which must not by then hold another object's data.
    freed_since_checkpoint: Vec<Extent>,
    /// Their allocated bytes.
    freed_bytes: u64,
    /// A checkpoint running on its own thread, so the flush of the data
    /// file (megabytes of small extents) does not stall commits.
    in_flight: Option<InFlight>,
    /// Wakes the thread that punches and releases freed extents, so that
    /// thousands of them (a bulk delete of 4 MiB objects) never stall
    /// commits; dropped at the end to stop it.
    reclaim: Option<(SyncSender<()>, std::thread::JoinHandle<()>)>,
}

/// A background checkpoint: what it covers and what it lets go.
struct InFlight {
    mark: wal::Mark,
    freed: Vec<Extent>,
    freed_bytes: u64,
    done: Receiver<Result<(), StoreError>>,
}

impl Committer {
    pub fn new(shared: Shared, wal: Wal) -> Result<Committer, StoreError> {
        let (wake, woken) = std::sync::mpsc::sync_channel(1);
        let reclaimer = shared.clone();
        let handle = std::thread::Builder::new()
            .name("store-reclaim".into())
            .spawn(move || {
                // Woken after commits, and every 100 ms for frees whose last
                // reader has since finished.
                while !matches!(
                    woken.recv_timeout(Duration::from_millis(100)),
                    Err(RecvTimeoutError::Disconnected)
                ) {
                    reclaim(&reclaimer);
                }
                reclaim(&reclaimer);
            })?;
        Ok(Committer {
            shared,
            wal,
            freed_since_checkpoint: Vec::new(),
            freed_bytes: 0,
            in_flight: None,
            reclaim: Some((wake, handle)),
        })
    }

    fn wake_reclaimer(&self) {
        if let Some((wake, _)) = &self.reclaim {
            let _ = wake.try_send(());
        }
    }

    /// Serves the queue until every sender is gone, checkpointing when the
    /// log fills or the queue is idle.
    pub fn run(mut self, jobs: &Receiver<Job>) {
        loop {
            let first = match jobs.recv_timeout(Duration::from_millis(100)) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    self.finish_checkpoint(true);
                    if self.wal.since_checkpoint() > 0 {
                        // A failure here is retried at the next chance; the
                        // log still holds every record.
                        let _ = self.checkpoint();
                    }
                    self.wake_reclaimer();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let mut bytes = first.txn.payload_bytes();
            let mut batch = vec![first];
            // Take what is queued; if more transactions are being prepared
            // than are queued, wait a moment for them (Postgres's
            // `commit_delay`): they join this flush rather than wait out a
            // whole one. A lone writer never waits.
            let deadline = Instant::now() + limits::GROUP_COMMIT_WAIT;
            while batch.len() < limits::BATCH_TXNS_MAX && bytes < limits::BATCH_BYTES_MAX {
                let job = match jobs.try_recv() {
                    Ok(job) => job,
                    Err(_) => {
                        let now = Instant::now();
                        if self.shared.active.load(Ordering::Relaxed) <= batch.len()
                            || now >= deadline
                        {
                            break;
                        }
                        match jobs.recv_timeout(deadline - now) {
                            Ok(job) => job,
                            Err(_) => break,
                        }
                    }
                };
                bytes += job.txn.payload_bytes();
                batch.push(job);
            }
            self.commit_batch(batch);
            self.finish_checkpoint(false);
            // Also checkpoint once many bytes wait to be freed, so a bulk
            // delete returns its space (punching takes about 1 ms per
            // 4 MiB extent here) while it runs, not all at once after it.
            if self.in_flight.is_none()
                && (self.wal.since_checkpoint() >= self.wal.capacity() / 4
                    || self.freed_bytes >= limits::CHECKPOINT_FREED_BYTES)
            {
                self.start_checkpoint();
            }
            self.wake_reclaimer();
        }
        if self.wal.since_checkpoint() > 0 {
            let _ = self.checkpoint();
        }
        if let Some((wake, handle)) = self.reclaim.take() {
            drop(wake);
            let _ = handle.join();
        }
    }

    fn commit_batch(&mut self, jobs: Vec<Job>) {
        let mut batch = Batch::new(&self.shared);
        let mut results = Vec::with_capacity(jobs.len());
        let mut committed_allocations = Vec::new();
        let mut unsynced = false;
        let mut small_bytes = Vec::new();
        let mut freed = Vec::new();
        let mut active = Vec::with_capacity(jobs.len());
        for job in jobs {
            active.push(job.active);
            let mut ctx = TxnCtx::default();
            let result = batch.apply(&mut ctx, job.txn, job.payloads);
            match result {
                Ok(()) => {
                    unsynced |= ctx.unsynced;
                    small_bytes.append(&mut ctx.small_bytes);
                    committed_allocations.append(&mut ctx.allocated);
                    freed.append(&mut ctx.freed);
                }
                Err(_) => batch.roll_back(ctx),
            }
            results.push((job.reply, result));
        }
        let usage = batch.usage_changes();
        let persisted = batch.changes().and_then(|changes| {
            self.persist(changes, unsynced, &committed_allocations, small_bytes)
        });
        if let Err(e) = persisted {
            // The disk failed under us. The batch's record may or may not
            // have reached the log, so what it allocated stays allocated
            // (the next open finds it free if the record is not there).
            for (reply, result) in results {
                let _ = reply.send(result.and(Err(e.clone())));
            }
            return;
        }
        self.count_usage(usage);
        self.freed_bytes += freed.iter().map(Extent::allocated_bytes).sum::<u64>();
        self.freed_since_checkpoint.append(&mut freed);
        for (reply, result) in results {
            let _ = reply.send(result);
        }
    }

    /// Carries a committed batch's changes into the per-collection usage.
    fn count_usage(&self, changes: BTreeMap<CollectionId, (CollectionUsage, CollectionUsage)>) {
        let mut usage = self
            .shared
            .per_collection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (c, (before, after)) in changes {
            if before == after {
                continue;
            }
            let entry = usage.entry(c).or_default();
            entry.subtract(&before);
            entry.add(&after);
            if entry.objects == 0 {
                usage.remove(&c);
            }
        }
    }

    /// Makes a batch durable with one log record: the data file is flushed
    /// first only if the batch wrote large extents (those are not logged)
    /// that their submitters have not flushed (`unsynced`). A batch too
    /// large for one record is made durable by a checkpoint.
    fn persist(
        &mut self,
        changes: Vec<Change>,
        unsynced: bool,
        allocated: &[Extent],
        logged: Vec<(u64, Bytes)>,
    ) -> Result<(), StoreError> {
        let small: Vec<&Extent> = allocated
            .iter()
            .filter(|e| e.length < limits::DIRECT_WRITE_BYTES_MIN)
            .collect();
        let small_bytes: u64 = small.iter().map(|e| e.length).sum();
        let small_logged = small_bytes <= limits::WAL_RECORD_BYTES_MAX;
        let mut data = Vec::new();
        if small_logged {
            let mut known: BTreeMap<u64, Bytes> = logged.into_iter().collect();
            for e in &small {
                let bytes = match known.remove(&e.offset) {
                    Some(bytes) if bytes.len() as u64 == e.length => bytes.to_vec(),
                    // Still in the page cache: the submitter wrote it
                    // moments ago.
                    _ => {
                        let mut bytes = vec![0u8; usize::try_from(e.length).unwrap_or(0)];
                        self.shared.data.read_exact_at(&mut bytes, e.offset)?;
                        bytes
                    }
                };
                data.push(DataWrite {
                    offset: e.offset,
                    bytes,
                });
            }
        }
        let body = WalBody { changes, data };
        if small_logged {
            let encoded = wal::encode(&body);
            if !self.wal.fits(encoded.len()) {
                self.finish_checkpoint(true);
            }
            if self.wal.fits(encoded.len()) {
                if unsynced && !crate::failpoint::skip(SyncSite::BatchUnsynced) {
                    self.shared.sync_data()?;
                }
                self.wal.append(&encoded)?;
                crate::failpoint::crash_point(CrashPoint::LogAppended);
                if any_large(allocated) {
                    crate::failpoint::crash_point(CrashPoint::LargeDataLogged);
                }
                return apply_changes(&self.shared, &body.changes);
            }
        }
        // Too large for one record: a checkpoint first, so no record is left
        // to replay: replay re-applies records' key images, and older ones
        // applied over this batch's changes (which fjall may keep after a
        // crash, as its journal reaches the file before any flush) would
        // leave objects half old, half new. Its data flush also makes this
        // batch's data durable (written before it, by the submitters and
        // by `apply` above) before fjall may write its journal; a second
        // checkpoint makes the batch durable.
        self.checkpoint()?;
        apply_changes(&self.shared, &body.changes)?;
        if crate::failpoint::armed(CrashPoint::LargeBatchApplied) {
            // fjall may write its journal out at any moment (it keeps up
            // to 8 KiB in memory): here it has, before the data flush.
            let _ = self.shared.db.persist(fjall::PersistMode::Buffer);
        }
        crate::failpoint::crash_point(CrashPoint::LargeBatchApplied);
        self.checkpoint()
    }

    /// Makes everything applied so far durable in the data file and the
    /// metadata database, moves the log's start past it and lets the
    /// extents freed since the last checkpoint go to reuse.
    fn checkpoint(&mut self) -> Result<(), StoreError> {
        self.finish_checkpoint(true);
        flush_store(&self.shared)?;
        self.wal.checkpoint()?;
        self.shared
            .space
            .defer(std::mem::take(&mut self.freed_since_checkpoint));
        self.freed_bytes = 0;
        Ok(())
    }

    /// Starts a checkpoint of everything applied so far on its own thread.
    /// Commits go on meanwhile; their records stay for the next one.
    fn start_checkpoint(&mut self) {
        let Ok(header) = self.wal.header() else {
            return;
        };
        let mark = self.wal.mark();
        let shared = self.shared.clone();
        let (tx, done) = std::sync::mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("store-checkpoint".into())
            .spawn(move || {
                let result = flush_store(&shared).and_then(|()| Ok(header.write(&mark)?));
                let _ = tx.send(result);
            });
        if spawned.is_ok() {
            self.in_flight = Some(InFlight {
                mark,
                freed: std::mem::take(&mut self.freed_since_checkpoint),
                freed_bytes: std::mem::take(&mut self.freed_bytes),
                done,
            });
        }
    }

    /// Takes in a background checkpoint that has finished (or, with
    /// `wait`, waits for it): its part of the ring is free again and the
    /// extents freed before it go to reuse.
    fn finish_checkpoint(&mut self, wait: bool) {
        let Some(in_flight) = self.in_flight.take() else {
            return;
        };
        let result = if wait {
            in_flight.done.recv().ok()
        } else {
            match in_flight.done.try_recv() {
                Ok(result) => Some(result),
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    self.in_flight = Some(in_flight);
                    return;
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => None,
            }
        };
        let InFlight {
            mark,
            mut freed,
            freed_bytes,
            ..
        } = in_flight;
        if let Some(Ok(())) = result {
            self.wal.checkpointed(&mark);
            self.shared.space.defer(freed);
        } else {
            // Failed: the log still holds its records and the frees wait
            // for the next checkpoint.
            freed.append(&mut self.freed_since_checkpoint);
            self.freed_since_checkpoint = freed;
            self.freed_bytes += freed_bytes;
        }
    }
}

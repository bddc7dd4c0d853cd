//! Bucket index updates, batched per shard: while a write to a shard is
//! in flight, the updates that arrive for it wait and then go together
//! in one compound operation. Under many concurrent PUTs a shard takes a
//! few large writes instead of one per object, which is most of what an
//! S3 PUT of a small object costs the cluster beyond its head.

use crate::meta::META_POOL;
use bytes::Bytes;
use cairn_client::{Client, ClientError, WriteOp};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::oneshot;

/// The most updates one write to a shard carries.
pub const BATCH_UPDATES_MAX: usize = 512;

/// A change to one index entry: set to a value, or removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    Set(Bytes, Bytes),
    Remove(Bytes),
}

impl Update {
    fn key(&self) -> &Bytes {
        match self {
            Update::Set(key, _) | Update::Remove(key) => key,
        }
    }
}

type Waiter = oneshot::Sender<Result<(), ClientError>>;

/// The updates waiting for one shard, and whether a writer drains them.
#[derive(Default)]
struct Shard {
    draining: bool,
    queued: VecDeque<(Vec<Update>, Waiter)>,
}

/// Writes index updates, batched per shard object.
#[derive(Clone)]
pub struct IndexWriter {
    client: Client,
    shards: Arc<Mutex<HashMap<Vec<u8>, Shard>>>,
}

impl std::fmt::Debug for IndexWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexWriter").finish_non_exhaustive()
    }
}

impl IndexWriter {
    #[must_use]
    pub fn new(client: Client) -> IndexWriter {
        IndexWriter {
            client,
            shards: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Applies `updates` (in order, in one write) to shard object `shard`
    /// (made if missing), with whatever else is waiting for it; returns
    /// once they are durable.
    ///
    /// # Errors
    /// The cluster's error for the write that carried them.
    pub async fn apply(&self, shard: Vec<u8>, updates: Vec<Update>) -> Result<(), ClientError> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut shards = self.shards.lock().unwrap_or_else(PoisonError::into_inner);
            let queue = shards.entry(shard.clone()).or_default();
            queue.queued.push_back((updates, tx));
            !std::mem::replace(&mut queue.draining, true)
        };
        if start {
            let writer = self.clone();
            tokio::spawn(async move { writer.drain(shard).await });
        }
        rx.await
            .unwrap_or_else(|_| Err(ClientError::Invalid("the index writer stopped".into())))
    }

    /// Writes the shard's queued updates, batch after batch, until none
    /// wait.
    async fn drain(&self, shard: Vec<u8>) {
        loop {
            let batch: Vec<(Vec<Update>, Waiter)> = {
                let mut shards = self.shards.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(queue) = shards.get_mut(&shard) else {
                    return;
                };
                if queue.queued.is_empty() {
                    shards.remove(&shard);
                    return;
                }
                // Whole requests, up to the batch size (at least one).
                let mut take = 0;
                let mut updates = 0;
                for (request, _) in &queue.queued {
                    if take > 0 && updates + request.len() > BATCH_UPDATES_MAX {
                        break;
                    }
                    take += 1;
                    updates += request.len();
                }
                queue.queued.drain(..take).collect()
            };
            let op = batch_op(batch.iter().flat_map(|(updates, _)| updates));
            let result = self.client.operate(META_POOL, &shard, op).await.map(|_| ());
            for (_, waiter) in batch {
                let _ = waiter.send(result.clone());
            }
        }
    }
}

/// The update that counts for each key of `updates` (the last), in key
/// order.
fn collapse<'a>(updates: impl Iterator<Item = &'a Update>) -> Vec<&'a Update> {
    let mut last: BTreeMap<&Bytes, &Update> = BTreeMap::new();
    for update in updates {
        last.insert(update.key(), update);
    }
    last.into_values().collect()
}

/// One write applying `updates` in order: the last update of a key wins.
fn batch_op<'a>(updates: impl Iterator<Item = &'a Update>) -> WriteOp {
    let last = collapse(updates);
    let sets: Vec<(&[u8], &[u8])> = last
        .iter()
        .filter_map(|u| match u {
            Update::Set(key, value) => Some((&key[..], &value[..])),
            Update::Remove(_) => None,
        })
        .collect();
    let removes: Vec<&[u8]> = last
        .iter()
        .filter_map(|u| match u {
            Update::Remove(key) => Some(&key[..]),
            Update::Set(..) => None,
        })
        .collect();
    let mut op = WriteOp::new().create(false);
    if !sets.is_empty() {
        op = op.omap_set(sets);
    }
    if !removes.is_empty() {
        op = op.omap_remove(removes);
    }
    op
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_keeps_the_last_update_of_each_key() {
        let k = |s: &'static str| Bytes::from_static(s.as_bytes());
        let updates = [
            Update::Set(k("a"), k("1")),
            Update::Remove(k("b")),
            Update::Set(k("a"), k("2")),
            Update::Set(k("b"), k("3")),
            Update::Remove(k("c")),
            Update::Set(k("c"), k("4")),
            Update::Remove(k("c")),
        ];
        let last = collapse(updates.iter());
        assert_eq!(
            last,
            vec![
                &Update::Set(k("a"), k("2")),
                &Update::Set(k("b"), k("3")),
                &Update::Remove(k("c")),
            ]
        );
    }
}

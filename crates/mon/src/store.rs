//! [`MonStore`]: the monitor's durable state in a redb database.
//!
//! Tables: `meta` (the fsid), `incrementals` (epoch → `CINC` envelope) and
//! `full_maps` (epoch → a `CMON` envelope holding the binary cluster map
//! and the endpoints, one every [`FULL_MAP_EVERY_EPOCHS`]). What is kept
//! follows the service's history (`MapService::history_from`): the newest
//! full map at or before its start, every full map and incremental after
//! that. A restart loads the oldest full map kept and replays the
//! incrementals after it.
//! Every write commits with redb's default (immediate, fsynced) durability
//! before the caller replies.

use crate::limits::FULL_MAP_EVERY_EPOCHS;
use cairn_placement::ClusterMap;
use cairn_proto::map::{Incremental, MonState, OsdEndpoint};
use cairn_proto::mon::MonError;
use cairn_types::envelope;
use cairn_types::{Epoch, OsdId};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use std::path::Path;

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const INCREMENTALS: TableDefinition<u64, &[u8]> = TableDefinition::new("incrementals");
const FULL_MAPS: TableDefinition<u64, &[u8]> = TableDefinition::new("full_maps");

const FSID_KEY: &str = "fsid";
/// The settings set with `cairn config set` (postcard pairs).
const CONFIG_KEY: &str = "config";
/// The file systems (postcard `Vec<FsDef>`).
const FS_KEY: &str = "fs";
/// The OSDs the monitor marked out for being down (postcard list of ids).
const AUTO_OUT_KEY: &str = "auto_out";
/// Envelope kind of a stored full monitor state.
pub const FULL_MAGIC: [u8; 4] = *b"CMON";
pub const FULL_FORMAT_VERSION: u16 = 1;
/// The database file inside the data directory.
pub const DB_FILE_NAME: &str = "mon.redb";

#[derive(Serialize, Deserialize)]
struct FullV1 {
    /// `ClusterMap::encode` bytes.
    map: Vec<u8>,
    endpoints: Vec<(u32, String, u64)>,
}

fn store_err(error: impl std::fmt::Display) -> MonError {
    MonError::Store(error.to_string())
}

/// The monitor's database.
#[derive(Debug)]
pub struct MonStore {
    db: Database,
    fsid: u128,
}

/// What [`MonStore::open`] recovered.
#[derive(Debug)]
pub struct Loaded {
    /// The oldest map kept.
    pub base: MonState,
    /// The stored incrementals after `base`, oldest first (empty right
    /// after creation).
    pub history: Vec<Incremental>,
    /// The settings set explicitly.
    pub config: Vec<(String, String)>,
    /// The OSDs marked out for being down.
    pub auto_out: Vec<OsdId>,
    /// The file systems.
    pub fs: Vec<crate::fsmap::FsDef>,
}

impl MonStore {
    /// Opens (or creates, with a fresh fsid and an empty map at epoch 1)
    /// the store in `data_dir`.
    ///
    /// # Errors
    /// [`MonError::Store`] / [`MonError::Io`] if the database cannot be
    /// opened or holds damaged records.
    pub fn open(data_dir: &Path) -> Result<(MonStore, Loaded), MonError> {
        std::fs::create_dir_all(data_dir)?;
        let db = Database::create(data_dir.join(DB_FILE_NAME)).map_err(store_err)?;
        let existing = read_fsid(&db)?;
        let fsid = match existing {
            Some(fsid) => fsid,
            None => create(&db)?,
        };
        let store = MonStore { db, fsid };
        let loaded = store.load()?;
        Ok((store, loaded))
    }

    #[must_use]
    pub fn fsid(&self) -> u128 {
        self.fsid
    }

    /// Durably stores `inc` (and, every `FULL_MAP_EVERY_EPOCHS`, the full
    /// `state` it produced), pruning in the same transaction what the
    /// service no longer keeps: history before `keep_from` (the service's
    /// `history_from`), down to the newest full map at or before it.
    ///
    /// # Errors
    /// [`MonError::Store`]; nothing is stored then.
    pub fn persist(
        &self,
        inc: &Incremental,
        state: &MonState,
        keep_from: Epoch,
    ) -> Result<(), MonError> {
        assert_eq!(inc.epoch, state.map.epoch, "persist the state inc produced");
        let bytes = inc.encode().map_err(store_err)?;
        let txn = self.db.begin_write().map_err(store_err)?;
        {
            let mut table = txn.open_table(INCREMENTALS).map_err(store_err)?;
            table
                .insert(inc.epoch.0, bytes.as_slice())
                .map_err(store_err)?;
        }
        if inc.epoch.0.is_multiple_of(FULL_MAP_EVERY_EPOCHS) {
            write_full(&txn, state)?;
        }
        {
            let mut fulls = txn.open_table(FULL_MAPS).map_err(store_err)?;
            let base = fulls
                .range(..keep_from.0)
                .map_err(store_err)?
                .next_back()
                .transpose()
                .map_err(store_err)?
                .map(|(epoch, _)| epoch.value());
            if let Some(base) = base {
                fulls.retain(|epoch, _| epoch >= base).map_err(store_err)?;
                let mut incs = txn.open_table(INCREMENTALS).map_err(store_err)?;
                incs.retain(|epoch, _| epoch > base).map_err(store_err)?;
            }
        }
        txn.commit().map_err(store_err)
    }

    /// Durably replaces the stored settings.
    ///
    /// # Errors
    /// [`MonError::Store`]; nothing is stored then.
    pub fn persist_config(&self, entries: &[(String, String)]) -> Result<(), MonError> {
        self.put_meta(CONFIG_KEY, &entries)
    }

    /// Durably replaces the stored set of OSDs marked out automatically.
    ///
    /// # Errors
    /// [`MonError::Store`]; nothing is stored then.
    pub fn persist_auto_out(&self, ids: &[OsdId]) -> Result<(), MonError> {
        self.put_meta(AUTO_OUT_KEY, &ids)
    }

    /// Durably replaces the stored file systems.
    ///
    /// # Errors
    /// [`MonError::Store`]; nothing is stored then.
    pub fn persist_fs(&self, defs: &[crate::fsmap::FsDef]) -> Result<(), MonError> {
        self.put_meta(FS_KEY, &defs)
    }

    /// Durably replaces one postcard-encoded value of the meta table.
    fn put_meta<T: Serialize + ?Sized>(&self, key: &str, value: &T) -> Result<(), MonError> {
        let bytes = postcard::to_allocvec(value).map_err(store_err)?;
        let txn = self.db.begin_write().map_err(store_err)?;
        {
            let mut meta = txn.open_table(META).map_err(store_err)?;
            meta.insert(key, bytes.as_slice()).map_err(store_err)?;
        }
        txn.commit().map_err(store_err)
    }

    fn load(&self) -> Result<Loaded, MonError> {
        let txn = self.db.begin_read().map_err(store_err)?;
        let (config, auto_out, fs) = {
            let meta = txn.open_table(META).map_err(store_err)?;
            (
                meta_value(&meta, CONFIG_KEY, "settings")?.unwrap_or_default(),
                meta_value(&meta, AUTO_OUT_KEY, "auto-out set")?.unwrap_or_default(),
                meta_value(&meta, FS_KEY, "file systems")?.unwrap_or_default(),
            )
        };
        let fulls = txn.open_table(FULL_MAPS).map_err(store_err)?;
        let (_, oldest) = fulls
            .first()
            .map_err(store_err)?
            .ok_or_else(|| store_err("no full map stored"))?;
        let base = decode_full(oldest.value())?;
        let mut state = base.clone();
        let incs = txn.open_table(INCREMENTALS).map_err(store_err)?;
        let mut history = Vec::new();
        for entry in incs.iter().map_err(store_err)? {
            let (epoch, bytes) = entry.map_err(store_err)?;
            let inc = Incremental::decode(bytes.value()).map_err(store_err)?;
            if inc.epoch.0 != epoch.value() {
                return Err(store_err(format!(
                    "incremental under key {} says epoch {}",
                    epoch.value(),
                    inc.epoch
                )));
            }
            if inc.epoch > state.map.epoch {
                if inc.epoch != state.map.epoch.next() {
                    return Err(store_err(format!(
                        "incremental {} missing after {}",
                        state.map.epoch.next(),
                        state.map.epoch
                    )));
                }
                state.apply(&inc);
                history.push(inc);
            }
        }
        state
            .map
            .validate()
            .map_err(|e| store_err(format!("stored map is invalid: {e}")))?;
        Ok(Loaded {
            base,
            history,
            config,
            auto_out,
            fs,
        })
    }
}

/// One postcard-encoded value of the meta table, if stored.
fn meta_value<T: serde::de::DeserializeOwned>(
    meta: &redb::ReadOnlyTable<&'static str, &'static [u8]>,
    key: &str,
    what: &str,
) -> Result<Option<T>, MonError> {
    match meta.get(key).map_err(store_err)? {
        Some(bytes) => postcard::from_bytes(bytes.value())
            .map(Some)
            .map_err(|e| store_err(format!("stored {what}: {e}"))),
        None => Ok(None),
    }
}

fn read_fsid(db: &Database) -> Result<Option<u128>, MonError> {
    let txn = db.begin_read().map_err(store_err)?;
    let table = match txn.open_table(META) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(error) => return Err(store_err(error)),
    };
    let Some(value) = table.get(FSID_KEY).map_err(store_err)? else {
        return Ok(None);
    };
    let bytes: [u8; 16] = value
        .value()
        .try_into()
        .map_err(|_| store_err("fsid is not 16 bytes"))?;
    Ok(Some(u128::from_le_bytes(bytes)))
}

/// A new cluster: a random fsid and an empty map at epoch 1, in one commit.
fn create(db: &Database) -> Result<u128, MonError> {
    let fsid = random_u128()?;
    let state = MonState {
        map: ClusterMap {
            epoch: Epoch(1),
            ..ClusterMap::default()
        },
        ..MonState::default()
    };
    let txn = db.begin_write().map_err(store_err)?;
    {
        let mut meta = txn.open_table(META).map_err(store_err)?;
        meta.insert(FSID_KEY, fsid.to_le_bytes().as_slice())
            .map_err(store_err)?;
        txn.open_table(INCREMENTALS).map_err(store_err)?;
    }
    write_full(&txn, &state)?;
    txn.commit().map_err(store_err)?;
    tracing::info!(fsid = format_args!("{fsid:032x}"), "created a new cluster");
    Ok(fsid)
}

fn write_full(txn: &redb::WriteTransaction, state: &MonState) -> Result<(), MonError> {
    let full = FullV1 {
        map: state.map.encode().map_err(store_err)?,
        endpoints: state
            .endpoints
            .iter()
            .map(|(id, e)| (id.0, e.addr.clone(), e.capacity_bytes))
            .collect(),
    };
    let bytes = envelope::encode(FULL_MAGIC, FULL_FORMAT_VERSION, &full).map_err(store_err)?;
    let mut table = txn.open_table(FULL_MAPS).map_err(store_err)?;
    table
        .insert(state.map.epoch.0, bytes.as_slice())
        .map_err(store_err)?;
    Ok(())
}

fn decode_full(bytes: &[u8]) -> Result<MonState, MonError> {
    let full: FullV1 =
        envelope::decode(bytes, FULL_MAGIC, FULL_FORMAT_VERSION).map_err(store_err)?;
    let map = ClusterMap::decode(&full.map).map_err(store_err)?;
    let endpoints = full
        .endpoints
        .into_iter()
        .map(OsdEndpoint::from_v1)
        .collect();
    Ok(MonState { map, endpoints })
}

/// 128 random bits from the OS.
fn random_u128() -> Result<u128, MonError> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(u128::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    //! Restarting on the same directory rebuilds the same map.
    use super::*;
    use crate::service::{Event, MapService, ServiceConfig};
    use cairn_placement::Weight;
    use cairn_proto::mon::{FailureDomainSpec, MonCommand, RedundancySpec};

    fn boot(i: u32) -> MonCommand {
        MonCommand::OsdBoot {
            id: None,
            addr: format!("127.0.0.1:{}", 7000 + i),
            host: format!("h{i}"),
            rack: "r0".into(),
            device_class: "hdd".into(),
            weight: Weight::ONE,
            capacity_bytes: 1 << 30,
        }
    }

    fn tempdir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("cairn-mon-store")
            .tempdir_in("/var/tmp")
            .expect("tempdir")
    }

    fn run(service: &mut MapService, store: &MonStore, commands: Vec<MonCommand>) {
        for command in commands {
            let effects = service.handle(Event::Command(command));
            if let Some((_, inc)) = &effects.persist {
                store
                    .persist(inc, service.state(), service.history_from())
                    .expect("persist");
            }
        }
    }

    /// `rounds` reweights, each a new epoch: weights go up from `first`.
    fn reweights(first: u32, rounds: u32) -> Vec<MonCommand> {
        (first..first + rounds)
            .map(|round| MonCommand::OsdReweight(OsdId(round % 4), Weight(0x1_0000 + round + 1)))
            .collect()
    }

    fn pool() -> MonCommand {
        MonCommand::PoolCreate {
            name: "data".into(),
            pg_num: 4,
            redundancy: RedundancySpec::Replicated {
                size: 3,
                min_size: 2,
            },
            failure_domain: FailureDomainSpec::Host,
            device_class: None,
        }
    }

    fn reopened(dir: &Path) -> (MonStore, Loaded, MapService) {
        let (store, loaded) = MonStore::open(dir).expect("reopen");
        let service = MapService::new(
            ServiceConfig::default(),
            loaded.base.clone(),
            loaded.history.clone(),
        );
        (store, loaded, service)
    }

    #[test]
    fn restart_rebuilds_the_same_map() {
        let dir = tempdir();
        let (store, loaded) = MonStore::open(dir.path()).expect("open");
        let fsid = store.fsid();
        assert_eq!(loaded.base.map.epoch, Epoch(1));
        assert!(loaded.auto_out.is_empty());
        let mut service = MapService::new(ServiceConfig::default(), loaded.base, loaded.history);
        let mut commands: Vec<MonCommand> = (0..4).map(boot).collect();
        commands.push(pool());
        // Enough epochs to cross a full-map boundary.
        commands.extend(reweights(0, 60));
        run(&mut service, &store, commands);
        let before = service.state().clone();
        store
            .persist_auto_out(&[OsdId(2), OsdId(3)])
            .expect("persist auto-out");
        drop(store);
        let (store, loaded, service) = reopened(dir.path());
        assert_eq!(store.fsid(), fsid);
        assert_eq!(service.state(), &before);
        assert_eq!(loaded.auto_out, vec![OsdId(2), OsdId(3)]);
        assert_eq!(
            loaded.history.last().map(|i| i.epoch),
            Some(before.map.epoch)
        );
    }

    /// The history is kept back to the oldest epoch a PG still needs, on
    /// disk as in memory; once every PG reported a newer activation, it is
    /// trimmed to the minimum, and a restart starts from a full map at or
    /// before the history the service kept.
    #[test]
    fn history_is_kept_while_a_pg_needs_it_and_trimmed_after() {
        let dir = tempdir();
        let (store, loaded) = MonStore::open(dir.path()).expect("open");
        let mut service = MapService::new(ServiceConfig::default(), loaded.base, loaded.history);
        service.set_history_bounds(10, 1_000);
        let mut commands: Vec<MonCommand> = (0..4).map(boot).collect();
        commands.push(pool());
        run(&mut service, &store, commands);
        let pool_epoch = service.epoch();
        let pgs: Vec<cairn_types::PgId> = (0..4)
            .map(|seed| cairn_types::PgId::new(cairn_types::PoolId(1), seed))
            .collect();
        // Three PGs clean at the pool's epoch, one not reported yet.
        let reports = pgs[..3].iter().map(|pg| (*pg, pool_epoch)).collect();
        service.handle(Event::PgsClean { reports });
        run(&mut service, &store, reweights(0, 120));
        assert_eq!(
            service.history_from(),
            Epoch(2),
            "an unreported PG keeps it all"
        );
        service.handle(Event::PgsClean {
            reports: vec![(pgs[3], pool_epoch)],
        });
        run(&mut service, &store, reweights(120, 1));
        assert_eq!(
            service.history_from(),
            pool_epoch,
            "kept from the oldest clean interval"
        );
        let reports = pgs.iter().map(|pg| (*pg, Epoch(100))).collect();
        service.handle(Event::PgsClean { reports });
        run(&mut service, &store, reweights(121, 1));
        assert_eq!(service.history_from(), Epoch(100));
        run(&mut service, &store, reweights(122, 200));
        assert_eq!(service.history_from(), Epoch(100), "still needed");
        let reports = pgs.iter().map(|pg| (*pg, service.epoch())).collect();
        service.handle(Event::PgsClean { reports });
        run(&mut service, &store, reweights(322, 1));
        let now = service.epoch();
        assert_eq!(
            service.history_from(),
            Epoch(now.0 - 9),
            "the minimum of 10"
        );
        let before = service.state().clone();
        let from = service.history_from();
        drop(store);
        let (_store, loaded, restarted) = reopened(dir.path());
        assert_eq!(restarted.state(), &before);
        assert!(
            loaded.base.map.epoch < from,
            "a full map at or before the history"
        );
        assert!(from.0 - loaded.base.map.epoch.0 <= FULL_MAP_EVERY_EPOCHS);
        assert!(restarted.incrementals_since(Epoch(from.0 - 1)).is_some());
    }
}

//! [`FsMap`]: the file systems and which MDS daemon serves each, as a
//! sans-IO part of [`crate::MapService`].
//!
//! File-system definitions (name, metadata pool, data pool) and each one's
//! generation are persisted; MDS daemons are known from their beacons only
//! (in memory, like OSD statistics). The first daemon to beacon for a file
//! system without an active one becomes active under a new generation;
//! others stand by. An active daemon silent for `beacon_grace_ms` is
//! replaced by the standby heard from most recently, under the next
//! generation. The generation is what fences the old daemon out of the
//! journal (see the `cairn-fs` crate), so it is persisted before the reply
//! that hands it out.

use cairn_proto::mon::{FsStatus, MdsInfo, MdsRole, MonError, Reply};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A file system as stored by the monitor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsDef {
    pub name: String,
    pub meta_pool: String,
    pub data_pool: String,
    /// The generation last handed out.
    pub generation: u64,
}

/// One daemon heard from.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Daemon {
    addr: String,
    last_ms: u64,
}

/// The file systems and their daemons.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsMap {
    defs: BTreeMap<String, FsDef>,
    /// Per file system, its daemons by name.
    daemons: BTreeMap<String, BTreeMap<String, Daemon>>,
    /// Per file system, the active daemon's name.
    active: BTreeMap<String, String>,
}

/// What a change asks the shell to store.
pub type Persist = Option<Vec<FsDef>>;

impl FsMap {
    /// The map with the stored definitions and no daemons.
    #[must_use]
    pub fn new(defs: Vec<FsDef>) -> FsMap {
        FsMap {
            defs: defs.into_iter().map(|d| (d.name.clone(), d)).collect(),
            ..FsMap::default()
        }
    }

    fn stored(&self) -> Vec<FsDef> {
        self.defs.values().cloned().collect()
    }

    /// Whether a file system uses `pool`.
    #[must_use]
    pub fn uses_pool(&self, pool: &str) -> bool {
        self.defs
            .values()
            .any(|d| d.meta_pool == pool || d.data_pool == pool)
    }

    /// Creates a file system; the pools must exist (checked by the caller)
    /// and serve no other file system.
    ///
    /// # Errors
    /// [`MonError::Fs`] for a bad or taken name or pool.
    pub fn create(
        &mut self,
        name: &str,
        meta_pool: &str,
        data_pool: &str,
    ) -> Result<(Reply, Persist), MonError> {
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        {
            return Err(MonError::Fs(format!(
                "invalid name {name:?}: 1 to 64 of [A-Za-z0-9._-]"
            )));
        }
        if meta_pool == data_pool {
            return Err(MonError::Fs(
                "the metadata and data pools must differ".into(),
            ));
        }
        if let Some(existing) = self.defs.get(name) {
            if existing.meta_pool == meta_pool && existing.data_pool == data_pool {
                return Ok((Reply::FsMap(vec![self.status(name, 0)]), None));
            }
            return Err(MonError::Fs(format!("{name:?} already exists")));
        }
        for pool in [meta_pool, data_pool] {
            if self.uses_pool(pool) {
                return Err(MonError::Fs(format!(
                    "pool {pool:?} already serves a file system"
                )));
            }
        }
        self.defs.insert(
            name.to_owned(),
            FsDef {
                name: name.to_owned(),
                meta_pool: meta_pool.to_owned(),
                data_pool: data_pool.to_owned(),
                generation: 0,
            },
        );
        Ok((
            Reply::FsMap(vec![self.status(name, 0)]),
            Some(self.stored()),
        ))
    }

    /// Removes a file system (its pools stay).
    ///
    /// # Errors
    /// [`MonError::Fs`] if it does not exist.
    pub fn remove(&mut self, name: &str) -> Result<(Reply, Persist), MonError> {
        if self.defs.remove(name).is_none() {
            return Err(MonError::Fs(format!("{name:?} does not exist")));
        }
        self.daemons.remove(name);
        self.active.remove(name);
        Ok((Reply::FsMap(Vec::new()), Some(self.stored())))
    }

    /// Every file system's status at `now_ms`.
    #[must_use]
    pub fn list(&self, now_ms: u64) -> Reply {
        Reply::FsMap(self.defs.keys().map(|n| self.status(n, now_ms)).collect())
    }

    fn status(&self, name: &str, now_ms: u64) -> FsStatus {
        let def = &self.defs[name];
        let info = |(daemon, d): (&String, &Daemon)| MdsInfo {
            name: daemon.clone(),
            addr: d.addr.clone(),
            beacon_age_ms: now_ms.saturating_sub(d.last_ms),
        };
        let active_name = self.active.get(name);
        let daemons = self.daemons.get(name);
        FsStatus {
            name: name.to_owned(),
            meta_pool: def.meta_pool.clone(),
            data_pool: def.data_pool.clone(),
            generation: def.generation,
            active: active_name
                .and_then(|a| daemons.and_then(|d| d.get_key_value(a)))
                .map(info),
            standbys: daemons
                .into_iter()
                .flatten()
                .filter(|(n, _)| Some(*n) != active_name)
                .map(info)
                .collect(),
        }
    }

    /// A daemon's beacon: records it, makes it active if the file system
    /// has none, and answers its role.
    ///
    /// # Errors
    /// [`MonError::Fs`] if the file system does not exist.
    pub fn beacon(
        &mut self,
        fs: &str,
        name: &str,
        addr: &str,
        now_ms: u64,
    ) -> Result<(Reply, Persist), MonError> {
        if !self.defs.contains_key(fs) {
            return Err(MonError::Fs(format!("{fs:?} does not exist")));
        }
        let daemons = self.daemons.entry(fs.to_owned()).or_default();
        let restarted = daemons.get(name).is_some_and(|d| d.addr != addr);
        daemons.insert(
            name.to_owned(),
            Daemon {
                addr: addr.to_owned(),
                last_ms: now_ms,
            },
        );
        let mut persist = None;
        let is_active = self.active.get(fs).map(String::as_str) == Some(name);
        if is_active && restarted {
            // The active daemon came back at a new address: a new life,
            // which must fence its old one like any takeover.
            persist = Some(self.promote(fs, name));
        } else if !self.active.contains_key(fs) {
            persist = Some(self.promote(fs, name));
        }
        let role = if self.active.get(fs).map(String::as_str) == Some(name) {
            MdsRole::Active {
                generation: self.defs[fs].generation,
            }
        } else {
            MdsRole::Standby
        };
        let reply = Reply::MdsRole {
            role,
            fs: self.status(fs, now_ms),
        };
        Ok((reply, persist))
    }

    fn promote(&mut self, fs: &str, name: &str) -> Vec<FsDef> {
        if let Some(def) = self.defs.get_mut(fs) {
            def.generation += 1;
            tracing::info!(
                fs,
                mds = name,
                generation = def.generation,
                "MDS made active"
            );
        }
        self.active.insert(fs.to_owned(), name.to_owned());
        self.stored()
    }

    /// Replaces every active daemon silent for `grace_ms` with the standby
    /// heard from most recently (none: the file system waits for one);
    /// forgets standbys silent that long.
    pub fn tick(&mut self, now_ms: u64, grace_ms: u64) -> Persist {
        let mut persist = None;
        let names: Vec<String> = self.defs.keys().cloned().collect();
        for fs in names {
            let Some(daemons) = self.daemons.get_mut(&fs) else {
                continue;
            };
            let alive = |d: &Daemon| now_ms.saturating_sub(d.last_ms) < grace_ms;
            let active = self.active.get(&fs).cloned();
            daemons.retain(|n, d| Some(n) == active.as_ref() || alive(d));
            let Some(active) = active else { continue };
            if daemons.get(&active).is_some_and(alive) {
                continue;
            }
            daemons.remove(&active);
            tracing::warn!(fs, mds = active, "active MDS silent past its grace");
            let successor = daemons
                .iter()
                .max_by_key(|(_, d)| d.last_ms)
                .map(|(n, _)| n.clone());
            match successor {
                Some(next) => persist = Some(self.promote(&fs, &next)),
                None => {
                    self.active.remove(&fs);
                }
            }
        }
        persist
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> FsMap {
        let mut map = FsMap::default();
        map.create("fs", "meta", "data").expect("created");
        map
    }

    fn role(reply: &Reply) -> MdsRole {
        match reply {
            Reply::MdsRole { role, .. } => *role,
            other => panic!("not a role: {other:?}"),
        }
    }

    #[test]
    fn first_beacon_is_active_second_stands_by() {
        let mut map = map();
        let (a, persist) = map.beacon("fs", "a", "127.0.0.1:1", 0).expect("beacon");
        assert_eq!(role(&a), MdsRole::Active { generation: 1 });
        assert!(persist.is_some(), "the generation is persisted");
        let (b, _) = map.beacon("fs", "b", "127.0.0.1:2", 10).expect("beacon");
        assert_eq!(role(&b), MdsRole::Standby);
    }

    #[test]
    fn a_silent_active_is_replaced_under_a_new_generation() {
        let mut map = map();
        map.beacon("fs", "a", "127.0.0.1:1", 0).expect("beacon");
        map.beacon("fs", "b", "127.0.0.1:2", 0).expect("beacon");
        assert!(map.tick(1_000, 2_000).is_none());
        map.beacon("fs", "b", "127.0.0.1:2", 1_500).expect("beacon");
        let persist = map.tick(2_500, 2_000).expect("promoted");
        assert_eq!(persist[0].generation, 2);
        let (b, _) = map.beacon("fs", "b", "127.0.0.1:2", 2_600).expect("beacon");
        assert_eq!(role(&b), MdsRole::Active { generation: 2 });
        // The old one comes back: it stands by.
        let (a, _) = map.beacon("fs", "a", "127.0.0.1:1", 2_700).expect("beacon");
        assert_eq!(role(&a), MdsRole::Standby);
    }

    #[test]
    fn a_restarted_active_gets_a_new_generation() {
        let mut map = map();
        map.beacon("fs", "a", "127.0.0.1:1", 0).expect("beacon");
        let (a, persist) = map.beacon("fs", "a", "127.0.0.1:9", 100).expect("beacon");
        assert_eq!(role(&a), MdsRole::Active { generation: 2 });
        assert!(persist.is_some());
    }

    #[test]
    fn bad_names_and_shared_pools_are_refused() {
        let mut map = map();
        assert!(map.create("a/b", "m2", "d2").is_err());
        assert!(map.create("two", "meta", "d2").is_err());
        assert!(map.create("three", "x", "x").is_err());
        assert!(map.beacon("nofs", "a", "127.0.0.1:1", 0).is_err());
        assert!(map.remove("nofs").is_err());
        assert!(map.remove("fs").is_ok());
    }
}

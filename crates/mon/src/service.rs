//! [`MapService`]: the monitor's decisions as a sans-IO state machine.
//!
//! Events in, [`Effects`] out: at most one new epoch (one [`Incremental`])
//! per event, to be persisted before the reply is sent and the epoch
//! published. Time comes only from the events (`now_ms`), never a clock.

use crate::fsmap::{FsDef, FsMap};
use crate::limits;
use cairn_placement::{OsdInfo, Placement, Pool, Redundancy};
use cairn_proto::map::{Incremental, MonState, OsdEndpoint};
use cairn_proto::mon::MonError;
use cairn_proto::mon::{MonCommand, Reply};
use cairn_types::options::{self, Settings};
use cairn_types::{Epoch, OsdId, PgId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The failure-detection knobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceConfig {
    /// Silence after which an up OSD is marked down; also the window in
    /// which failure reports count.
    pub down_grace_ms: u64,
    /// Time down after which an OSD is marked out.
    pub down_out_ms: u64,
    /// Distinct up reporters needed to mark a peer down.
    pub reporters_min: usize,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            down_grace_ms: limits::DOWN_GRACE_MS_DEFAULT,
            down_out_ms: limits::DOWN_OUT_MS_DEFAULT,
            reporters_min: limits::REPORTERS_MIN_DEFAULT,
        }
    }
}

/// What the service reacts to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Command(MonCommand),
    /// An OSD's heartbeat to the monitor.
    Heartbeat {
        osd: OsdId,
        now_ms: u64,
    },
    /// `reporter` says it cannot reach `target`.
    FailureReport {
        reporter: OsdId,
        target: OsdId,
        now_ms: u64,
    },
    Tick {
        now_ms: u64,
    },
    /// PGs a primary reports clean, each with the first epoch of that
    /// interval: the map history from there on is what a restarting OSD of
    /// the PG needs for peering (Ceph's `last_epoch_clean`).
    PgsClean {
        reports: Vec<(PgId, Epoch)>,
    },
    /// An MDS daemon's beacon (`MonCommand::MdsBeacon` stamped with the
    /// monitor's clock).
    MdsBeacon {
        fs: String,
        name: String,
        addr: String,
        now_ms: u64,
    },
}

/// What the shell must do, in this order: persist, then reply and publish.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    pub persist: Option<(Epoch, Incremental)>,
    /// The settings changed: store these (all that are set).
    pub persist_config: Option<Vec<(String, String)>>,
    /// The OSDs marked out automatically changed: store these (all).
    pub persist_auto_out: Option<Vec<OsdId>>,
    /// The file systems changed: store these (all).
    pub persist_fs: Option<Vec<FsDef>>,
    pub reply: Option<Result<Reply, MonError>>,
    pub publish: Option<Epoch>,
}

/// The cluster-map service.
#[derive(Debug)]
pub struct MapService {
    config: ServiceConfig,
    /// The knobs as the daemon's flags gave them, before settings.
    base_config: ServiceConfig,
    settings: Settings,
    state: MonState,
    /// The incrementals kept, oldest first: at least the newest
    /// `history_min`, and all from the oldest epoch a PG still needs
    /// (see [`MapService::needed_from`]), at most `history_max`.
    history: VecDeque<Incremental>,
    /// The state before the oldest kept incremental (the state itself when
    /// none is kept): what an OSD further behind starts from.
    base: MonState,
    /// Per PG, the first epoch of the newest interval a primary reported it
    /// clean in.
    pg_clean: BTreeMap<PgId, Epoch>,
    history_min: usize,
    history_max: usize,
    /// Latest time seen in any event.
    now_ms: u64,
    last_heartbeat_ms: BTreeMap<OsdId, u64>,
    down_since_ms: BTreeMap<OsdId, u64>,
    /// target -> reporter -> time of its latest report.
    reports: BTreeMap<OsdId, BTreeMap<OsdId, u64>>,
    /// OSDs this monitor marked out because they stayed down, not an
    /// operator: marked in again when they boot (Ceph's
    /// `mon_osd_auto_mark_auto_out_in`), so a repaired host rejoins
    /// without a command while an OSD an operator took out stays out.
    auto_out: BTreeSet<OsdId>,
    auto_out_changed: bool,
    /// The file systems and their MDS daemons.
    fs: FsMap,
}

impl MapService {
    /// A service over `state` with the incrementals that led to it (oldest
    /// first; may be empty).
    ///
    /// # Panics
    /// If `history` does not end at `state`'s epoch.
    #[must_use]
    pub fn new(config: ServiceConfig, base: MonState, history: Vec<Incremental>) -> MapService {
        let mut state = base.clone();
        for inc in &history {
            assert_eq!(
                inc.epoch,
                state.map.epoch.next(),
                "history must follow the base"
            );
            state.apply(inc);
        }
        MapService {
            base_config: config.clone(),
            config,
            settings: Settings::default(),
            state,
            history: history.into(),
            base,
            pg_clean: BTreeMap::new(),
            history_min: limits::INCREMENTALS_KEPT,
            history_max: limits::INCREMENTALS_KEPT_MAX,
            now_ms: 0,
            last_heartbeat_ms: BTreeMap::new(),
            down_since_ms: BTreeMap::new(),
            reports: BTreeMap::new(),
            auto_out: BTreeSet::new(),
            auto_out_changed: false,
            fs: FsMap::default(),
        }
    }

    /// Takes back the stored set of OSDs marked out automatically (at
    /// start).
    /// Restores the stored file systems (at startup).
    pub fn load_fs(&mut self, defs: Vec<FsDef>) {
        self.fs = FsMap::new(defs);
    }

    pub fn load_auto_out(&mut self, ids: Vec<OsdId>) {
        self.auto_out = ids.into_iter().collect();
    }

    /// The OSDs marked out automatically and not yet back.
    #[must_use]
    pub fn auto_out(&self) -> &BTreeSet<OsdId> {
        &self.auto_out
    }

    fn set_auto_out(&mut self, id: OsdId, out: bool) {
        let changed = if out {
            self.auto_out.insert(id)
        } else {
            self.auto_out.remove(&id)
        };
        self.auto_out_changed |= changed;
    }

    /// Applies stored settings (at start).
    pub fn load_settings(&mut self, entries: Vec<(String, String)>) {
        self.settings = Settings::new(entries);
        self.apply_settings();
    }

    /// The settings as set.
    #[must_use]
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn apply_settings(&mut self) {
        let name = "mon_osd_down_out_interval";
        self.config.down_out_ms = if self.settings.explicit().contains_key(name) {
            self.settings.u64(name).saturating_mul(1000)
        } else {
            self.base_config.down_out_ms
        };
    }

    fn config_set(&mut self, name: &str, value: Option<String>) -> Result<Reply, MonError> {
        let mut entries = self.settings.explicit().clone();
        match value {
            Some(value) => {
                let value = options::validate(name, &value).map_err(MonError::BadRequest)?;
                entries.insert(name.to_owned(), value);
            }
            None => {
                if options::find(name).is_none() {
                    return Err(MonError::BadRequest(format!(
                        "unknown setting {name:?} (`cairn config ls` lists them)"
                    )));
                }
                entries.remove(name);
            }
        }
        self.settings = Settings::new(entries);
        self.apply_settings();
        Ok(Reply::Done {
            epoch: self.epoch(),
        })
    }

    fn config_reply(&self) -> Reply {
        Reply::Config {
            digest: config_digest(&self.settings),
            entries: self
                .settings
                .explicit()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    #[must_use]
    pub fn state(&self) -> &MonState {
        &self.state
    }

    #[must_use]
    pub fn epoch(&self) -> Epoch {
        self.state.map.epoch
    }

    /// Sets how many incrementals are kept at least and at most (the
    /// simulator keeps few, to exercise trimming).
    ///
    /// # Panics
    /// If `min` is 0 or above `max`.
    pub fn set_history_bounds(&mut self, min: usize, max: usize) {
        assert!(min > 0 && min <= max, "history bounds {min}..{max}");
        self.history_min = min;
        self.history_max = max;
    }

    /// The state before the oldest kept incremental: the map an OSD whose
    /// epoch is older than the history is sent, before the incrementals.
    #[must_use]
    pub fn base(&self) -> &MonState {
        &self.base
    }

    /// The epoch of the oldest kept incremental (the next epoch when none
    /// is kept): the store keeps what the service keeps.
    #[must_use]
    pub fn history_from(&self) -> Epoch {
        self.history
            .front()
            .map_or_else(|| self.epoch().next(), |i| i.epoch)
    }

    /// The oldest epoch a PG may still need: for every PG of the map, the
    /// start of the newest interval its primary reported it clean in. A
    /// restarting OSD rebuilds the PG's past intervals from the map history,
    /// and peering needs them back to the last clean interval: every copy
    /// of it held every acknowledged write, and any later interval that may
    /// have taken writes is after it. A PG that never reported (since this
    /// monitor started) needs it all (epoch 0).
    #[must_use]
    pub fn needed_from(&self) -> Epoch {
        self.state
            .map
            .pools
            .iter()
            .flat_map(|pool| (0..pool.pg_num).map(|seed| PgId::new(pool.id, seed)))
            .map(|pg| self.pg_clean.get(&pg).copied().unwrap_or(Epoch(0)))
            .min()
            .unwrap_or_else(|| self.epoch())
    }

    /// Drops the oldest incrementals beyond `history_min` that no PG needs
    /// (and any beyond `history_max`), moving the base forward.
    fn trim_history(&mut self) {
        let needed = self.needed_from();
        while let Some(front) = self.history.front() {
            let surplus = self.history.len() > self.history_min;
            let unneeded = front.epoch < needed;
            if !(surplus && unneeded) && self.history.len() <= self.history_max {
                break;
            }
            if let Some(inc) = self.history.pop_front() {
                self.base.apply(&inc);
            }
        }
    }

    /// The incrementals after `have`, if all are still held.
    #[must_use]
    pub fn incrementals_since(&self, have: Epoch) -> Option<Vec<Incremental>> {
        if have >= self.epoch() {
            return Some(Vec::new());
        }
        let first = self.history.front()?;
        if first.epoch.0 > have.0 + 1 {
            return None;
        }
        Some(
            self.history
                .iter()
                .filter(|i| i.epoch > have)
                .cloned()
                .collect(),
        )
    }

    /// Handles one event.
    pub fn handle(&mut self, event: Event) -> Effects {
        match event {
            Event::Command(MonCommand::ConfigSet { name, value }) => {
                let reply = self.config_set(&name, value);
                let persist_config = reply.is_ok().then(|| {
                    self.settings
                        .explicit()
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                });
                Effects {
                    reply: Some(reply),
                    persist_config,
                    ..Effects::default()
                }
            }
            Event::Command(MonCommand::ConfigDump) => Effects {
                reply: Some(Ok(self.config_reply())),
                ..Effects::default()
            },
            Event::Command(MonCommand::FsCreate {
                name,
                meta_pool,
                data_pool,
            }) => {
                // The namespace lives in omap, which erasure-coded pools
                // do not have; file data may go to either kind.
                let pools = self
                    .pool_named(&meta_pool)
                    .and_then(|meta| match meta.redundancy {
                        Redundancy::Erasure { .. } => Err(MonError::Fs(format!(
                            "the metadata pool {meta_pool:?} is erasure-coded: it must be \
                             replicated (the namespace is kept in omap, which erasure-coded \
                             pools do not have); an erasure-coded pool can be the data pool"
                        ))),
                        Redundancy::Replicated { .. } => Ok(()),
                    })
                    .and_then(|()| self.pool_named(&data_pool))
                    .map(drop);
                let result = pools.and_then(|()| self.fs.create(&name, &meta_pool, &data_pool));
                fs_effects(result)
            }
            Event::Command(MonCommand::FsRemove(name)) => fs_effects(self.fs.remove(&name)),
            Event::Command(MonCommand::FsLs) => Effects {
                reply: Some(Ok(self.fs.list(self.now_ms))),
                ..Effects::default()
            },
            Event::Command(MonCommand::MdsBeacon { .. }) => Effects {
                reply: Some(Err(MonError::BadRequest(
                    "an MDS beacon needs the monitor's clock".into(),
                ))),
                ..Effects::default()
            },
            Event::MdsBeacon {
                fs,
                name,
                addr,
                now_ms,
            } => {
                self.advance(now_ms);
                fs_effects(self.fs.beacon(&fs, &name, &addr, self.now_ms))
            }
            Event::Command(command) => {
                let result = self.command(command);
                self.finish(result)
            }
            Event::Heartbeat { osd, now_ms } => {
                self.advance(now_ms);
                let reply = self.heartbeat(osd);
                Effects {
                    reply: Some(reply),
                    ..Effects::default()
                }
            }
            Event::FailureReport {
                reporter,
                target,
                now_ms,
            } => {
                self.advance(now_ms);
                let result = self.failure_report(reporter, target);
                self.finish(result)
            }
            Event::Tick { now_ms } => {
                self.advance(now_ms);
                let inc = self.tick();
                let mut effects = self.finish(Ok((inc, None)));
                effects.reply = None;
                effects.persist_fs = self.fs.tick(self.now_ms, limits::MDS_BEACON_GRACE_MS);
                effects
            }
            Event::PgsClean { reports } => {
                for (pg, epoch) in reports {
                    let known = self.pg_clean.entry(pg).or_insert(epoch);
                    *known = (*known).max(epoch);
                }
                Effects::default()
            }
        }
    }

    fn advance(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
    }

    /// Turns a decision into effects: commits a non-empty incremental as the
    /// next epoch, and replies with `reply` or `Done` at the new epoch.
    fn finish(&mut self, result: Result<(Incremental, Option<OsdId>), MonError>) -> Effects {
        let (inc, booted) = match result {
            Ok(decision) => decision,
            Err(error) => {
                return Effects {
                    reply: Some(Err(error)),
                    ..Effects::default()
                };
            }
        };
        let mut effects = Effects::default();
        if std::mem::take(&mut self.auto_out_changed) {
            effects.persist_auto_out = Some(self.auto_out.iter().copied().collect());
        }
        if !inc.is_empty() {
            let epoch_before = self.epoch();
            self.commit(inc.clone());
            assert_eq!(self.epoch(), epoch_before.next());
            effects.persist = Some((inc.epoch, inc));
            effects.publish = Some(self.epoch());
        }
        let epoch = self.epoch();
        effects.reply = Some(Ok(match booted {
            Some(osd) => Reply::OsdBooted { osd, epoch },
            None => Reply::Done { epoch },
        }));
        effects
    }

    fn commit(&mut self, inc: Incremental) {
        self.state.apply(&inc);
        self.history.push_back(inc);
        let pools: BTreeSet<_> = self.state.map.pools.iter().map(|p| p.id).collect();
        self.pg_clean.retain(|pg, _| pools.contains(&pg.pool));
        self.trim_history();
    }

    /// Checks that the map after `inc` is valid, without committing it.
    fn check(&self, inc: &Incremental) -> Result<MonState, MonError> {
        let mut next = self.state.clone();
        next.apply(inc);
        next.map
            .validate()
            .map_err(|e| MonError::InvalidMap(e.to_string()))?;
        Ok(next)
    }

    fn next_inc(&self) -> Incremental {
        Incremental::new(self.epoch().next())
    }

    fn osd(&self, id: OsdId) -> Result<&OsdInfo, MonError> {
        self.state.map.osd(id).ok_or(MonError::UnknownOsd(id))
    }

    fn pool_named(&self, name: &str) -> Result<&Pool, MonError> {
        self.state
            .map
            .pool_by_name(name)
            .ok_or_else(|| MonError::NoPool(name.to_owned()))
    }

    fn command(&mut self, command: MonCommand) -> Result<(Incremental, Option<OsdId>), MonError> {
        match command {
            MonCommand::OsdBoot {
                id,
                addr,
                host,
                rack,
                device_class,
                weight,
                capacity_bytes,
            } => {
                let id = id.unwrap_or_else(|| self.next_osd_id());
                let mut inc = self.next_inc();
                if self.state.map.osd(id).is_some_and(|o| o.up) {
                    // A new instance of an OSD the map still has up: the
                    // old one died without being noticed. Mark it down
                    // first, so every PG it is in starts a new interval
                    // (its peers re-peer and resend what the old process
                    // lost); the OSD boots again against the down state.
                    self.mark_down(&mut inc, id);
                    self.check(&inc)?;
                    return Ok((inc, None));
                }
                let auto_in = self
                    .state
                    .map
                    .osd(id)
                    .is_some_and(|o| !o.is_in && self.auto_out.contains(&id));
                let osd = match self.state.map.osd(id) {
                    Some(old) => OsdInfo {
                        host,
                        rack,
                        device_class,
                        up: true,
                        is_in: old.is_in || auto_in,
                        ..old.clone()
                    },
                    None => OsdInfo {
                        id,
                        host,
                        rack,
                        weight,
                        device_class,
                        up: true,
                        is_in: true,
                    },
                };
                inc.osd_upserts.push(osd);
                inc.endpoint_upserts.push((
                    id,
                    OsdEndpoint {
                        addr,
                        capacity_bytes,
                    },
                ));
                self.check(&inc)?;
                self.last_heartbeat_ms.insert(id, self.now_ms);
                self.down_since_ms.remove(&id);
                self.reports.remove(&id);
                if auto_in {
                    tracing::info!(osd = %id, "marking OSD in: it was out only for being down");
                    self.set_auto_out(id, false);
                }
                Ok((inc, Some(id)))
            }
            // An operator's choice: the OSD is no longer "out for being
            // down", whichever way it goes.
            MonCommand::OsdOut(id) => {
                let decision = self.set_osd(id, |o| o.is_in = false)?;
                self.set_auto_out(id, false);
                Ok(decision)
            }
            MonCommand::OsdIn(id) => {
                let decision = self.set_osd(id, |o| o.is_in = true)?;
                self.set_auto_out(id, false);
                Ok(decision)
            }
            MonCommand::OsdReweight(id, weight) => self.set_osd(id, |o| o.weight = weight),
            MonCommand::PoolCreate {
                name,
                pg_num,
                redundancy,
                failure_domain,
                device_class,
            } => {
                if self.state.map.pool_by_name(&name).is_some() {
                    return Err(MonError::PoolExists(name));
                }
                let pool = Pool {
                    id: self.state.map.next_pool_id(),
                    name,
                    pg_num,
                    pgp_num: pg_num,
                    redundancy: redundancy.into(),
                    failure_domain: failure_domain.into(),
                    device_class,
                };
                pool.validate()
                    .map_err(|e| MonError::InvalidPool(e.to_string()))?;
                Placement::new(&self.state.map)
                    .check_pool(&pool)
                    .map_err(|e| MonError::Unsatisfiable(e.to_string()))?;
                let mut inc = self.next_inc();
                inc.pool_upserts.push(pool);
                self.check(&inc)?;
                Ok((inc, None))
            }
            MonCommand::PoolDelete(name) => {
                if self.fs.uses_pool(&name) {
                    return Err(MonError::Fs(format!(
                        "pool {name:?} serves a file system; remove the file system first"
                    )));
                }
                let id = self.pool_named(&name)?.id;
                let mut inc = self.next_inc();
                inc.pool_removals.push(id);
                Ok((inc, None))
            }
            MonCommand::PoolSet {
                name,
                pg_num,
                pgp_num,
                min_size,
            } => {
                let pool = pool_set(self.pool_named(&name)?, pg_num, pgp_num, min_size)?;
                let mut inc = self.next_inc();
                if &pool != self.pool_named(&name)? {
                    inc.pool_upserts.push(pool);
                }
                self.check(&inc)?;
                Ok((inc, None))
            }
            MonCommand::ConfigSet { .. }
            | MonCommand::ConfigDump
            | MonCommand::FsCreate { .. }
            | MonCommand::FsRemove(_)
            | MonCommand::FsLs
            | MonCommand::MdsBeacon { .. } => Err(MonError::BadRequest(
                "settings and file systems are not map changes".into(),
            )),
            MonCommand::PgTemp { pg, acting } => {
                let pool = self
                    .state
                    .map
                    .pools
                    .iter()
                    .find(|p| p.id == pg.pool)
                    .ok_or_else(|| MonError::InvalidPool(format!("no pool {}", pg.pool.0)))?;
                if pg.seed >= pool.pg_num {
                    return Err(MonError::InvalidPool(format!("no PG {pg}")));
                }
                let mut inc = self.next_inc();
                if self.state.map.pg_temp.get(&pg) != acting.as_ref() {
                    inc.pg_temp.push((pg, acting));
                }
                self.check(&inc)?;
                Ok((inc, None))
            }
        }
    }

    fn next_osd_id(&self) -> OsdId {
        OsdId(self.state.map.osds.last().map_or(0, |o| o.id.0 + 1))
    }

    /// Changes one OSD's fields; a change that changes nothing makes no epoch.
    fn set_osd(
        &self,
        id: OsdId,
        change: impl FnOnce(&mut OsdInfo),
    ) -> Result<(Incremental, Option<OsdId>), MonError> {
        let old = self.osd(id)?;
        let mut osd = old.clone();
        change(&mut osd);
        let mut inc = self.next_inc();
        if &osd != old {
            inc.osd_upserts.push(osd);
        }
        self.check(&inc)?;
        Ok((inc, None))
    }

    fn heartbeat(&mut self, osd: OsdId) -> Result<Reply, MonError> {
        let up = self.osd(osd)?.up;
        // A down OSD must boot again to come up: its heartbeat alone may come
        // from a process that missed the maps in between.
        if up {
            self.last_heartbeat_ms.insert(osd, self.now_ms);
        }
        Ok(Reply::Heartbeat {
            epoch: self.epoch(),
            up,
            config_digest: config_digest(&self.settings),
        })
    }

    fn failure_report(
        &mut self,
        reporter: OsdId,
        target: OsdId,
    ) -> Result<(Incremental, Option<OsdId>), MonError> {
        let reporter_up = self.osd(reporter)?.up;
        let target_up = self.osd(target)?.up;
        let mut inc = self.next_inc();
        if !reporter_up || !target_up || reporter == target {
            return Ok((inc, None));
        }
        self.reports
            .entry(target)
            .or_default()
            .insert(reporter, self.now_ms);
        self.prune_reports();
        let reporters = self.reports.get(&target).map_or(0, BTreeMap::len);
        if reporters >= self.config.reporters_min.max(1) {
            tracing::info!(osd = %target, reporters, "marking OSD down on failure reports");
            self.mark_down(&mut inc, target);
        }
        Ok((inc, None))
    }

    /// Forgets reports older than the grace window and reports by OSDs that
    /// are no longer up.
    fn prune_reports(&mut self) {
        let window_start_ms = self.now_ms.saturating_sub(self.config.down_grace_ms);
        let map = &self.state.map;
        for by_reporter in self.reports.values_mut() {
            by_reporter.retain(|reporter, at_ms| {
                *at_ms >= window_start_ms && map.osd(*reporter).is_some_and(|o| o.up)
            });
        }
        self.reports
            .retain(|_, by_reporter| !by_reporter.is_empty());
    }

    fn mark_down(&mut self, inc: &mut Incremental, id: OsdId) {
        let Some(osd) = self.state.map.osd(id) else {
            return;
        };
        let mut osd = osd.clone();
        osd.up = false;
        inc.osd_upserts.push(osd);
        self.down_since_ms.insert(id, self.now_ms);
        self.reports.remove(&id);
        self.last_heartbeat_ms.remove(&id);
    }

    /// Marks silent OSDs down and long-down OSDs out, all in one epoch.
    fn tick(&mut self) -> Incremental {
        let now_ms = self.now_ms;
        self.prune_reports();
        let mut inc = self.next_inc();
        let osds = self.state.map.osds.clone();
        for osd in &osds {
            if osd.up {
                let last_ms = *self.last_heartbeat_ms.entry(osd.id).or_insert(now_ms);
                if now_ms.saturating_sub(last_ms) > self.config.down_grace_ms {
                    tracing::info!(osd = %osd.id, silent_ms = now_ms - last_ms, "marking OSD down: no heartbeat");
                    self.mark_down(&mut inc, osd.id);
                }
            } else if osd.is_in {
                let since_ms = *self.down_since_ms.entry(osd.id).or_insert(now_ms);
                if now_ms.saturating_sub(since_ms) > self.config.down_out_ms {
                    tracing::info!(osd = %osd.id, "marking OSD out: down too long");
                    inc.osd_upserts.push(OsdInfo {
                        is_in: false,
                        ..osd.clone()
                    });
                    self.set_auto_out(osd.id, true);
                }
            }
        }
        inc
    }
}

/// The pool after a `PoolSet`, or why not.
fn pool_set(
    pool: &Pool,
    pg_num: Option<u32>,
    pgp_num: Option<u32>,
    min_size: Option<u32>,
) -> Result<Pool, MonError> {
    let fail = |why: String| {
        Err(MonError::InvalidPool(format!(
            "pool {:?}: {why}",
            pool.name
        )))
    };
    let mut next = pool.clone();
    if let Some(pg_num) = pg_num {
        if pg_num < pool.pg_num {
            return fail(format!("pg_num only grows ({} -> {pg_num})", pool.pg_num));
        }
        next.pg_num = pg_num;
    }
    if let Some(pgp_num) = pgp_num {
        if pgp_num < pool.pgp_num {
            return fail(format!(
                "pgp_num only grows ({} -> {pgp_num})",
                pool.pgp_num
            ));
        }
        next.pgp_num = pgp_num;
    }
    if next.pgp_num > next.pg_num {
        return fail(format!(
            "pgp_num {} exceeds pg_num {}",
            next.pgp_num, next.pg_num
        ));
    }
    if let Some(min_size) = min_size {
        match &mut next.redundancy {
            Redundancy::Replicated { min_size: m, .. }
            | Redundancy::Erasure { min_size: m, .. } => {
                *m = min_size;
            }
        }
    }
    next.validate()
        .map_err(|e| MonError::InvalidPool(e.to_string()))?;
    Ok(next)
}

/// A digest of the explicit settings (FNV-1a over names and values), so an
/// OSD can tell its copy is current without fetching it.
#[must_use]
pub fn config_digest(settings: &Settings) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, value) in settings.explicit() {
        for byte in name.bytes().chain([0]).chain(value.bytes()).chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

/// The effects of a file-system change: its reply, and what to store.
fn fs_effects(result: Result<(Reply, crate::fsmap::Persist), MonError>) -> Effects {
    match result {
        Ok((reply, persist_fs)) => Effects {
            reply: Some(Ok(reply)),
            persist_fs,
            ..Effects::default()
        },
        Err(error) => Effects {
            reply: Some(Err(error)),
            ..Effects::default()
        },
    }
}

//! The simulator's monitor shell around [`MapService`]: turns messages
//! into service events with the virtual time, "persists" each new epoch
//! (keeps its incremental) before replying, and pushes every new epoch to
//! the OSDs and clients, as the daemon answers its subscribers.
//!
//! A restart rebuilds the service from what was persisted (the map and its
//! incrementals), losing its in-memory failure-detection state, as the
//! daemon does when it restarts from its redb store.

use crate::net::{MapUpdate, Msg, Node};
use cairn_mon::limits::INCREMENTALS_KEPT_MAX;
use cairn_mon::{Event, MapService, ServiceConfig};
use cairn_placement::Weight;
use cairn_proto::limits::INCREMENTALS_PER_REPLY_MAX;
use cairn_proto::map::{Incremental, MonState};
use cairn_proto::mon::MonCommand;
use cairn_types::{Epoch, OsdId};
use std::collections::{BTreeSet, VecDeque};

/// The monitor.
#[derive(Debug)]
pub struct SimMon {
    pub service: MapService,
    config: ServiceConfig,
    /// Incrementals kept at least (the daemon keeps 500).
    history_min: usize,
    /// What the daemon would have on disk: the map at the start of the
    /// history and the incrementals since.
    persisted_base: MonState,
    persisted: VecDeque<Incremental>,
    /// Everyone who asked for maps (the daemon's subscribers).
    subscribers: BTreeSet<Node>,
}

impl SimMon {
    #[must_use]
    pub fn new(config: ServiceConfig, history_min: usize) -> SimMon {
        let genesis = MonState {
            map: cairn_placement::ClusterMap {
                epoch: Epoch(1),
                ..cairn_placement::ClusterMap::default()
            },
            ..MonState::default()
        };
        let mut service = MapService::new(config.clone(), genesis.clone(), Vec::new());
        service.set_history_bounds(history_min, INCREMENTALS_KEPT_MAX);
        SimMon {
            service,
            config,
            history_min,
            persisted_base: genesis,
            persisted: VecDeque::new(),
            subscribers: BTreeSet::new(),
        }
    }

    /// Restarts from the persisted state (which PGs were active is lost:
    /// the history is kept whole until they report again).
    pub fn restart(&mut self) {
        let history: Vec<Incremental> = self.persisted.iter().cloned().collect();
        self.service = MapService::new(self.config.clone(), self.persisted_base.clone(), history);
        self.service
            .set_history_bounds(self.history_min, INCREMENTALS_KEPT_MAX);
    }

    #[must_use]
    pub fn epoch(&self) -> Epoch {
        self.service.epoch()
    }

    /// Handles one event; returns the messages to send.
    pub fn handle_event(&mut self, event: Event) -> (Option<Msg>, Vec<(Node, Msg)>) {
        let effects = self.service.handle(event);
        let mut sends = Vec::new();
        if let Some((_, inc)) = effects.persist {
            self.persisted.push_back(inc.clone());
            let keep_from = self.service.history_from();
            while self.persisted.front().is_some_and(|i| i.epoch < keep_from) {
                if let Some(old) = self.persisted.pop_front() {
                    self.persisted_base.apply(&old);
                }
            }
            for node in &self.subscribers {
                let update = MapUpdate::Incrementals(vec![inc.clone()]);
                sends.push((*node, Msg::Map(update)));
            }
        }
        let reply = match effects.reply {
            Some(Ok(cairn_proto::mon::Reply::Heartbeat { up, .. })) => {
                Some(Msg::HeartbeatReply { up })
            }
            _ => None,
        };
        (reply, sends)
    }

    /// Handles a message from `from` at `now_ms`.
    pub fn deliver(&mut self, now_ms: u64, from: Node, msg: Msg) -> Vec<(Node, Msg)> {
        if !matches!(from, Node::Mon) {
            self.subscribers.insert(from);
        }
        let event = match (from, msg) {
            (Node::Osd(osd), Msg::Boot) => {
                let was_up = self.service.state().map.osd(osd).is_some_and(|o| o.up);
                let (_, mut sends) = self.handle_event(Event::Command(boot_command(osd)));
                sends.push((from, if was_up { Msg::BootAgain } else { Msg::Booted }));
                return sends;
            }
            (Node::Osd(osd), Msg::Heartbeat) => Event::Heartbeat { osd, now_ms },
            (Node::Osd(reporter), Msg::FailureReport { target }) => Event::FailureReport {
                reporter,
                target,
                now_ms,
            },
            (Node::Osd(_), Msg::PgsClean(reports)) => Event::PgsClean { reports },
            (Node::Osd(_), Msg::PgTemp { pg, acting }) => {
                Event::Command(MonCommand::PgTemp { pg, acting })
            }
            (_, Msg::GetMap { have }) => return vec![(from, Msg::Map(self.update_since(have)))],
            _ => return Vec::new(),
        };
        let (reply, mut sends) = self.handle_event(event);
        if let Some(reply) = reply {
            sends.push((from, reply));
        }
        sends
    }

    /// The map changes after `have`: incrementals if held (a page of them
    /// when far behind, as the daemon sends), else the oldest map kept.
    #[must_use]
    pub fn update_since(&self, have: Epoch) -> MapUpdate {
        match self.service.incrementals_since(have) {
            Some(mut incrementals) => {
                incrementals.truncate(INCREMENTALS_PER_REPLY_MAX);
                MapUpdate::Incrementals(incrementals)
            }
            _ => {
                let state = self.service.base();
                MapUpdate::Full {
                    map: state.map.clone(),
                    endpoints: state
                        .endpoints
                        .iter()
                        .map(|(id, e)| (*id, e.clone()))
                        .collect(),
                }
            }
        }
    }
}

/// What an OSD's boot says: one host per OSD, all in one rack.
#[must_use]
pub fn boot_command(osd: OsdId) -> MonCommand {
    MonCommand::OsdBoot {
        id: Some(osd),
        addr: format!("sim:{}", osd.0),
        host: format!("host{}", osd.0),
        rack: "rack0".into(),
        device_class: "hdd".into(),
        weight: Weight::ONE,
        capacity_bytes: 1 << 40,
    }
}

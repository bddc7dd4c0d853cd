//! The simulator's monitor shell around [`MapService`]: turns messages
//! into service events with the virtual time, "persists" each new epoch
//! (keeps its incremental) before replying, and pushes every new epoch to
//! the OSDs and clients, as the daemon answers its subscribers.
//!
//! A restart rebuilds the service from what was persisted (the map and its
//! incrementals), losing its in-memory failure-detection state, as the
//! daemon does when it restarts from its redb store.

use crate::net::{MapUpdate, Msg, Node};
use cairn_mon::daemon::clean_pgs;
use cairn_mon::limits::INCREMENTALS_KEPT_MAX;
use cairn_mon::{Event, MapService, ServiceConfig};
use cairn_placement::Weight;
use cairn_proto::limits::INCREMENTALS_PER_REPLY_MAX;
use cairn_proto::map::{Incremental, MonState};
use cairn_proto::mon::{FailureReport, Heartbeat, MonCommand};
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
        let reply = effects.reply.map(Msg::MonReply);
        (reply, sends)
    }

    /// Handles a message from `from` at `now_ms`, as the daemon's
    /// `handle_frame` does. Commands and heartbeats are answered; failure
    /// reports and `pg_temp` requests too in the daemon, but their
    /// senders ignore the answer, so the simulator sends none.
    pub fn deliver(&mut self, now_ms: u64, from: Node, msg: Msg) -> Vec<(Node, Msg)> {
        if !matches!(from, Node::Mon) {
            self.subscribers.insert(from);
        }
        let (answer, mut sends) = match msg {
            Msg::Command(command) => {
                let answered = matches!(command, MonCommand::OsdBoot { .. });
                let (reply, sends) = self.handle_event(Event::Command(command));
                (reply.filter(|_| answered), sends)
            }
            Msg::Heartbeat(Heartbeat { osd, stats }) => {
                let reports = clean_pgs(&stats);
                let mut sends = Vec::new();
                if !reports.is_empty() {
                    sends = self.handle_event(Event::PgsClean { reports }).1;
                }
                let (reply, more) = self.handle_event(Event::Heartbeat { osd, now_ms });
                sends.extend(more);
                (reply, sends)
            }
            Msg::FailureReport(FailureReport { reporter, target }) => {
                let event = Event::FailureReport {
                    reporter,
                    target,
                    now_ms,
                };
                (None, self.handle_event(event).1)
            }
            Msg::GetMap { have } => return vec![(from, Msg::Map(self.update_since(have)))],
            _ => return Vec::new(),
        };
        if let Some(answer) = answer {
            sends.push((from, answer));
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

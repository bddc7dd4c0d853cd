//! The map service's rules, driven purely (no I/O, virtual time): each
//! command makes exactly one epoch, bad pools are named errors, failure
//! detection marks down/out as specified, and incrementals replay to the
//! same map.

use cairn_mon::{Effects, Event, MapService, ServiceConfig};
use cairn_placement::{ClusterMap, Weight};
use cairn_proto::map::MonState;
use cairn_proto::mon::{FailureDomainSpec, RedundancySpec};
use cairn_proto::mon::{MonCommand, MonError, Reply};
use cairn_types::{Epoch, OsdId};
use proptest::prelude::*;

const GRACE_MS: u64 = 1_000;
const OUT_MS: u64 = 5_000;

fn config() -> ServiceConfig {
    ServiceConfig {
        down_grace_ms: GRACE_MS,
        down_out_ms: OUT_MS,
        reporters_min: 2,
    }
}

fn genesis() -> MonState {
    MonState {
        map: ClusterMap {
            epoch: Epoch(1),
            ..ClusterMap::default()
        },
        ..MonState::default()
    }
}

fn service() -> MapService {
    MapService::new(config(), genesis(), Vec::new())
}

fn boot(host: u32) -> MonCommand {
    MonCommand::OsdBoot {
        id: None,
        addr: format!("127.0.0.1:{}", 7000 + host),
        host: format!("h{host}"),
        rack: "r0".into(),
        device_class: "hdd".into(),
        weight: Weight::ONE,
        capacity_bytes: 1 << 30,
    }
}

/// The boot of an existing OSD, `osd.{host}` on host `h{host}`.
fn reboot(host: u32) -> MonCommand {
    let mut command = boot(host);
    if let MonCommand::OsdBoot { id, .. } = &mut command {
        *id = Some(OsdId(host));
    }
    command
}

fn pool(name: &str, size: u32) -> MonCommand {
    MonCommand::PoolCreate {
        name: name.into(),
        pg_num: 8,
        redundancy: RedundancySpec::Replicated { size, min_size: 1 },
        failure_domain: FailureDomainSpec::Host,
        device_class: None,
    }
}

fn run(service: &mut MapService, command: MonCommand) -> Effects {
    service.handle(Event::Command(command))
}

fn ok(effects: &Effects) -> &Reply {
    match &effects.reply {
        Some(Ok(reply)) => reply,
        other => panic!("expected success, got {other:?}"),
    }
}

fn err(effects: Effects) -> MonError {
    match effects.reply {
        Some(Err(error)) => {
            assert!(effects.persist.is_none() && effects.publish.is_none());
            error
        }
        other => panic!("expected an error, got {other:?}"),
    }
}

/// Asserts `effects` made exactly the next epoch after `before`.
fn one_epoch(service: &MapService, before: Epoch, effects: &Effects) {
    assert_eq!(service.epoch(), before.next());
    let (epoch, inc) = effects.persist.as_ref().expect("persists");
    assert_eq!(*epoch, before.next());
    assert_eq!(inc.epoch, before.next());
    assert_eq!(effects.publish, Some(before.next()));
}

fn cluster(hosts: u32) -> MapService {
    let mut service = service();
    for host in 0..hosts {
        let effects = run(&mut service, boot(host));
        assert!(matches!(ok(&effects), Reply::OsdBooted { osd, .. } if *osd == OsdId(host)));
    }
    service
}

#[test]
fn every_command_makes_exactly_one_epoch() {
    let mut service = cluster(3);
    assert_eq!(service.epoch(), Epoch(4));
    let commands = [
        pool("data", 3),
        MonCommand::OsdOut(OsdId(1)),
        MonCommand::OsdIn(OsdId(1)),
        MonCommand::OsdReweight(OsdId(2), Weight(0x2_0000)),
        MonCommand::PoolSet {
            name: "data".into(),
            pg_num: Some(16),
            pgp_num: Some(12),
            min_size: Some(2),
        },
        MonCommand::PoolDelete("data".into()),
        boot(0),
    ];
    for command in commands {
        let before = service.epoch();
        let effects = run(&mut service, command.clone());
        ok(&effects);
        one_epoch(&service, before, &effects);
    }
    let map = &service.state().map;
    assert!(map.pools.is_empty());
    assert_eq!(map.osd(OsdId(2)).expect("osd").weight, Weight(0x2_0000));
    // A no-op makes no epoch.
    let before = service.epoch();
    let effects = run(&mut service, MonCommand::OsdIn(OsdId(1)));
    assert_eq!(ok(&effects), &Reply::Done { epoch: before });
    assert!(effects.persist.is_none() && effects.publish.is_none());
}

#[test]
fn bad_pools_are_named_errors() {
    let mut service = cluster(2);
    ok(&run(&mut service, pool("data", 2)));
    assert_eq!(
        err(run(&mut service, pool("data", 2))),
        MonError::PoolExists("data".into())
    );
    assert!(
        matches!(err(run(&mut service, pool("big", 3))), MonError::Unsatisfiable(why) if why.contains("needs 3 distinct hosts"))
    );
    assert!(matches!(
        err(run(&mut service, pool("bad name", 1))),
        MonError::InvalidPool(_)
    ));
    assert!(matches!(
        err(run(&mut service, pool("zero", 0))),
        MonError::InvalidPool(_)
    ));
    assert_eq!(
        err(run(&mut service, MonCommand::PoolDelete("nope".into()))),
        MonError::NoPool("nope".into())
    );
    let shrink = MonCommand::PoolSet {
        name: "data".into(),
        pg_num: Some(4),
        pgp_num: None,
        min_size: None,
    };
    assert!(
        matches!(err(run(&mut service, shrink)), MonError::InvalidPool(why) if why.contains("only grows"))
    );
    let pgp_over = MonCommand::PoolSet {
        name: "data".into(),
        pg_num: None,
        pgp_num: Some(9),
        min_size: None,
    };
    assert!(
        matches!(err(run(&mut service, pgp_over)), MonError::InvalidPool(why) if why.contains("exceeds pg_num"))
    );
    assert_eq!(
        err(run(&mut service, MonCommand::OsdOut(OsdId(9)))),
        MonError::UnknownOsd(OsdId(9))
    );
    let mut bad_host = boot(5);
    if let MonCommand::OsdBoot { host, .. } = &mut bad_host {
        *host = String::new();
    }
    assert!(matches!(
        err(run(&mut service, bad_host)),
        MonError::InvalidMap(_)
    ));
}

fn tick(service: &mut MapService, now_ms: u64) -> Effects {
    service.handle(Event::Tick { now_ms })
}

fn heartbeat(service: &mut MapService, osd: u32, now_ms: u64) -> Reply {
    let effects = service.handle(Event::Heartbeat {
        osd: OsdId(osd),
        now_ms,
    });
    assert!(effects.persist.is_none());
    ok(&effects).clone()
}

fn is_up(service: &MapService, osd: u32) -> bool {
    service.state().map.osd(OsdId(osd)).expect("osd").up
}

fn is_in(service: &MapService, osd: u32) -> bool {
    service.state().map.osd(OsdId(osd)).expect("osd").is_in
}

#[test]
fn silent_osd_goes_down_after_grace_then_out() {
    let mut service = cluster(2);
    tick(&mut service, 0);
    for now_ms in (100..=GRACE_MS).step_by(100) {
        heartbeat(&mut service, 0, now_ms);
        heartbeat(&mut service, 1, now_ms);
        assert!(tick(&mut service, now_ms).persist.is_none());
    }
    // osd.1 falls silent.
    let mut now_ms = GRACE_MS;
    let down_at_ms = loop {
        now_ms += 100;
        heartbeat(&mut service, 0, now_ms);
        let before = service.epoch();
        let effects = tick(&mut service, now_ms);
        if effects.persist.is_some() {
            one_epoch(&service, before, &effects);
            break now_ms;
        }
    };
    assert!(down_at_ms > 2 * GRACE_MS && down_at_ms <= 2 * GRACE_MS + 100);
    assert!(!is_up(&service, 1) && is_in(&service, 1) && is_up(&service, 0));
    // Its heartbeat alone does not bring it back.
    assert_eq!(
        heartbeat(&mut service, 1, now_ms + 10),
        Reply::Heartbeat {
            epoch: service.epoch(),
            up: false,
            config_digest: cairn_mon::service::config_digest(service.settings()),
        }
    );
    assert!(!is_up(&service, 1));
    // Out only after down_out.
    let out_at_ms = loop {
        now_ms += 100;
        heartbeat(&mut service, 0, now_ms);
        if tick(&mut service, now_ms).persist.is_some() {
            break now_ms;
        }
    };
    assert!(out_at_ms > down_at_ms + OUT_MS && out_at_ms <= down_at_ms + OUT_MS + 100);
    assert!(!is_in(&service, 1) && is_up(&service, 0));
    assert!(service.auto_out().contains(&OsdId(1)));
    // A boot brings it up and, as the monitor took it out, in again.
    let effects = run(&mut service, reboot(1));
    ok(&effects);
    assert!(is_up(&service, 1) && is_in(&service, 1));
    assert_eq!(
        effects.persist_auto_out,
        Some(Vec::new()),
        "the set is stored"
    );
    // Taken out by an operator, it stays out across a restart.
    ok(&run(&mut service, MonCommand::OsdOut(OsdId(1))));
    let mut now_ms = out_at_ms;
    let down = loop {
        now_ms += 100;
        heartbeat(&mut service, 0, now_ms);
        tick(&mut service, now_ms);
        if !is_up(&service, 1) {
            break now_ms;
        }
    };
    for later in (down..down + 2 * OUT_MS).step_by(500) {
        heartbeat(&mut service, 0, later);
        tick(&mut service, later);
    }
    assert!(
        service.auto_out().is_empty(),
        "out by hand, not for being down"
    );
    ok(&run(&mut service, reboot(1)));
    assert!(is_up(&service, 1) && !is_in(&service, 1));
}

#[test]
fn a_boot_of_an_osd_still_up_marks_it_down_first() {
    let mut service = cluster(2);
    let before = service.epoch();
    assert!(is_up(&service, 1));
    // osd.1 restarted before anyone noticed: its boot finds it up.
    let effects = run(&mut service, reboot(1));
    one_epoch(&service, before, &effects);
    assert!(matches!(ok(&effects), Reply::Done { .. }), "boot again");
    assert!(!is_up(&service, 1), "the old instance is marked down");
    // The second boot finds it down and brings it up, a further epoch.
    let before = service.epoch();
    let effects = run(&mut service, reboot(1));
    one_epoch(&service, before, &effects);
    assert!(matches!(ok(&effects), Reply::OsdBooted { .. }));
    assert!(is_up(&service, 1));
}

#[test]
fn settings_are_validated_persisted_and_change_the_down_out_interval() {
    let mut service = cluster(2);
    let epoch = service.epoch();
    let digest = |s: &MapService| cairn_mon::service::config_digest(s.settings());
    let before = digest(&service);
    let set = |name: &str, value: Option<&str>| MonCommand::ConfigSet {
        name: name.into(),
        value: value.map(str::to_owned),
    };
    // Bad names and values are refused and change nothing.
    for bad in [
        set("no_such_setting", Some("1")),
        set("osd_recovery_max_active", Some("0")),
        set("osd_scrub_auto_repair", Some("perhaps")),
        set("no_such_setting", None),
    ] {
        let effects = run(&mut service, bad);
        assert!(effects.persist_config.is_none());
        assert!(matches!(effects.reply, Some(Err(MonError::BadRequest(_)))));
    }
    assert_eq!(digest(&service), before);
    // A good one is persisted, changes the digest, and not the map.
    let effects = run(&mut service, set("mon_osd_down_out_interval", Some("2")));
    assert_eq!(
        effects.persist_config,
        Some(vec![("mon_osd_down_out_interval".into(), "2".into())])
    );
    assert!(effects.persist.is_none());
    assert_eq!(service.epoch(), epoch);
    assert_ne!(digest(&service), before);
    // The monitor's own knob follows: out after 2 s, not the flag's 10 s.
    let mut now_ms = 0;
    let down_at = loop {
        now_ms += 100;
        heartbeat(&mut service, 0, now_ms);
        if !is_up(&service, 1) {
            break now_ms;
        }
        tick(&mut service, now_ms);
    };
    while is_in(&service, 1) {
        now_ms += 100;
        heartbeat(&mut service, 0, now_ms);
        tick(&mut service, now_ms);
        assert!(now_ms < down_at + 5_000, "not out within the set interval");
    }
    assert!(now_ms >= down_at + 2_000);
    // Removing it goes back to the default and persists the empty set.
    let effects = run(&mut service, set("mon_osd_down_out_interval", None));
    assert_eq!(effects.persist_config, Some(vec![]));
    assert_eq!(digest(&service), before);
    let Some(Ok(Reply::Config { entries, digest: d })) =
        run(&mut service, MonCommand::ConfigDump).reply
    else {
        panic!("config dump");
    };
    assert!(entries.is_empty());
    assert_eq!(d, before);
}

fn report(service: &mut MapService, reporter: u32, target: u32, now_ms: u64) -> Effects {
    service.handle(Event::FailureReport {
        reporter: OsdId(reporter),
        target: OsdId(target),
        now_ms,
    })
}

#[test]
fn one_reporter_cannot_mark_down_two_can() {
    let mut service = cluster(4);
    for _ in 0..5 {
        let effects = report(&mut service, 0, 3, 10);
        ok(&effects);
        assert!(effects.persist.is_none());
    }
    assert!(is_up(&service, 3));
    // A second reporter, but the first one's report has aged out.
    let effects = report(&mut service, 1, 3, 10 + GRACE_MS + 1);
    assert!(effects.persist.is_none() && is_up(&service, 3));
    // Two distinct reporters within the window.
    let before = service.epoch();
    let effects = report(&mut service, 2, 3, 20 + GRACE_MS);
    one_epoch(&service, before, &effects);
    assert!(!is_up(&service, 3));
    // Reports about a down OSD change nothing.
    assert!(report(&mut service, 0, 3, 30 + GRACE_MS).persist.is_none());
}

#[test]
fn a_down_reporter_does_not_count() {
    let mut service = cluster(4);
    ok(&run(&mut service, boot(9)));
    report(&mut service, 0, 4, 1);
    report(&mut service, 1, 4, 1);
    assert!(!is_up(&service, 4));
    report(&mut service, 4, 2, 2);
    report(&mut service, 0, 2, 2);
    assert!(is_up(&service, 2), "osd.4 is down; its report is void");
}

fn command_strategy() -> impl Strategy<Value = Event> {
    let osd = 0u32..6;
    prop_oneof![
        (0u32..6).prop_map(|h| Event::Command(boot(h))),
        osd.clone()
            .prop_map(|o| Event::Command(MonCommand::OsdOut(OsdId(o)))),
        osd.clone()
            .prop_map(|o| Event::Command(MonCommand::OsdIn(OsdId(o)))),
        (osd.clone(), 0u32..0x4_0000)
            .prop_map(|(o, w)| Event::Command(MonCommand::OsdReweight(OsdId(o), Weight(w)))),
        (0u32..3, 1u32..4).prop_map(|(p, size)| Event::Command(pool(&format!("p{p}"), size))),
        (0u32..3).prop_map(|p| Event::Command(MonCommand::PoolDelete(format!("p{p}")))),
        (0u32..3, 8u32..40).prop_map(|(p, n)| Event::Command(MonCommand::PoolSet {
            name: format!("p{p}"),
            pg_num: Some(n),
            pgp_num: Some(n / 2 + 4),
            min_size: None,
        })),
        (osd.clone(), 0u64..100_000).prop_map(|(o, t)| Event::Heartbeat {
            osd: OsdId(o),
            now_ms: t
        }),
        (osd.clone(), osd, 0u64..100_000).prop_map(|(r, t, n)| Event::FailureReport {
            reporter: OsdId(r),
            target: OsdId(t),
            now_ms: n
        }),
        (0u64..100_000).prop_map(|now_ms| Event::Tick { now_ms }),
    ]
}

proptest! {
    /// Replaying every persisted incremental onto the epoch-1 map gives the
    /// final map, and each one is exactly the next epoch.
    #[test]
    fn incrementals_replay_to_the_final_map(events in proptest::collection::vec(command_strategy(), 1..80)) {
        let mut service = service();
        let mut replayed = genesis();
        for event in events {
            let before = service.epoch();
            let effects = service.handle(event);
            match &effects.persist {
                Some((epoch, inc)) => {
                    prop_assert_eq!(*epoch, before.next());
                    // Through the on-disk form, as a restart would.
                    let inc = cairn_proto::map::Incremental::decode(&inc.encode().expect("encode")).expect("decode");
                    replayed.apply(&inc);
                }
                None => prop_assert_eq!(service.epoch(), before),
            }
            prop_assert!(service.state().map.validate().is_ok());
        }
        prop_assert_eq!(&replayed, service.state());
        let held = service.incrementals_since(Epoch(1)).expect("all held");
        let mut again = genesis();
        for inc in &held {
            again.apply(inc);
        }
        prop_assert_eq!(&again, service.state());
    }
}

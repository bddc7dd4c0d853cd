//! Golden bytes of every message that crosses a process boundary: one
//! sample per message and per enum variant, its kind and its postcard body
//! as hex. Kinds and bodies are frozen once a release speaks them: a change
//! here is a wire-format change, to be made on purpose (with a version
//! where peers must tell old from new), never as a side effect of moving or
//! renaming types. On a mismatch the test prints the whole table as it now
//! is, so an intended change is a reviewed copy and paste.

use bytes::Bytes;
use cairn_placement::Weight;
use cairn_proto::map::OsdEndpoint;
use cairn_proto::mds::{
    Attr, Caller, DirEntry, FsStat, Layout, LockInfo, LockKind, MdsAnswer, MdsError, MdsOp,
    MdsPoll, MdsPollReply, MdsReply, MdsRequest, SetAttr, SetTime, Time,
};
use cairn_proto::mds::{BatchOp, BatchResult, Inval, MdsStatus, Recall, SessionInfo, SlowRequest};
use cairn_proto::mon::{
    CommandRequest, FailureDomainSpec, FailureReport, GetMap, GetStats, Heartbeat, IoRates,
    MapReply, MapUpdate, MonCommand, MonError, MonReply, OsdStats, OsdStatsReport, PgStat, PgUsage,
    RedundancySpec, Reply, StatsReply, Subscribe,
};
use cairn_proto::mon::{FsStatus, MdsInfo, MdsRole};
use cairn_proto::osd::{
    ClientOp, ClientReply, ClientShardRead, ClientShardReadReply, DirectPart, GuardWire, OpError,
    OpKind, OpOutput, PgAction, PgCommand, PgCommandReply, ReqIdWire, VersionWire,
};
use cairn_proto::peer::{
    HELLO_VERSION, InconsistencyRecord, KeyWire, LeaseReport, ObjectSignalKind, OpWire, PeerHello,
    PeerHelloReply, PeerMsg, PeerPing, PeerPong, ScrubEntryWire, ShardRead, ShardReadError,
    ShardReadOk, ShardReadReply, SignalKind,
};
use cairn_types::{Epoch, OsdId, PgId, PoolId};
use cairn_wire::{Frame, Message};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_bytes::ByteBuf;
use std::fmt::Debug;
use std::fmt::Write as _;

/// One sample: its label, kind and body.
struct Sample {
    label: String,
    kind: u16,
    body: Vec<u8>,
}

/// Encodes `msg` as a request frame, checks it decodes back to itself, and
/// records it.
fn sample<M>(out: &mut Vec<Sample>, label: &str, msg: &M)
where
    M: Message + Serialize + DeserializeOwned + PartialEq + Debug,
{
    let frame = Frame::request(msg, Bytes::new()).expect("encodes");
    let back: M = frame.decode_body().expect("decodes");
    assert_eq!(&back, msg, "{label} round trip");
    out.push(Sample {
        label: label.to_owned(),
        kind: frame.kind,
        body: frame.body.to_vec(),
    });
}

fn b(s: &str) -> ByteBuf {
    ByteBuf::from(s.as_bytes().to_vec())
}

fn pg() -> PgId {
    PgId {
        pool: PoolId(3),
        seed: 0x2a,
    }
}

fn req() -> ReqIdWire {
    ReqIdWire {
        client: 0x1234_5678,
        tid: 9,
    }
}

fn v(epoch: u64, seq: u64) -> VersionWire {
    VersionWire { epoch, seq }
}

fn mon_samples(out: &mut Vec<Sample>) {
    let commands = [
        (
            "OsdBoot",
            MonCommand::OsdBoot {
                id: Some(OsdId(4)),
                addr: "127.0.0.2:6800".into(),
                host: "h1".into(),
                rack: "r1".into(),
                device_class: "ssd".into(),
                weight: Weight::ONE,
                capacity_bytes: 1 << 40,
            },
        ),
        ("OsdOut", MonCommand::OsdOut(OsdId(4))),
        ("OsdIn", MonCommand::OsdIn(OsdId(4))),
        (
            "OsdReweight",
            MonCommand::OsdReweight(OsdId(4), Weight(0x8000)),
        ),
        (
            "PoolCreate",
            MonCommand::PoolCreate {
                name: "data".into(),
                pg_num: 64,
                redundancy: RedundancySpec::Replicated {
                    size: 3,
                    min_size: 2,
                },
                failure_domain: FailureDomainSpec::Host,
                device_class: Some("hdd".into()),
            },
        ),
        (
            "PoolCreate/ec",
            MonCommand::PoolCreate {
                name: "ec".into(),
                pg_num: 32,
                redundancy: RedundancySpec::Erasure {
                    k: 4,
                    m: 2,
                    min_size: None,
                    stripe_unit: Some(65536),
                },
                failure_domain: FailureDomainSpec::Rack,
                device_class: None,
            },
        ),
        ("PoolDelete", MonCommand::PoolDelete("data".into())),
        (
            "PoolSet",
            MonCommand::PoolSet {
                name: "data".into(),
                pg_num: Some(128),
                pgp_num: None,
                min_size: Some(1),
            },
        ),
        (
            "PgTemp",
            MonCommand::PgTemp {
                pg: pg(),
                acting: Some(vec![OsdId(1), OsdId(2)]),
            },
        ),
        (
            "ConfigSet",
            MonCommand::ConfigSet {
                name: "osd_recovery_max_active".into(),
                value: Some("3".into()),
            },
        ),
        ("ConfigDump", MonCommand::ConfigDump),
    ];
    for (label, command) in commands {
        sample(
            out,
            &format!("CommandRequest/{label}"),
            &CommandRequest(command),
        );
    }
    let replies = [
        ("Done", Ok(Reply::Done { epoch: Epoch(7) })),
        (
            "OsdBooted",
            Ok(Reply::OsdBooted {
                osd: OsdId(4),
                epoch: Epoch(8),
            }),
        ),
        (
            "Heartbeat",
            Ok(Reply::Heartbeat {
                epoch: Epoch(9),
                up: true,
                config_digest: 0xabcd,
            }),
        ),
        (
            "Config",
            Ok(Reply::Config {
                digest: 5,
                entries: vec![("a".into(), "b".into())],
            }),
        ),
        ("UnknownOsd", Err(MonError::UnknownOsd(OsdId(9)))),
        ("PoolExists", Err(MonError::PoolExists("p".into()))),
        ("NoPool", Err(MonError::NoPool("p".into()))),
        ("InvalidPool", Err(MonError::InvalidPool("x".into()))),
        ("Unsatisfiable", Err(MonError::Unsatisfiable("x".into()))),
        ("InvalidMap", Err(MonError::InvalidMap("x".into()))),
        ("BadRequest", Err(MonError::BadRequest("x".into()))),
        ("Store", Err(MonError::Store("x".into()))),
        ("Wire", Err(MonError::Wire("x".into()))),
        ("Io", Err(MonError::Io("x".into()))),
        ("ShuttingDown", Err(MonError::ShuttingDown)),
    ];
    for (label, reply) in replies {
        sample(out, &format!("MonReply/{label}"), &MonReply(reply));
    }
    let stats = OsdStats {
        total_bytes: 1000,
        used_bytes: 400,
        available_bytes: 600,
        stored_bytes: 300,
        full: false,
        nearfull: true,
        client_read_ops: 1,
        client_read_bytes: 2,
        client_write_ops: 3,
        client_write_bytes: 4,
        pg_states: vec![("active+clean".into(), 2)],
        pgs: vec![PgStat {
            pg: pg(),
            state: "active+clean".into(),
            up: vec![OsdId(1), OsdId(2)],
            acting: vec![OsdId(1), OsdId(2)],
            primary: Some(OsdId(1)),
            interval_epoch: 5,
            last_update: "5'3".into(),
            log_entries: 3,
            missing_objects: 0,
            backfill_targets: 0,
            backfill_permille: Some(500),
            blocked: None,
            scrubbing: Some("scrub".into()),
            last_scrub_secs: 100,
            last_deep_scrub_secs: 50,
            inconsistent_objects: 1,
            inconsistent: vec!["o: data".into()],
        }],
        recovered_objects: 5,
        recovered_bytes: 6,
        pgs_held: 7,
        map_epoch: 8,
        store_error: None,
        pg_usage: vec![PgUsage {
            pg: pg(),
            position: Some(1),
            objects: 2,
            bytes: 8192,
            allocated_bytes: 12288,
        }],
    };
    sample(
        out,
        "Heartbeat",
        &Heartbeat {
            osd: OsdId(1),
            stats: stats.clone(),
        },
    );
    sample(
        out,
        "FailureReport",
        &FailureReport {
            reporter: OsdId(1),
            target: OsdId(2),
        },
    );
    sample(
        out,
        "GetMap",
        &GetMap {
            have_epoch: Epoch(12),
        },
    );
    sample(
        out,
        "Subscribe",
        &Subscribe {
            have_epoch: Epoch(7),
            wait_ms: 30_000,
        },
    );
    sample(out, "GetStats", &GetStats);
    sample(
        out,
        "StatsReply/Ok",
        &StatsReply(Ok(vec![OsdStatsReport {
            osd: OsdId(1),
            stats,
            age_ms: 250,
            rates: IoRates {
                read_ops_per_s: 1.5,
                read_bytes_per_s: 2.0,
                write_ops_per_s: 0.0,
                write_bytes_per_s: 1e6,
                recovery_objects_per_s: 0.25,
                recovery_bytes_per_s: 0.5,
            },
        }])),
    );
    sample(
        out,
        "StatsReply/Err",
        &StatsReply(Err(MonError::ShuttingDown)),
    );
    sample(
        out,
        "MapReply/Full",
        &MapReply {
            fsid: 0xfeed_f00d,
            epoch: Epoch(3),
            update: MapUpdate::Full {
                endpoints: vec![(
                    OsdId(0),
                    OsdEndpoint {
                        addr: "127.0.0.2:6800".into(),
                        capacity_bytes: 1 << 30,
                    },
                )],
            },
        },
    );
    sample(
        out,
        "MapReply/Incrementals",
        &MapReply {
            fsid: 1,
            epoch: Epoch(3),
            update: MapUpdate::Incrementals(Vec::new()),
        },
    );
}

fn client_samples(out: &mut Vec<Sample>) {
    let ops = [
        ("Create", OpKind::Create { exclusive: true }),
        ("WriteFull", OpKind::WriteFull { len: 3 }),
        (
            "Write",
            OpKind::Write {
                offset: 4096,
                len: 3,
            },
        ),
        ("Append", OpKind::Append { len: 3 }),
        ("Truncate", OpKind::Truncate { size: 7 }),
        (
            "Zero",
            OpKind::Zero {
                offset: 1,
                length: 2,
            },
        ),
        ("Remove", OpKind::Remove),
        (
            "SetXattr",
            OpKind::SetXattr {
                name: b("user.a"),
                value: b("v"),
            },
        ),
        ("RemoveXattr", OpKind::RemoveXattr { name: b("user.a") }),
        (
            "OmapSet",
            OpKind::OmapSet {
                entries: vec![(b("k"), b("v"))],
            },
        ),
        ("OmapRemove", OpKind::OmapRemove { keys: vec![b("k")] }),
        ("OmapClear", OpKind::OmapClear),
        ("OmapSetHeader", OpKind::OmapSetHeader { header: b("h") }),
        ("Stat", OpKind::Stat),
        (
            "Read",
            OpKind::Read {
                offset: 1,
                length: Some(2),
            },
        ),
        ("GetXattrs", OpKind::GetXattrs),
        ("GetXattr", OpKind::GetXattr { name: b("user.a") }),
        (
            "OmapGetRange",
            OpKind::OmapGetRange {
                after: Some(b("k")),
                limit: 100,
            },
        ),
        ("OmapGet", OpKind::OmapGet { keys: vec![b("k")] }),
        ("OmapGetHeader", OpKind::OmapGetHeader),
        (
            "List",
            OpKind::List {
                after: None,
                limit: 10,
            },
        ),
    ];
    for (label, op) in ops {
        sample(
            out,
            &format!("ClientOp/{label}"),
            &ClientOp {
                pg: pg(),
                epoch: Epoch(11),
                req: req(),
                object: b("obj"),
                guards: Vec::new(),
                ops: vec![op],
                full_try: false,
            },
        );
    }
    let guards = [
        ("Version", GuardWire::Version(17)),
        (
            "Xattr",
            GuardWire::Xattr {
                name: b("etag"),
                value: Some(b("x")),
            },
        ),
        ("Exists", GuardWire::Exists),
        ("NotExists", GuardWire::NotExists),
        (
            "OmapKey",
            GuardWire::OmapKey {
                key: b("k"),
                value: None,
            },
        ),
    ];
    for (label, guard) in guards {
        sample(
            out,
            &format!("ClientOp/guard/{label}"),
            &ClientOp {
                pg: pg(),
                epoch: Epoch(11),
                req: req(),
                object: b("obj"),
                guards: vec![guard],
                ops: vec![OpKind::WriteFull { len: 1 }],
                full_try: false,
            },
        );
    }
    sample(
        out,
        "ClientOp/compound",
        &ClientOp {
            pg: pg(),
            epoch: Epoch(11),
            req: req(),
            object: b("obj"),
            guards: vec![GuardWire::NotExists, GuardWire::Version(0)],
            ops: vec![
                OpKind::Create { exclusive: true },
                OpKind::WriteFull { len: 5 },
                OpKind::SetXattr {
                    name: b("etag"),
                    value: b("e"),
                },
                OpKind::OmapSet {
                    entries: vec![(b("k"), b("v"))],
                },
            ],
            full_try: false,
        },
    );
    let outputs = [
        ("Written", OpOutput::Written { object_version: 4 }),
        ("Data", OpOutput::Data { len: 3 }),
        (
            "Stat",
            OpOutput::Stat {
                size_bytes: 10,
                version: 4,
            },
        ),
        ("Xattrs", OpOutput::Xattrs(vec![(b("a"), b("b"))])),
        ("Omap", OpOutput::Omap(vec![(b("k"), b("v"))])),
        (
            "List",
            OpOutput::List {
                names: vec![b("a")],
                next: Some(b("a")),
            },
        ),
        ("Value", OpOutput::Value(Some(b("v")))),
    ];
    for (label, output) in outputs {
        sample(
            out,
            &format!("ClientReply/{label}"),
            &ClientReply {
                result: Ok(vec![output]),
                version: Some(v(11, 2)),
            },
        );
    }
    let errors = [
        (
            "Retry",
            OpError::Retry {
                epoch: 12,
                reason: "r".into(),
            },
        ),
        (
            "Blocked",
            OpError::Blocked {
                acting_count: 1,
                min_size: 2,
            },
        ),
        ("Busy", OpError::Busy { inflight_max: 64 }),
        ("NotFound", OpError::NotFound),
        ("Invalid", OpError::Invalid("x".into())),
        ("NotSupported", OpError::NotSupported("x".into())),
        ("Store", OpError::Store("x".into())),
        ("Timeout", OpError::Timeout("x".into())),
        (
            "CompareFailed",
            OpError::CompareFailed {
                guard: 2,
                reason: "x".into(),
            },
        ),
        ("ObjectBusy", OpError::ObjectBusy),
        ("Full", OpError::Full("x".into())),
        ("Corrupt", OpError::Corrupt("x".into())),
        ("Exists", OpError::Exists),
    ];
    for (label, error) in errors {
        sample(
            out,
            &format!("ClientReply/Err/{label}"),
            &ClientReply::err(error),
        );
    }
    for (label, action) in [
        ("Scrub", PgAction::Scrub),
        ("DeepScrub", PgAction::DeepScrub),
        ("Repair", PgAction::Repair),
    ] {
        sample(
            out,
            &format!("PgCommand/{label}"),
            &PgCommand { pg: pg(), action },
        );
    }
    sample(
        out,
        "PgCommandReply/Ok",
        &PgCommandReply(Ok("started".into())),
    );
    sample(out, "PgCommandReply/Err", &PgCommandReply(Err("no".into())));
}

fn peer_samples(out: &mut Vec<Sample>) {
    sample(
        out,
        "PeerPing",
        &PeerPing {
            from: OsdId(1),
            epoch: Epoch(2),
        },
    );
    sample(
        out,
        "PeerPong",
        &PeerPong {
            from: OsdId(2),
            epoch: Epoch(2),
        },
    );
    sample(
        out,
        "PeerHello",
        &PeerHello {
            version: HELLO_VERSION,
            osd: OsdId(1),
            addr: "127.0.0.2:6800".into(),
            epoch: Epoch(5),
            auth: ByteBuf::new(),
        },
    );
    sample(out, "PeerHelloReply/Ok", &PeerHelloReply(Ok(OsdId(2))));
    sample(out, "PeerHelloReply/Err", &PeerHelloReply(Err("no".into())));
    let (from, interval_epoch) = (OsdId(1), Epoch(6));
    let key = KeyWire {
        hash: 0xdead_beef,
        name: b("o"),
    };
    let msgs = vec![
        (
            "SubWrite",
            PeerMsg::SubWrite {
                pg: pg(),
                from,
                interval_epoch,
                entry: b("entry"),
                ops: vec![
                    OpWire::WriteFull { len: 3 },
                    OpWire::Write { offset: 1, len: 2 },
                    OpWire::Append { len: 1 },
                    OpWire::Truncate { size: 5 },
                    OpWire::Zero {
                        offset: 1,
                        length: 2,
                    },
                    OpWire::Touch,
                    OpWire::Remove,
                    OpWire::SetVersion { version: 4 },
                    OpWire::SetXattrs(vec![(b("a"), b("b"))]),
                    OpWire::RemoveXattr(b("a")),
                    OpWire::OmapSet(vec![(b("k"), b("v"))]),
                    OpWire::OmapRemove(vec![b("k")]),
                    OpWire::OmapRemoveRange {
                        start: b("a"),
                        end: b("z"),
                    },
                    OpWire::OmapClear,
                ],
                prior: v(6, 1),
                committed_to: v(6, 0),
                log_only: false,
            },
        ),
        (
            "SubWriteAck",
            PeerMsg::SubWriteAck {
                pg: pg(),
                from,
                version: v(6, 2),
            },
        ),
        (
            "Signal/Query",
            PeerMsg::Signal {
                pg: pg(),
                from,
                interval_epoch,
                signal: SignalKind::Query,
            },
        ),
        (
            "Signal/Purge",
            PeerMsg::Signal {
                pg: pg(),
                from,
                interval_epoch,
                signal: SignalKind::Purge,
            },
        ),
        (
            "Notify",
            PeerMsg::Notify {
                pg: pg(),
                from,
                interval_epoch,
                exists: true,
                last_update: v(5, 9),
                last_epoch_started: Epoch(5),
                backfilling: false,
                entries: 2,
                missing: 1,
                lease: LeaseReport {
                    holder: Some(None),
                    remaining_ms: 700,
                    serving: true,
                },
                inconsistent: vec![(
                    b("o"),
                    InconsistencyRecord {
                        bad: vec![OsdId(2)],
                        auth: Some(OsdId(1)),
                        reason: "data".into(),
                    },
                )],
                shard: Some(2),
            },
        ),
        (
            "Activate",
            PeerMsg::Activate {
                pg: pg(),
                from,
                interval_epoch,
                keep_through: v(5, 1),
                last_update: v(5, 9),
                committed_to: v(5, 8),
                backfill: true,
                entries: 3,
                missing: 0,
                dups: 1,
            },
        ),
        (
            "Push",
            PeerMsg::Push {
                pg: pg(),
                from,
                interval_epoch,
                object: b("o"),
                exists: true,
                version: 3,
                xattrs: vec![(b("a"), b("b"))],
                data_bytes: 5,
                omap_entries: 1,
                as_of: v(6, 3),
            },
        ),
        (
            "ObjectSignal",
            PeerMsg::ObjectSignal {
                pg: pg(),
                from,
                interval_epoch,
                object: b("o"),
                kind: ObjectSignalKind::Unreadable,
            },
        ),
        (
            "Lease",
            PeerMsg::Lease {
                pg: pg(),
                from,
                interval_epoch,
                seq: 4,
                ack: true,
                delegate: None,
            },
        ),
        (
            "Lease/Delegate",
            PeerMsg::Lease {
                pg: pg(),
                from,
                interval_epoch,
                seq: 4,
                ack: false,
                delegate: Some((3, 2500)),
            },
        ),
        (
            "ScrubRequest",
            PeerMsg::ScrubRequest {
                pg: pg(),
                from,
                interval_epoch,
                chunk: 2,
                after: Some(key.clone()),
                through: None,
                deep: true,
            },
        ),
        (
            "ScrubMap",
            PeerMsg::ScrubMap {
                pg: pg(),
                from,
                interval_epoch,
                chunk: 2,
                entries: vec![ScrubEntryWire {
                    size: 10,
                    version: 3,
                    xattrs_digest: 1,
                    omap_digest: 2,
                    data_digest: Some(3),
                    error: None,
                    sealed: true,
                }],
                truncated: false,
            },
        ),
        (
            "RollForward",
            PeerMsg::RollForward {
                pg: pg(),
                from,
                interval_epoch,
                committed_to: v(5, 9),
            },
        ),
    ];
    for (label, msg) in msgs {
        sample(out, &format!("PeerMsg/{label}"), &msg);
    }
}

/// The file system's monitor commands and replies, and every MDS message
/// (kinds 0x0300..).
fn fs_samples(out: &mut Vec<Sample>) {
    let fs_commands = [
        (
            "FsCreate",
            MonCommand::FsCreate {
                name: "fs".into(),
                meta_pool: "m".into(),
                data_pool: "d".into(),
            },
        ),
        ("FsRemove", MonCommand::FsRemove("fs".into())),
        ("FsLs", MonCommand::FsLs),
        (
            "MdsBeacon",
            MonCommand::MdsBeacon {
                fs: "fs".into(),
                name: "a".into(),
                addr: "127.0.0.1:7000".into(),
            },
        ),
    ];
    for (label, command) in fs_commands {
        sample(
            out,
            &format!("CommandRequest/{label}"),
            &CommandRequest(command),
        );
    }
    let info = MdsInfo {
        name: "a".into(),
        addr: "127.0.0.1:7000".into(),
        beacon_age_ms: 250,
    };
    let status = FsStatus {
        name: "fs".into(),
        meta_pool: "m".into(),
        data_pool: "d".into(),
        generation: 3,
        active: Some(info.clone()),
        standbys: vec![info],
    };
    sample(
        out,
        "MonReply/FsMap",
        &MonReply(Ok(Reply::FsMap(vec![status.clone()]))),
    );
    sample(
        out,
        "MonReply/MdsRole/Active",
        &MonReply(Ok(Reply::MdsRole {
            role: MdsRole::Active { generation: 3 },
            fs: status.clone(),
        })),
    );
    sample(
        out,
        "MonReply/MdsRole/Standby",
        &MonReply(Ok(Reply::MdsRole {
            role: MdsRole::Standby,
            fs: status,
        })),
    );
    sample(
        out,
        "MonReply/Err/Fs",
        &MonReply(Err(MonError::Fs("no".into()))),
    );
    let t = Time {
        sec: 1_700_000_000,
        nsec: 5,
    };
    let ops = [
        ("Hello", MdsOp::Hello { name: "h:1".into() }),
        (
            "Lookup",
            MdsOp::Lookup {
                parent: 1,
                name: b("a"),
            },
        ),
        ("GetAttr", MdsOp::GetAttr { ino: 2 }),
        (
            "SetAttr",
            MdsOp::SetAttr {
                ino: 2,
                set: SetAttr {
                    mode: Some(0o644),
                    uid: Some(1),
                    gid: None,
                    size: Some(9),
                    atime: Some(SetTime::Now),
                    mtime: Some(SetTime::At(t)),
                },
            },
        ),
        (
            "Create",
            MdsOp::Create {
                parent: 1,
                name: b("f"),
                mode: 0o100_644,
                umask: 0o22,
                rdev: 0,
                open: true,
                ino: Some(7),
                time: Some(t),
            },
        ),
        (
            "Symlink",
            MdsOp::Symlink {
                parent: 1,
                name: b("l"),
                target: b("f"),
                ino: None,
            },
        ),
        (
            "Link",
            MdsOp::Link {
                ino: 7,
                parent: 1,
                name: b("g"),
            },
        ),
        (
            "Unlink",
            MdsOp::Unlink {
                parent: 1,
                name: b("g"),
                time: None,
            },
        ),
        (
            "Rmdir",
            MdsOp::Rmdir {
                parent: 1,
                name: b("d"),
            },
        ),
        (
            "Rename",
            MdsOp::Rename {
                parent: 1,
                name: b("a"),
                new_parent: 2,
                new_name: b("b"),
                flags: 1,
            },
        ),
        (
            "ReadDir",
            MdsOp::ReadDir {
                ino: 1,
                cookie: 3,
                max: 100,
            },
        ),
        ("Readlink", MdsOp::Readlink { ino: 8 }),
        (
            "Open",
            MdsOp::Open {
                ino: 7,
                truncate: false,
            },
        ),
        ("Release", MdsOp::Release { ino: 7 }),
        (
            "Written",
            MdsOp::Written {
                ino: 7,
                size: 4096,
                mtime: t,
            },
        ),
        (
            "SetXattr",
            MdsOp::SetXattr {
                ino: 7,
                name: b("user.a"),
                value: b("v"),
                flags: 1,
            },
        ),
        (
            "GetXattr",
            MdsOp::GetXattr {
                ino: 7,
                name: b("user.a"),
            },
        ),
        ("ListXattr", MdsOp::ListXattr { ino: 7 }),
        (
            "RemoveXattr",
            MdsOp::RemoveXattr {
                ino: 7,
                name: b("user.a"),
            },
        ),
        ("StatFs", MdsOp::StatFs),
        ("Sync", MdsOp::Sync),
        (
            "SetLock",
            MdsOp::SetLock {
                ino: 7,
                owner: 9,
                start: 0,
                end: u64::MAX,
                kind: LockKind::Write,
                pid: 42,
                wait: true,
            },
        ),
        (
            "GetLock",
            MdsOp::GetLock {
                ino: 7,
                owner: 9,
                start: 10,
                end: 19,
                kind: LockKind::Read,
            },
        ),
        (
            "Reassert",
            MdsOp::Reassert {
                attrs: vec![7],
                dirs: vec![1],
                buffers: vec![9],
                inos: vec![(100, 200)],
            },
        ),
        ("Returned", MdsOp::Returned { ino: 9 }),
        ("Sessions", MdsOp::Sessions),
        ("Evict", MdsOp::Evict { session: 0xabc }),
        ("Status", MdsOp::Status),
        ("TakeInos", MdsOp::TakeInos { count: 4096 }),
        (
            "Batch",
            MdsOp::Batch {
                ops: vec![
                    BatchOp {
                        tid: 6,
                        caller: Caller { uid: 1, gid: 2 },
                        op: MdsOp::Unlink {
                            parent: 1,
                            name: b("f"),
                            time: Some(t),
                        },
                    },
                    BatchOp {
                        tid: 7,
                        caller: Caller::default(),
                        op: MdsOp::Release { ino: 7 },
                    },
                ],
            },
        ),
        (
            "WriteInline",
            MdsOp::WriteInline {
                ino: 7,
                ranges: vec![(3, b("ab"))],
                size: 5,
                mtime: t,
            },
        ),
        ("Uninline", MdsOp::Uninline { ino: 7 }),
        ("ReadInline", MdsOp::ReadInline { ino: 7 }),
    ];
    for (label, op) in ops {
        let request = MdsRequest {
            session: 0xabc,
            tid: 5,
            caller: Caller {
                uid: 1000,
                gid: 100,
            },
            replay: false,
            op,
        };
        sample(out, &format!("MdsRequest/{label}"), &request);
    }
    let attr = Attr {
        ino: 7,
        size: 9,
        mode: 0o100_644,
        nlink: 1,
        uid: 1,
        gid: 2,
        rdev: 0,
        atime: t,
        mtime: t,
        ctime: t,
        btime: t,
        layout: Layout::default(),
    };
    let answers = [
        (
            "Session",
            MdsAnswer::Session {
                data_pool: "d".into(),
                root: attr.clone(),
                replaying: false,
                lease_ms: 60_000,
                inline_max: 4096,
            },
        ),
        (
            "Created",
            MdsAnswer::Created {
                attr: attr.clone(),
                buffer: true,
            },
        ),
        ("Attr", MdsAnswer::Attr(attr.clone())),
        (
            "Entries",
            MdsAnswer::Entries {
                entries: vec![DirEntry {
                    name: b("f"),
                    ino: 7,
                    kind: 0o100_000,
                    cookie: 99,
                }],
                eof: true,
            },
        ),
        ("Value", MdsAnswer::Value(b("v"))),
        ("Names", MdsAnswer::Names(vec![b("user.a")])),
        (
            "StatFs",
            MdsAnswer::StatFs(FsStat {
                total_bytes: 1 << 30,
                free_bytes: 1 << 29,
                files: 3,
            }),
        ),
        ("Done", MdsAnswer::Done),
        (
            "Lock",
            MdsAnswer::Lock(Some(LockInfo {
                start: 0,
                end: 9,
                kind: LockKind::Read,
                pid: 42,
            })),
        ),
        (
            "Sessions",
            MdsAnswer::Sessions(vec![SessionInfo {
                id: 0xabc,
                name: "h:1".into(),
                opens: 1,
                leases: 2,
                recalls_pending: 0,
                idle_ms: 5,
                evicted: Some("r".into()),
            }]),
        ),
        (
            "Status",
            MdsAnswer::Status(MdsStatus {
                cached_inodes: 1,
                cached_dirs: 2,
                cache_bytes: 3,
                cache_target_bytes: 4,
                cache_budget_bytes: 5,
                resident_bytes: 6,
                in_flight: 7,
                slow: vec![SlowRequest {
                    session: 0xabc,
                    op: "Create".into(),
                    age_ms: 8,
                }],
                slow_now: 1,
                slow_total: 9,
                complaint_ms: 10,
                purge_waiting: 11,
                purge_waiting_more: false,
                purged_total: 12,
            }),
        ),
        (
            "Inos",
            MdsAnswer::Inos {
                first: 4096,
                count: 4096,
            },
        ),
        (
            "Batch",
            MdsAnswer::Batch(vec![
                BatchResult {
                    result: Ok(MdsAnswer::Done),
                    journal_seq: Some(12),
                },
                BatchResult {
                    result: Err(MdsError::Errno(2)),
                    journal_seq: None,
                },
            ]),
        ),
        (
            "Opened",
            MdsAnswer::Opened {
                attr: attr.clone(),
                inline: Some(b("hi")),
            },
        ),
    ];
    for (label, answer) in answers {
        let reply = MdsReply {
            result: Ok(answer),
            journal_seq: Some(11),
            durable_seq: 10,
        };
        sample(out, &format!("MdsReply/{label}"), &reply);
    }
    let errors = [
        ("Errno", MdsError::Errno(2)),
        ("NotActive", MdsError::NotActive),
        ("Busy", MdsError::Busy),
        ("BadRequest", MdsError::BadRequest("x".into())),
        ("Evicted", MdsError::Evicted("x".into())),
    ];
    for (label, error) in errors {
        let reply = MdsReply {
            result: Err(error),
            journal_seq: None,
            durable_seq: 10,
        };
        sample(out, &format!("MdsReply/Err/{label}"), &reply);
    }
    sample(
        out,
        "MdsPoll",
        &MdsPoll {
            session: 0xabc,
            durable_seq: 10,
            wait_ms: 5000,
            recalled: 3,
        },
    );
    sample(
        out,
        "MdsPollReply",
        &MdsPollReply {
            result: Ok(12),
            recalls: vec![
                Recall {
                    id: 4,
                    inval: Inval::Inode(7),
                },
                Recall {
                    id: 5,
                    inval: Inval::Entry {
                        parent: 1,
                        name: b("f"),
                    },
                },
                Recall {
                    id: 6,
                    inval: Inval::Flush(9),
                },
            ],
        },
    );
}

fn shard_read_samples(out: &mut Vec<Sample>) {
    sample(
        out,
        "ShardRead",
        &ShardRead {
            pg: pg(),
            from: OsdId(1),
            interval_epoch: Epoch(6),
            object: b("o"),
            shard: 2,
            version: 9,
            ranges: vec![(4096, 100), (0, 1)],
            whole: false,
        },
    );
    sample(
        out,
        "ShardReadReply/Ok",
        &ShardReadReply(Ok(ShardReadOk {
            version: 9,
            lens: vec![100, 1],
            xattrs: vec![(b("a"), b("b"))],
        })),
    );
    sample(
        out,
        "ClientShardRead",
        &ClientShardRead {
            pg: pg(),
            epoch: Epoch(6),
            object: b("o"),
            shard: 1,
            offset: 4096,
            length: Some(100),
            rows: true,
        },
    );
    sample(
        out,
        "ClientShardReadReply/Found",
        &ClientShardReadReply(Ok(DirectPart::Found {
            version: 9,
            size: 4096,
            chunk: 2048,
            shard_offset: 0,
        })),
    );
    sample(
        out,
        "ClientShardReadReply/Absent",
        &ClientShardReadReply(Ok(DirectPart::Absent)),
    );
    sample(
        out,
        "ClientShardReadReply/Err",
        &ClientShardReadReply(Err("x".into())),
    );
    let errors = [
        ("NotServing", ShardReadError::NotServing("x".into())),
        ("Stale", ShardReadError::Stale { version: 10 }),
        ("NotFound", ShardReadError::NotFound),
        ("Corrupt", ShardReadError::Corrupt("x".into())),
        ("Store", ShardReadError::Store("x".into())),
    ];
    for (label, error) in errors {
        sample(
            out,
            &format!("ShardReadReply/Err/{label}"),
            &ShardReadReply(Err(error)),
        );
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[test]
fn every_message_keeps_its_kind_and_bytes() {
    let mut samples = Vec::new();
    mon_samples(&mut samples);
    client_samples(&mut samples);
    peer_samples(&mut samples);
    fs_samples(&mut samples);
    shard_read_samples(&mut samples);
    let now: Vec<(String, u16, String)> = samples
        .iter()
        .map(|s| (s.label.clone(), s.kind, hex(&s.body)))
        .collect();
    let expected: Vec<(String, u16, String)> = GOLDEN
        .iter()
        .map(|(l, k, h)| ((*l).to_owned(), *k, (*h).to_owned()))
        .collect();
    if now != expected {
        let mut table = String::new();
        for (label, kind, hex) in &now {
            let _ = writeln!(table, "    ({label:?}, 0x{kind:04x}, {hex:?}),");
        }
        for (n, e) in now.iter().zip(&expected) {
            if n != e {
                eprintln!("first difference: now {n:?}, frozen {e:?}");
                break;
            }
        }
        panic!(
            "the wire format changed ({} samples now, {} frozen); the table as it now is:\n{table}",
            now.len(),
            expected.len()
        );
    }
}

/// The stored value of a kept inconsistency (`scrubbad/NAME`) is
/// `[1] ++ postcard(record)`; the record's bytes are frozen like a
/// message's.
#[test]
fn inconsistency_record_bytes_are_frozen() {
    let record = InconsistencyRecord {
        bad: vec![OsdId(2), OsdId(3)],
        auth: Some(OsdId(1)),
        reason: "data digest".into(),
    };
    let bytes = postcard::to_allocvec(&record).expect("encodes");
    assert_eq!(
        hex(&bytes),
        "0202030101 0b64617461206469676573 74".replace(' ', "")
    );
}

/// (label, kind, postcard body as hex).
const GOLDEN: &[(&str, u16, &str)] = &[
    (
        "CommandRequest/OsdBoot",
        0x0102,
        "0001040e3132372e302e302e323a3638303002683102723103737364808004808080808020",
    ),
    ("CommandRequest/OsdOut", 0x0102, "0104"),
    ("CommandRequest/OsdIn", 0x0102, "0204"),
    ("CommandRequest/OsdReweight", 0x0102, "0304808002"),
    (
        "CommandRequest/PoolCreate",
        0x0102,
        "04046461746140000302010103686464",
    ),
    (
        "CommandRequest/PoolCreate/ec",
        0x0102,
        "040265632001040200018080040200",
    ),
    ("CommandRequest/PoolDelete", 0x0102, "050464617461"),
    ("CommandRequest/PoolSet", 0x0102, "060464617461018001000101"),
    ("CommandRequest/PgTemp", 0x0102, "07032a01020102"),
    (
        "CommandRequest/ConfigSet",
        0x0102,
        "08176f73645f7265636f766572795f6d61785f616374697665010133",
    ),
    ("CommandRequest/ConfigDump", 0x0102, "09"),
    ("MonReply/Done", 0x0103, "000007"),
    ("MonReply/OsdBooted", 0x0103, "00010408"),
    ("MonReply/Heartbeat", 0x0103, "00020901cdd702"),
    ("MonReply/Config", 0x0103, "0003050101610162"),
    ("MonReply/UnknownOsd", 0x0103, "010009"),
    ("MonReply/PoolExists", 0x0103, "01010170"),
    ("MonReply/NoPool", 0x0103, "01020170"),
    ("MonReply/InvalidPool", 0x0103, "01030178"),
    ("MonReply/Unsatisfiable", 0x0103, "01040178"),
    ("MonReply/InvalidMap", 0x0103, "01050178"),
    ("MonReply/BadRequest", 0x0103, "01060178"),
    ("MonReply/Store", 0x0103, "01070178"),
    ("MonReply/Wire", 0x0103, "01080178"),
    ("MonReply/Io", 0x0103, "01090178"),
    ("MonReply/ShuttingDown", 0x0103, "010a"),
    (
        "Heartbeat",
        0x0104,
        "01e8079003d804ac02000101020304010c6163746976652b636c65616e0201032a0c6163746976652b636c65616e0201020201020101050335273303000001f403000105736372756264320101076f3a2064617461050607080001032a01010280408060",
    ),
    ("FailureReport", 0x0105, "0102"),
    ("GetMap", 0x0100, "0c"),
    ("Subscribe", 0x0106, "07b0ea01"),
    ("GetStats", 0x0107, ""),
    (
        "StatsReply/Ok",
        0x0108,
        "000101e8079003d804ac02000101020304010c6163746976652b636c65616e0201032a0c6163746976652b636c65616e0201020201020101050335273303000001f403000105736372756264320101076f3a2064617461050607080001032a01010280408060fa01000000000000f83f000000000000004000000000000000000000000080842e41000000000000d03f000000000000e03f",
    ),
    ("StatsReply/Err", 0x0108, "010a"),
    (
        "MapReply/Full",
        0x0101,
        "8de0b7f70f030001000e3132372e302e302e323a363830308080808004",
    ),
    ("MapReply/Incrementals", 0x0101, "01030100"),
    (
        "ClientOp/Create",
        0x0200,
        "032a0bf8acd1910109036f626a0001000100",
    ),
    (
        "ClientOp/WriteFull",
        0x0200,
        "032a0bf8acd1910109036f626a0001010300",
    ),
    (
        "ClientOp/Write",
        0x0200,
        "032a0bf8acd1910109036f626a00010280200300",
    ),
    (
        "ClientOp/Append",
        0x0200,
        "032a0bf8acd1910109036f626a0001030300",
    ),
    (
        "ClientOp/Truncate",
        0x0200,
        "032a0bf8acd1910109036f626a0001040700",
    ),
    (
        "ClientOp/Zero",
        0x0200,
        "032a0bf8acd1910109036f626a000105010200",
    ),
    (
        "ClientOp/Remove",
        0x0200,
        "032a0bf8acd1910109036f626a00010600",
    ),
    (
        "ClientOp/SetXattr",
        0x0200,
        "032a0bf8acd1910109036f626a00010706757365722e61017600",
    ),
    (
        "ClientOp/RemoveXattr",
        0x0200,
        "032a0bf8acd1910109036f626a00010806757365722e6100",
    ),
    (
        "ClientOp/OmapSet",
        0x0200,
        "032a0bf8acd1910109036f626a00010901016b017600",
    ),
    (
        "ClientOp/OmapRemove",
        0x0200,
        "032a0bf8acd1910109036f626a00010a01016b00",
    ),
    (
        "ClientOp/OmapClear",
        0x0200,
        "032a0bf8acd1910109036f626a00010b00",
    ),
    (
        "ClientOp/OmapSetHeader",
        0x0200,
        "032a0bf8acd1910109036f626a00010c016800",
    ),
    (
        "ClientOp/Stat",
        0x0200,
        "032a0bf8acd1910109036f626a00010d00",
    ),
    (
        "ClientOp/Read",
        0x0200,
        "032a0bf8acd1910109036f626a00010e01010200",
    ),
    (
        "ClientOp/GetXattrs",
        0x0200,
        "032a0bf8acd1910109036f626a00010f00",
    ),
    (
        "ClientOp/GetXattr",
        0x0200,
        "032a0bf8acd1910109036f626a00011006757365722e6100",
    ),
    (
        "ClientOp/OmapGetRange",
        0x0200,
        "032a0bf8acd1910109036f626a00011101016b6400",
    ),
    (
        "ClientOp/OmapGet",
        0x0200,
        "032a0bf8acd1910109036f626a00011201016b00",
    ),
    (
        "ClientOp/OmapGetHeader",
        0x0200,
        "032a0bf8acd1910109036f626a00011300",
    ),
    (
        "ClientOp/List",
        0x0200,
        "032a0bf8acd1910109036f626a000114000a00",
    ),
    (
        "ClientOp/guard/Version",
        0x0200,
        "032a0bf8acd1910109036f626a01001101010100",
    ),
    (
        "ClientOp/guard/Xattr",
        0x0200,
        "032a0bf8acd1910109036f626a0101046574616701017801010100",
    ),
    (
        "ClientOp/guard/Exists",
        0x0200,
        "032a0bf8acd1910109036f626a010201010100",
    ),
    (
        "ClientOp/guard/NotExists",
        0x0200,
        "032a0bf8acd1910109036f626a010301010100",
    ),
    (
        "ClientOp/guard/OmapKey",
        0x0200,
        "032a0bf8acd1910109036f626a0104016b0001010100",
    ),
    (
        "ClientOp/compound",
        0x0200,
        "032a0bf8acd1910109036f626a02030000040001010507046574616701650901016b017600",
    ),
    ("ClientReply/Written", 0x0201, "00010004010b02"),
    ("ClientReply/Data", 0x0201, "00010103010b02"),
    ("ClientReply/Stat", 0x0201, "0001020a04010b02"),
    ("ClientReply/Xattrs", 0x0201, "0001030101610162010b02"),
    ("ClientReply/Omap", 0x0201, "00010401016b0176010b02"),
    ("ClientReply/List", 0x0201, "000105010161010161010b02"),
    ("ClientReply/Value", 0x0201, "000106010176010b02"),
    ("ClientReply/Err/Retry", 0x0201, "01000c017200"),
    ("ClientReply/Err/Blocked", 0x0201, "0101010200"),
    ("ClientReply/Err/Busy", 0x0201, "01024000"),
    ("ClientReply/Err/NotFound", 0x0201, "010300"),
    ("ClientReply/Err/Invalid", 0x0201, "0104017800"),
    ("ClientReply/Err/NotSupported", 0x0201, "0105017800"),
    ("ClientReply/Err/Store", 0x0201, "0106017800"),
    ("ClientReply/Err/Timeout", 0x0201, "0107017800"),
    ("ClientReply/Err/CompareFailed", 0x0201, "010802017800"),
    ("ClientReply/Err/ObjectBusy", 0x0201, "010900"),
    ("ClientReply/Err/Full", 0x0201, "010a017800"),
    ("ClientReply/Err/Corrupt", 0x0201, "010b017800"),
    ("ClientReply/Err/Exists", 0x0201, "010c00"),
    ("PgCommand/Scrub", 0x0205, "032a00"),
    ("PgCommand/DeepScrub", 0x0205, "032a01"),
    ("PgCommand/Repair", 0x0205, "032a02"),
    ("PgCommandReply/Ok", 0x0206, "000773746172746564"),
    ("PgCommandReply/Err", 0x0206, "01026e6f"),
    ("PeerPing", 0x0203, "0102"),
    ("PeerPong", 0x0204, "0202"),
    (
        "PeerHello",
        0x0207,
        "04010e3132372e302e302e323a363830300500",
    ),
    ("PeerHelloReply/Ok", 0x0208, "0002"),
    ("PeerHelloReply/Err", 0x0208, "01026e6f"),
    (
        "PeerMsg/SubWrite",
        0x0202,
        "00032a010605656e7472790e000301010202010305040102050607040801016101620901610a01016b01760b01016b0c0161017a0d0601060000",
    ),
    ("PeerMsg/SubWriteAck", 0x0202, "01032a010602"),
    ("PeerMsg/Signal/Query", 0x0202, "02032a010600"),
    ("PeerMsg/Signal/Purge", 0x0202, "02032a010604"),
    (
        "PeerMsg/Notify",
        0x0202,
        "03032a0106010509050002010100bc050101016f0102010104646174610102",
    ),
    ("PeerMsg/Activate", 0x0202, "04032a010605010509050801030001"),
    (
        "PeerMsg/Push",
        0x0202,
        "05032a0106016f0103010161016205010603",
    ),
    ("PeerMsg/ObjectSignal", 0x0202, "06032a0106016f02"),
    ("PeerMsg/Lease", 0x0202, "07032a0106040100"),
    ("PeerMsg/Lease/Delegate", 0x0202, "07032a010604000103c413"),
    (
        "PeerMsg/ScrubRequest",
        0x0202,
        "08032a01060201effdb6f50d016f0001",
    ),
    (
        "PeerMsg/ScrubMap",
        0x0202,
        "09032a010602010a0301020103000100",
    ),
    ("PeerMsg/RollForward", 0x0202, "0a032a01060509"),
    ("CommandRequest/FsCreate", 0x0102, "0a026673016d0164"),
    ("CommandRequest/FsRemove", 0x0102, "0b026673"),
    ("CommandRequest/FsLs", 0x0102, "0c"),
    (
        "CommandRequest/MdsBeacon",
        0x0102,
        "0d02667301610e3132372e302e302e313a37303030",
    ),
    (
        "MonReply/FsMap",
        0x0103,
        "000401026673016d0164030101610e3132372e302e302e313a37303030fa010101610e3132372e302e302e313a37303030fa01",
    ),
    (
        "MonReply/MdsRole/Active",
        0x0103,
        "00050003026673016d0164030101610e3132372e302e302e313a37303030fa010101610e3132372e302e302e313a37303030fa01",
    ),
    (
        "MonReply/MdsRole/Standby",
        0x0103,
        "000501026673016d0164030101610e3132372e302e302e313a37303030fa010101610e3132372e302e302e313a37303030fa01",
    ),
    ("MonReply/Err/Fs", 0x0103, "010b026e6f"),
    ("MdsRequest/Hello", 0x0300, "bc1505e80764000003683a31"),
    ("MdsRequest/Lookup", 0x0300, "bc1505e807640001010161"),
    ("MdsRequest/GetAttr", 0x0300, "bc1505e80764000202"),
    (
        "MdsRequest/SetAttr",
        0x0300,
        "bc1505e8076400030201a40301010001090100010180c49fd50c05",
    ),
    (
        "MdsRequest/Create",
        0x0300,
        "bc1505e807640004010166a4830212000101070180c49fd50c05",
    ),
    ("MdsRequest/Symlink", 0x0300, "bc1505e80764000501016c016600"),
    ("MdsRequest/Link", 0x0300, "bc1505e80764000607010167"),
    ("MdsRequest/Unlink", 0x0300, "bc1505e80764000701016700"),
    ("MdsRequest/Rmdir", 0x0300, "bc1505e807640008010164"),
    (
        "MdsRequest/Rename",
        0x0300,
        "bc1505e80764000901016102016201",
    ),
    ("MdsRequest/ReadDir", 0x0300, "bc1505e80764000a010364"),
    ("MdsRequest/Readlink", 0x0300, "bc1505e80764000b08"),
    ("MdsRequest/Open", 0x0300, "bc1505e80764000c0700"),
    ("MdsRequest/Release", 0x0300, "bc1505e80764000d07"),
    (
        "MdsRequest/Written",
        0x0300,
        "bc1505e80764000e07802080c49fd50c05",
    ),
    (
        "MdsRequest/SetXattr",
        0x0300,
        "bc1505e80764000f0706757365722e61017601",
    ),
    (
        "MdsRequest/GetXattr",
        0x0300,
        "bc1505e8076400100706757365722e61",
    ),
    ("MdsRequest/ListXattr", 0x0300, "bc1505e80764001107"),
    (
        "MdsRequest/RemoveXattr",
        0x0300,
        "bc1505e8076400120706757365722e61",
    ),
    ("MdsRequest/StatFs", 0x0300, "bc1505e807640013"),
    ("MdsRequest/Sync", 0x0300, "bc1505e807640014"),
    (
        "MdsRequest/SetLock",
        0x0300,
        "bc1505e807640015070900ffffffffffffffffff01012a01",
    ),
    ("MdsRequest/GetLock", 0x0300, "bc1505e80764001607090a1300"),
    (
        "MdsRequest/Reassert",
        0x0300,
        "bc1505e8076400170107010101090164c801",
    ),
    ("MdsRequest/Returned", 0x0300, "bc1505e80764001809"),
    ("MdsRequest/Sessions", 0x0300, "bc1505e807640019"),
    ("MdsRequest/Evict", 0x0300, "bc1505e80764001abc15"),
    ("MdsRequest/Status", 0x0300, "bc1505e80764001b"),
    ("MdsRequest/TakeInos", 0x0300, "bc1505e80764001c8020"),
    (
        "MdsRequest/Batch",
        0x0300,
        "bc1505e80764001d02060102070101660180c49fd50c050700000d07",
    ),
    (
        "MdsRequest/WriteInline",
        0x0300,
        "bc1505e80764001e0701030261620580c49fd50c05",
    ),
    ("MdsRequest/Uninline", 0x0300, "bc1505e80764001f07"),
    ("MdsRequest/ReadInline", 0x0300, "bc1505e80764002007"),
    (
        "MdsReply/Session",
        0x0301,
        "000001640709a483020101020080c49fd50c0580c49fd50c0580c49fd50c0580c49fd50c0580808002808080020100e0d4038020010b0a",
    ),
    (
        "MdsReply/Created",
        0x0301,
        "00020709a483020101020080c49fd50c0580c49fd50c0580c49fd50c0580c49fd50c0580808002808080020101010b0a",
    ),
    (
        "MdsReply/Attr",
        0x0301,
        "00010709a483020101020080c49fd50c0580c49fd50c0580c49fd50c0580c49fd50c05808080028080800201010b0a",
    ),
    ("MdsReply/Entries", 0x0301, "0003010166078080026301010b0a"),
    ("MdsReply/Value", 0x0301, "00040176010b0a"),
    ("MdsReply/Names", 0x0301, "00050106757365722e61010b0a"),
    (
        "MdsReply/StatFs",
        0x0301,
        "00068080808004808080800203010b0a",
    ),
    ("MdsReply/Done", 0x0301, "0007010b0a"),
    ("MdsReply/Lock", 0x0301, "0008010009002a010b0a"),
    (
        "MdsReply/Sessions",
        0x0301,
        "000901bc1503683a3101020005010172010b0a",
    ),
    (
        "MdsReply/Status",
        0x0301,
        "000a0102030405060701bc15064372656174650801090a0b000c010b0a",
    ),
    ("MdsReply/Inos", 0x0301, "000b80208020010b0a"),
    ("MdsReply/Batch", 0x0301, "000c020007010c01000400010b0a"),
    (
        "MdsReply/Opened",
        0x0301,
        "000d0709a483020101020080c49fd50c0580c49fd50c0580c49fd50c0580c49fd50c0580808002808080020101026869010b0a",
    ),
    ("MdsReply/Err/Errno", 0x0301, "010004000a"),
    ("MdsReply/Err/NotActive", 0x0301, "0101000a"),
    ("MdsReply/Err/Busy", 0x0301, "0102000a"),
    ("MdsReply/Err/BadRequest", 0x0301, "01030178000a"),
    ("MdsReply/Err/Evicted", 0x0301, "01040178000a"),
    ("MdsPoll", 0x0302, "bc150a882703"),
    ("MdsPollReply", 0x0303, "000c030400070501010166060209"),
    ("ShardRead", 0x0209, "032a0106016f020902802064000100"),
    ("ShardReadReply/Ok", 0x020a, "00090264010101610162"),
    ("ClientShardRead", 0x020b, "032a06016f018020016401"),
    ("ClientShardReadReply/Found", 0x020c, "0001098020801000"),
    ("ClientShardReadReply/Absent", 0x020c, "0000"),
    ("ClientShardReadReply/Err", 0x020c, "010178"),
    ("ShardReadReply/Err/NotServing", 0x020a, "01000178"),
    ("ShardReadReply/Err/Stale", 0x020a, "01010a"),
    ("ShardReadReply/Err/NotFound", 0x020a, "0102"),
    ("ShardReadReply/Err/Corrupt", 0x020a, "01030178"),
    ("ShardReadReply/Err/Store", 0x020a, "01040178"),
];

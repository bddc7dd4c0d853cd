//! Every message body an OSD or a monitor decodes from the network, fuzzed
//! (issue 19, item 10): real encodings of each kind, then bit flips,
//! truncations, extensions and overwritten length fields, must decode to a
//! value or an error, never a panic; and well-formed values round-trip.
//! `PROPTEST_CASES` raises the cases (default 512 per property).

use bytes::Bytes;
use cairn_osd::codec::{decode_pg_msg, encode_pg_msg};
use cairn_osd::{LogEntry, LogKind, LogResult, ObjectState, PgMsg, Push, ReqId, SubWrite, Version};
use cairn_proto::osd::{ClientOp, GuardWire, OpKind, PgAction, PgCommand, ReqIdWire};
use cairn_proto::peer::{HELLO_VERSION, PeerHello, PeerHelloReply};
use cairn_proto::peer::{PeerMsg, PeerPing};
use cairn_store::{ObjectKey, Op};
use cairn_types::checked::CheckedBytes;
use cairn_types::{Epoch, OsdId, PgId, PoolId};
use cairn_wire::{Frame, Message};
use proptest::prelude::*;
use serde_bytes::ByteBuf;

const PG: PgId = PgId {
    pool: PoolId(1),
    seed: 3,
};

fn entry(seq: u64) -> LogEntry {
    LogEntry {
        version: Version::new(5, seq),
        object: Bytes::from_static(b"obj"),
        kind: LogKind::Write,
        req: ReqId {
            client: 9,
            tid: seq,
        },
        result: LogResult::Ok {
            object_version: seq,
        },
    }
}

/// One of each kind of PG message that carries more than ids.
fn pg_messages() -> Vec<PgMsg> {
    let from = OsdId(2);
    let interval_epoch = Epoch(5);
    vec![
        PgMsg::SubWrite(SubWrite {
            from,
            interval_epoch,
            entry: entry(3),
            ops: vec![Op::Write {
                object: ObjectKey::new(Bytes::from_static(b"obj")),
                offset: 4096,
                data: Bytes::from(vec![7u8; 5000]).into(),
            }],
            prior: Version::new(5, 2),
            committed_to: Version::new(5, 1),
            log_only: false,
        }),
        PgMsg::Query {
            from,
            interval_epoch,
        },
        PgMsg::Push(Push {
            from,
            interval_epoch,
            object: Bytes::from_static(b"obj"),
            state: Some(ObjectState {
                data: Bytes::from(vec![1u8; 3000]),
                version: 4,
                ..ObjectState::default()
            }),
            as_of: Version::new(5, 4),
        }),
        PgMsg::Activate(cairn_osd::Activate {
            from,
            interval_epoch,
            keep_through: Version::new(5, 1),
            entries: vec![entry(2), entry(3)],
            last_update: Version::new(5, 3),
            committed_to: Version::new(5, 3),
            missing: vec![Bytes::from_static(b"obj")],
            backfill: false,
            dups: Vec::new(),
        }),
    ]
}

/// The bytes of each message body the daemons decode, as sent.
fn samples() -> Vec<(u16, Vec<u8>, Bytes)> {
    let mut out = Vec::new();
    for msg in pg_messages() {
        let (body, data) = encode_pg_msg(PG, &msg).expect("encodes");
        let frame = Frame::request(&body, data).expect("frame");
        out.push((frame.kind, frame.body.to_vec(), Bytes::from(frame.data)));
    }
    let client_op = ClientOp {
        pg: PG,
        epoch: Epoch(5),
        req: ReqIdWire { client: 1, tid: 2 },
        object: ByteBuf::from(b"obj".to_vec()),
        guards: vec![GuardWire::Version(3), GuardWire::NotExists],
        ops: vec![
            OpKind::Write {
                offset: 4096,
                len: 3,
            },
            OpKind::OmapSetHeader {
                header: ByteBuf::from(b"h".to_vec()),
            },
        ],
        full_try: false,
    };
    let hello = PeerHello {
        version: HELLO_VERSION,
        osd: OsdId(3),
        addr: "127.0.0.1:6803".into(),
        epoch: Epoch(7),
        auth: ByteBuf::new(),
    };
    let small: Vec<Frame> = vec![
        Frame::request(&client_op, Bytes::from_static(b"payload")).expect("frame"),
        Frame::request(&hello, Bytes::new()).expect("frame"),
        Frame::request(&PeerHelloReply(Err("no".into())), Bytes::new()).expect("frame"),
        Frame::request(
            &PeerPing {
                from: OsdId(1),
                epoch: Epoch(2),
            },
            Bytes::new(),
        )
        .expect("frame"),
        Frame::request(
            &PgCommand {
                pg: PG,
                action: PgAction::Repair,
            },
            Bytes::new(),
        )
        .expect("frame"),
    ];
    for frame in small {
        out.push((frame.kind, frame.body.to_vec(), Bytes::from(frame.data)));
    }
    out
}

/// Decodes `body` and `data` as the daemon of `kind` would.
fn decode_as_daemon(kind: u16, body: &[u8], data: &Bytes) {
    let frame = Frame {
        kind,
        request_id: 1,
        is_response: false,
        body: Bytes::copy_from_slice(body),
        data: CheckedBytes::from(data.clone()),
    };
    match kind {
        k if k == PeerMsg::KIND => {
            if let Ok(msg) = frame.decode_body::<PeerMsg>() {
                let _ = decode_pg_msg(msg, &frame.data);
            }
        }
        k if k == ClientOp::KIND => drop(frame.decode_body::<ClientOp>()),
        k if k == PeerHello::KIND => drop(frame.decode_body::<PeerHello>()),
        k if k == PeerHelloReply::KIND => drop(frame.decode_body::<PeerHelloReply>()),
        k if k == PeerPing::KIND => drop(frame.decode_body::<PeerPing>()),
        k if k == PgCommand::KIND => drop(frame.decode_body::<PgCommand>()),
        _ => {}
    }
    // The monitor's requests, from the same bytes.
    drop(frame.decode_body::<cairn_proto::mon::CommandRequest>());
    drop(frame.decode_body::<cairn_proto::mon::Heartbeat>());
    drop(frame.decode_body::<cairn_proto::mon::GetMap>());
    drop(frame.decode_body::<cairn_proto::mon::Subscribe>());
    drop(frame.decode_body::<cairn_proto::mon::FailureReport>());
}

#[test]
fn every_sample_round_trips() {
    for msg in pg_messages() {
        let (body, data) = encode_pg_msg(PG, &msg).expect("encodes");
        let (pg, back) = decode_pg_msg(body, &data).expect("decodes");
        assert_eq!(pg, PG);
        assert_eq!(back, msg);
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip {
        at: usize,
        bit: u8,
    },
    Truncate {
        keep: usize,
    },
    Extend {
        bytes: Vec<u8>,
    },
    /// A varint of `value` (a length or count) written over `at`.
    HugeVarint {
        at: usize,
        value: u64,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        any::<usize>().prop_map(|keep| Mutation::Truncate { keep }),
        prop::collection::vec(any::<u8>(), 1..64).prop_map(|bytes| Mutation::Extend { bytes }),
        (
            any::<usize>(),
            prop_oneof![
                Just(u64::MAX),
                Just(1u64 << 60),
                Just(u64::from(u32::MAX)),
                any::<u64>()
            ]
        )
            .prop_map(|(at, value)| Mutation::HugeVarint { at, value }),
    ]
}

fn apply(bytes: &mut Vec<u8>, mutation: &Mutation) {
    match mutation {
        Mutation::Flip { at, bit } if !bytes.is_empty() => {
            let at = at % bytes.len();
            bytes[at] ^= 1 << bit;
        }
        Mutation::Truncate { keep } => bytes.truncate(keep % (bytes.len() + 1)),
        Mutation::Extend { bytes: more } => bytes.extend_from_slice(more),
        Mutation::HugeVarint { at, value } if !bytes.is_empty() => {
            let at = at % bytes.len();
            let mut varint = Vec::new();
            let mut v = *value;
            loop {
                let byte = (v & 0x7f) as u8;
                v >>= 7;
                if v == 0 {
                    varint.push(byte);
                    break;
                }
                varint.push(byte | 0x80);
            }
            let end = (at + varint.len()).min(bytes.len());
            bytes.splice(at..end, varint);
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn mutated_bodies_decode_or_fail_never_panic(
        sample in 0usize..9,
        mutations in prop::collection::vec(mutation(), 1..4),
        mutate_data in any::<bool>(),
    ) {
        let samples = samples();
        let (kind, body, data) = &samples[sample % samples.len()];
        let mut body = body.clone();
        let mut data = data.to_vec();
        for m in &mutations {
            if mutate_data { apply(&mut data, m) } else { apply(&mut body, m) }
        }
        decode_as_daemon(*kind, &body, &Bytes::from(data));
    }

    #[test]
    fn random_bytes_decode_or_fail_never_panic(
        kind_pick in 0usize..9,
        body in prop::collection::vec(any::<u8>(), 0..512),
        data in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let samples = samples();
        let kind = samples[kind_pick % samples.len()].0;
        decode_as_daemon(kind, &body, &Bytes::from(data));
    }
}

//! Golden bytes: the exact encoding of a sample frame under protocol
//! version 1 is frozen here, so any change to the layout, the byte order or
//! the checksum coverage fails this test (and must bump the version).

use bytes::{Bytes, BytesMut};
use cairn_wire::{Frame, FrameDecoder, Message};

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Sample {
    seq: u32,
    name: String,
}

impl Message for Sample {
    const KIND: u16 = 0x0102;
}

fn sample() -> Frame {
    let msg = Sample {
        seq: 300,
        name: "osd.7".into(),
    };
    Frame::response(0x0807_0605_0403_0201, &msg, Bytes::from_static(b"DATA!")).expect("encodes")
}

#[rustfmt::skip]
const GOLDEN: [u8; 32 + 8 + 5] = [
    b'C', b'R', b'N', b'1',                         // magic
    0x01, 0x00,                                     // protocol version 1
    0x02, 0x01,                                     // kind 0x0102
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // request id 0x0807060504030201
    0x08, 0x00, 0x00, 0x00,                         // body length 8
    0x05, 0x00, 0x00, 0x00,                         // data length 5
    0x01, 0x00, 0x00, 0x00,                         // flags: response
    0x60, 0xf4, 0xe4, 0xfe,                         // crc32c 0xfee4f460 of 0..28 + body + data
    0xac, 0x02,                                     // body: seq 300 (postcard varint)
    0x05, b'o', b's', b'd', b'.', b'7',             // body: name, length-prefixed
    b'D', b'A', b'T', b'A', b'!',                   // data segment
];

#[test]
fn sample_frame_encodes_to_the_golden_bytes() {
    let encoded = sample().encode().expect("within limits");
    assert_eq!(
        encoded.head.len(),
        32 + 8,
        "header and body travel together"
    );
    assert_eq!(&encoded.data[..], b"DATA!", "data travels separately");
    assert_eq!(encoded.to_vec(), GOLDEN.to_vec());
}

#[test]
fn golden_bytes_decode_to_the_sample_frame() {
    let mut buf = BytesMut::from(&GOLDEN[..]);
    let frame = FrameDecoder::new()
        .decode(&mut buf)
        .expect("valid")
        .expect("complete");
    assert_eq!(frame, sample());
    assert!(buf.is_empty());
    let msg: Sample = frame.decode_body().expect("typed body");
    assert_eq!(
        msg,
        Sample {
            seq: 300,
            name: "osd.7".into()
        }
    );
}

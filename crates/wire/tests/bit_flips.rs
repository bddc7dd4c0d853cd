//! Corruption on the wire is caught: flipping any single bit of an encoded
//! frame (header, body, data or checksum) makes the decoder reject it, by a
//! header check or by the crc32c, and never yields a frame.

use bytes::{Bytes, BytesMut};
use cairn_wire::{Frame, FrameDecoder, WireError};
use proptest::prelude::*;

/// Decodes `bytes` as a complete stream: a frame, or the error that stops it.
fn decode_all(bytes: &[u8]) -> Result<Option<Frame>, WireError> {
    let mut buf = BytesMut::from(bytes);
    let mut decoder = FrameDecoder::new();
    match decoder.decode(&mut buf)? {
        Some(frame) => Ok(Some(frame)),
        None => decoder.decode_eof(&mut buf),
    }
}

fn sample() -> Frame {
    Frame {
        kind: 0x0042,
        request_id: 0x1122_3344_5566_7788,
        is_response: false,
        body: Bytes::from((0u8..24).collect::<Vec<_>>()),
        data: Bytes::from((0u8..=255).cycle().take(200).collect::<Vec<_>>()).into(),
    }
}

#[test]
fn every_single_bit_flip_is_rejected() {
    let good = sample().encode().expect("within limits").to_vec();
    assert!(matches!(decode_all(&good), Ok(Some(_))));
    for offset in 0..good.len() {
        for bit in 0..8 {
            let mut bytes = good.clone();
            bytes[offset] ^= 1 << bit;
            match decode_all(&bytes) {
                Ok(got) => panic!("flip of byte {offset} bit {bit} accepted: {got:?}"),
                Err(error) => check_reason(offset, &error),
            }
        }
    }
}

/// Fields that the header checks cannot judge are covered by the checksum.
fn check_reason(offset: usize, error: &WireError) {
    let expected = match offset {
        0..4 => matches!(error, WireError::Malformed { .. }),
        4..6 => matches!(error, WireError::Version(_)),
        // A length flip is either over the limit, truncated (the stream ends
        // before the longer frame) or a shorter frame whose crc fails.
        16..24 => matches!(
            error,
            WireError::TooLarge { .. } | WireError::Malformed { .. } | WireError::Checksum { .. }
        ),
        // Bit 0 is the response flag (crc); the others are unknown flags.
        24..28 => matches!(
            error,
            WireError::Malformed { .. } | WireError::Checksum { .. }
        ),
        _ => matches!(error, WireError::Checksum { .. }),
    };
    assert!(expected, "flip at byte {offset}: unexpected {error}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_frames_reject_a_random_bit_flip(
        kind in any::<u16>(),
        request_id in any::<u64>(),
        body in proptest::collection::vec(any::<u8>(), 0..200),
        data in proptest::collection::vec(any::<u8>(), 0..2000),
        position in any::<usize>(),
        bit in 0u8..8,
    ) {
        let frame = Frame { kind, request_id, is_response: true, body: body.into(), data: data.into() };
        let mut bytes = frame.encode().expect("within limits").to_vec();
        let offset = position % bytes.len();
        bytes[offset] ^= 1 << bit;
        prop_assert!(decode_all(&bytes).is_err(), "flip at {offset} accepted");
    }
}

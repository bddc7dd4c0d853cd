//! Property tests of the decoder against bytes from outside: arbitrary input
//! in arbitrary chunks never panics, and any sequence of valid frames
//! survives any chunking of its byte stream unchanged.

use bytes::{Bytes, BytesMut};
use cairn_wire::{Frame, FrameDecoder, WireError};
use proptest::prelude::*;

/// Feeds `stream` to a decoder in chunks cut at `cuts` (positions taken
/// modulo the length), the way `read_buf` would deliver it, then ends the
/// stream. Returns the frames decoded before the first error, and the error.
fn decode_chunked(stream: &[u8], cuts: &[usize]) -> (Vec<Frame>, Option<WireError>) {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
    cuts.push(stream.len());
    cuts.sort_unstable();
    let mut decoder = FrameDecoder::new();
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    let mut start = 0;
    for cut in cuts {
        buf.extend_from_slice(&stream[start..cut]);
        start = cut;
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break,
                Err(error) => return (frames, Some(error)),
            }
        }
    }
    match decoder.decode_eof(&mut buf) {
        Ok(None) => (frames, None),
        Ok(Some(frame)) => panic!("decode_eof found a frame decode missed: {frame:?}"),
        Err(error) => (frames, Some(error)),
    }
}

fn arb_frame() -> impl Strategy<Value = Frame> {
    (
        any::<u16>(),
        any::<u64>(),
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..300),
        proptest::collection::vec(any::<u8>(), 0..3000),
    )
        .prop_map(|(kind, request_id, is_response, body, data)| Frame {
            kind,
            request_id,
            is_response,
            body: Bytes::from(body),
            data: Bytes::from(data).into(),
        })
}

fn stream_of(frames: &[Frame]) -> Vec<u8> {
    frames
        .iter()
        .flat_map(|f| f.encode().expect("within limits").to_vec())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..4096),
        cuts in proptest::collection::vec(any::<usize>(), 0..16),
    ) {
        let (frames, _) = decode_chunked(&bytes, &cuts);
        // Random bytes forming a frame with a valid crc32c is a 2^-32 event
        // on top of matching magic and version.
        prop_assert!(frames.is_empty());
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_header_never_panic(
        frame in arb_frame(),
        tail in proptest::collection::vec(any::<u8>(), 0..4096),
        cuts in proptest::collection::vec(any::<usize>(), 0..16),
    ) {
        // Keep the valid 32-byte header, replace what follows with noise.
        let mut bytes = frame.encode().expect("within limits").to_vec();
        bytes.truncate(32);
        bytes.extend_from_slice(&tail);
        let _ = decode_chunked(&bytes, &cuts);
    }

    #[test]
    fn valid_frames_round_trip_through_any_chunking(
        frames in proptest::collection::vec(arb_frame(), 0..8),
        cuts in proptest::collection::vec(any::<usize>(), 0..32),
    ) {
        let stream = stream_of(&frames);
        let (decoded, error) = decode_chunked(&stream, &cuts);
        prop_assert!(error.is_none(), "error {error:?}");
        prop_assert_eq!(decoded, frames);
    }

    /// A stream cut inside a frame is an error after the whole frames
    /// before the cut; one cut between frames (a clean end) is just those
    /// frames.
    #[test]
    fn a_truncated_stream_is_an_error_not_a_frame(
        frames in proptest::collection::vec(arb_frame(), 1..4),
        cut_back in 1usize..64,
    ) {
        let stream = stream_of(&frames);
        let keep = stream.len().saturating_sub(cut_back);
        let (decoded, error) = decode_chunked(&stream[..keep], &[]);
        let mut end = 0;
        let whole = frames
            .iter()
            .take_while(|f| {
                end += f.encode().expect("within limits").to_vec().len();
                end <= keep
            })
            .count();
        let between_frames = stream_of(&frames[..whole]).len() == keep;
        prop_assert_eq!(&decoded[..], &frames[..whole]);
        if between_frames {
            prop_assert!(error.is_none(), "{error:?}");
        } else {
            prop_assert!(matches!(error, Some(WireError::Malformed { .. })), "{error:?}");
        }
    }
}

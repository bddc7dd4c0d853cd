//! One frame: its byte layout, its encoder and its incremental decoder.
//!
//! The layout is documented byte for byte in the crate docs and frozen by
//! the golden-bytes test in `tests/golden.rs`.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::Serialize;
use serde::de::DeserializeOwned;

use cairn_iobuf::IoBuffer;
use cairn_types::checked::CheckedBytes;
use cairn_types::crc;

use crate::error::WireError;
use crate::limits::{
    ALIGNED_DATA_BYTES_MIN, BODY_SIZE_BYTES_MAX, DATA_SIZE_BYTES_MAX, HEADER_SIZE_BYTES,
    READ_RESERVE_BYTES_MAX,
};

/// The first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"CRN1";

/// The protocol version this build writes and the only one it reads.
pub const PROTOCOL_VERSION: u16 = 1;

/// Flags bit 0: this frame answers the request with the same id.
pub const FLAG_RESPONSE: u32 = 1;

/// Every flag bit this version defines; any other set bit is malformed.
const FLAGS_KNOWN: u32 = FLAG_RESPONSE;

/// Bytes of header covered by the checksum (all but the checksum itself).
const HEADER_CHECKED_SIZE_BYTES: usize = 28;

/// A typed message: a serde body plus the message-type number that names it
/// on the wire. The numbers are assigned by the crates that define messages;
/// this crate never interprets them.
pub trait Message: Serialize + DeserializeOwned {
    /// The message type written in header bytes 6..8.
    const KIND: u16;
}

/// One frame as the application sees it.
///
/// `body` and `data` of a received frame are zero-copy slices of the
/// connection's read buffer: holding one keeps that buffer's allocation
/// alive, so copy out anything kept for long. A large data segment (see
/// [`FrameDecoder`]) has a block-aligned buffer of its own instead.
#[derive(Clone, PartialEq, Eq)]
pub struct Frame {
    /// Message type, opaque to this crate.
    pub kind: u16,
    /// Matches a response to its request; 0 for an unsolicited message.
    pub request_id: u64,
    /// Whether this frame answers request `request_id`.
    pub is_response: bool,
    /// Postcard-encoded message body, at most [`BODY_SIZE_BYTES_MAX`].
    pub body: Bytes,
    /// Raw data segment, at most [`DATA_SIZE_BYTES_MAX`]; never passes
    /// through serde. A large received segment carries the crc32c of each
    /// 4 KiB block, computed while the frame was verified; a segment sent
    /// with them has its checksum derived from them, not from its bytes.
    pub data: CheckedBytes,
}

impl std::fmt::Debug for Frame {
    // Lengths, not contents: a data segment can be 256 MiB.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame")
            .field("kind", &self.kind)
            .field("request_id", &self.request_id)
            .field("is_response", &self.is_response)
            .field("body_size_bytes", &self.body.len())
            .field("data_size_bytes", &self.data.len())
            .finish()
    }
}

/// A frame ready for the socket: header and body in one buffer, the data
/// segment separate so it is written without being copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedFrame {
    /// The 32-byte header followed by the body.
    pub head: Bytes,
    /// The data segment, shared with the [`Frame`] it came from.
    pub data: Bytes,
}

impl EncodedFrame {
    /// The whole frame in one contiguous buffer (copies the data; for tests
    /// and small frames).
    #[must_use]
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.head.len() + self.data.len());
        out.extend_from_slice(&self.head);
        out.extend_from_slice(&self.data);
        out
    }

    /// Total bytes this frame occupies on the wire.
    #[must_use]
    pub fn size_bytes(&self) -> usize {
        self.head.len() + self.data.len()
    }
}

impl Frame {
    /// An unsolicited message or a request (the connection assigns the id).
    ///
    /// # Errors
    /// [`WireError::Encode`] if serde refuses `msg`, [`WireError::TooLarge`]
    /// if its body or `data` exceeds the limits.
    pub fn request<M: Message>(msg: &M, data: impl Into<CheckedBytes>) -> Result<Frame, WireError> {
        Ok(Frame {
            kind: M::KIND,
            request_id: 0,
            is_response: false,
            body: encode_body(msg)?,
            data: data.into(),
        })
    }

    /// The response to request `request_id`. The server also stamps the id
    /// and response flag itself, so a handler cannot misroute a reply.
    ///
    /// # Errors
    /// As for [`Frame::request`].
    pub fn response<M: Message>(
        request_id: u64,
        msg: &M,
        data: impl Into<CheckedBytes>,
    ) -> Result<Frame, WireError> {
        Ok(Frame {
            kind: M::KIND,
            request_id,
            is_response: true,
            body: encode_body(msg)?,
            data: data.into(),
        })
    }

    /// Decodes the body as `M`, checking the message type first.
    ///
    /// # Errors
    /// [`WireError::UnexpectedKind`] if the frame is not an `M`;
    /// [`WireError::Body`] if the body does not decode or has trailing bytes.
    pub fn decode_body<M: Message>(&self) -> Result<M, WireError> {
        if self.kind != M::KIND {
            return Err(WireError::UnexpectedKind {
                expected: M::KIND,
                found: self.kind,
            });
        }
        let (msg, rest) = postcard::take_from_bytes::<M>(&self.body)
            .map_err(|e| WireError::Body(e.to_string()))?;
        if !rest.is_empty() {
            return Err(WireError::Body(format!(
                "{} trailing bytes after the message",
                rest.len()
            )));
        }
        Ok(msg)
    }

    /// Lays the frame out for the wire and computes its checksum.
    ///
    /// # Errors
    /// [`WireError::TooLarge`] if `body` or `data` exceeds its limit.
    pub fn encode(&self) -> Result<EncodedFrame, WireError> {
        let body_size_bytes = check_size("body", self.body.len(), BODY_SIZE_BYTES_MAX)?;
        let data_size_bytes = check_size("data", self.data.len(), DATA_SIZE_BYTES_MAX)?;
        let flags = if self.is_response { FLAG_RESPONSE } else { 0 };
        let mut head = BytesMut::with_capacity(HEADER_SIZE_BYTES + self.body.len());
        head.put_slice(&MAGIC);
        head.put_u16_le(PROTOCOL_VERSION);
        head.put_u16_le(self.kind);
        head.put_u64_le(self.request_id);
        head.put_u32_le(body_size_bytes);
        head.put_u32_le(data_size_bytes);
        head.put_u32_le(flags);
        debug_assert_eq!(head.len(), HEADER_CHECKED_SIZE_BYTES);
        let crc = frame_crc(&head, &self.body, &self.data);
        head.put_u32_le(crc);
        head.put_slice(&self.body);
        assert_eq!(head.len(), HEADER_SIZE_BYTES + self.body.len());
        Ok(EncodedFrame {
            head: head.freeze(),
            data: self.data.bytes().clone(),
        })
    }
}

fn encode_body<M: Serialize>(msg: &M) -> Result<Bytes, WireError> {
    let body = postcard::to_allocvec(msg).map_err(|e| WireError::Encode(e.to_string()))?;
    check_size("body", body.len(), BODY_SIZE_BYTES_MAX)?;
    Ok(Bytes::from(body))
}

fn check_size(field: &'static str, size_bytes: usize, limit_bytes: u32) -> Result<u32, WireError> {
    u32::try_from(size_bytes)
        .ok()
        .filter(|&n| n <= limit_bytes)
        .ok_or(WireError::TooLarge {
            field,
            size_bytes: size_bytes as u64,
            limit_bytes: u64::from(limit_bytes),
        })
}

/// crc32c over header bytes 0..28, then the body, then the data; from the
/// data's block checksums when it has them.
fn frame_crc(header_checked: &[u8], body: &[u8], data: &CheckedBytes) -> u32 {
    let crc = crc::crc32c_append(crc::crc32c(header_checked), body);
    match data
        .blocks()
        .and_then(|blocks| crc::crc32c_of_blocks(blocks, data.len()))
    {
        Some(data_crc) => crc::crc32c_combine(crc, data_crc, data.len() as u64),
        None => crc::crc32c_append(crc, data),
    }
}

/// A header whose fields passed every check that needs no payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    kind: u16,
    request_id: u64,
    body_size_bytes: usize,
    data_size_bytes: usize,
    flags: u32,
    crc: u32,
}

impl Header {
    fn frame_size_bytes(&self) -> usize {
        HEADER_SIZE_BYTES + self.body_size_bytes + self.data_size_bytes
    }
}

/// Parses and validates the fixed header. `bytes` holds at least
/// [`HEADER_SIZE_BYTES`].
fn parse_header(mut bytes: &[u8]) -> Result<Header, WireError> {
    let mut magic = [0u8; 4];
    bytes.copy_to_slice(&mut magic);
    if magic != MAGIC {
        return Err(WireError::malformed(format!("bad magic {magic:02x?}")));
    }
    let version = bytes.get_u16_le();
    if version != PROTOCOL_VERSION {
        return Err(WireError::Version(version));
    }
    let kind = bytes.get_u16_le();
    let request_id = bytes.get_u64_le();
    let body_size_bytes = bytes.get_u32_le();
    let data_size_bytes = bytes.get_u32_le();
    let flags = bytes.get_u32_le();
    let crc = bytes.get_u32_le();
    if flags & !FLAGS_KNOWN != 0 {
        return Err(WireError::malformed(format!("unknown flags {flags:#010x}")));
    }
    // Checked before anything is reserved for the payload.
    let body_size_bytes = check_size("body", body_size_bytes as usize, BODY_SIZE_BYTES_MAX)?;
    let data_size_bytes = check_size("data", data_size_bytes as usize, DATA_SIZE_BYTES_MAX)?;
    Ok(Header {
        kind,
        request_id,
        body_size_bytes: body_size_bytes as usize,
        data_size_bytes: data_size_bytes as usize,
        flags,
        crc,
    })
}

/// Incremental frame decoder over a growing read buffer.
///
/// Feed it the `BytesMut` that `read_buf` fills; it consumes whole frames
/// from the front. After it returns an error the stream is out of sync and
/// the connection must be closed.
///
/// A data segment of [`ALIGNED_DATA_BYTES_MIN`] to
/// [`READ_RESERVE_BYTES_MAX`] is received into a buffer of its own, from the
/// process-wide pool of huge-page backed, block-aligned buffers
/// ([`cairn_iobuf`]), instead of the read buffer: the reader fills
/// it straight from the socket ([`FrameDecoder::receiving_data`]), and the
/// store can then write it with `O_DIRECT` without first copying it.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    /// The header of the frame being received, once it has arrived and
    /// passed its checks, so it is parsed once however the bytes trickle in.
    header: Option<Header>,
    /// The aligned data segment being received, once the header and body
    /// before it have arrived.
    receiving: Option<Receiving>,
}

/// A frame whose data segment is arriving into aligned memory.
#[derive(Debug)]
struct Receiving {
    /// Header and body.
    head: Bytes,
    /// At least the segment's length; `filled` bytes received so far.
    data: IoBuffer,
    filled: usize,
}

impl FrameDecoder {
    #[must_use]
    pub fn new() -> FrameDecoder {
        FrameDecoder::default()
    }

    /// Takes one whole frame off the front of `buf`: `Ok(None)` until its
    /// bytes have all arrived.
    ///
    /// # Errors
    /// A protocol violation: bad magic, unsupported version, unknown flags,
    /// oversize lengths (detected from the header alone) or a checksum
    /// mismatch.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, WireError> {
        let header = match self.header {
            Some(header) => header,
            None if buf.len() < HEADER_SIZE_BYTES => return Ok(None),
            None => *self.header.insert(parse_header(&buf[..HEADER_SIZE_BYTES])?),
        };
        let body_end = HEADER_SIZE_BYTES + header.body_size_bytes;
        if receives_aligned(&header) {
            if self.receiving.is_none() {
                if buf.len() < body_end {
                    return Ok(None);
                }
                let data = cairn_iobuf::shared().take(header.data_size_bytes)?;
                let head = buf.split_to(body_end).freeze();
                self.receiving = Some(Receiving {
                    head,
                    data,
                    filled: 0,
                });
            }
            let Some(receiving) = self.receiving.as_mut() else {
                return Ok(None);
            };
            // Data the reader read ahead into `buf` (at most a read chunk).
            let missing = header.data_size_bytes - receiving.filled;
            let moved = missing.min(buf.len());
            let filled = receiving.filled;
            receiving.data.as_mut_slice()[filled..filled + moved].copy_from_slice(&buf[..moved]);
            receiving.filled += moved;
            buf.advance(moved);
            if moved < missing {
                return Ok(None);
            }
            let Some(Receiving { head, data, .. }) = self.receiving.take() else {
                return Ok(None);
            };
            self.header = None;
            let data = cairn_iobuf::shared().lend(data, header.data_size_bytes);
            // Checksummed block by block, so the blocks' checksums travel on
            // with the data (to the store, and into any frame forwarding it).
            let data = CheckedBytes::summed(data);
            return check_frame(&header, &head, head.slice(HEADER_SIZE_BYTES..), data).map(Some);
        }
        let frame_size_bytes = header.frame_size_bytes();
        if buf.len() < frame_size_bytes {
            return Ok(None);
        }
        self.header = None;
        // Zero-copy: the frame, body and data share `buf`'s allocation.
        let bytes = buf.split_to(frame_size_bytes).freeze();
        let body = bytes.slice(HEADER_SIZE_BYTES..body_end);
        let data = bytes.slice(body_end..).into();
        check_frame(&header, &bytes, body, data).map(Some)
    }

    /// The part of the aligned data segment being received that is still
    /// missing, for the reader to fill straight from the socket (from its
    /// start), then to report with [`FrameDecoder::received`].
    pub fn receiving_data(&mut self) -> Option<&mut [u8]> {
        let header = self.header?;
        let receiving = self.receiving.as_mut()?;
        let filled = receiving.filled;
        Some(&mut receiving.data.as_mut_slice()[filled..header.data_size_bytes])
    }

    /// `count` more bytes of the data segment were written at the start of
    /// what [`FrameDecoder::receiving_data`] returned.
    pub fn received(&mut self, count: usize) {
        if let (Some(header), Some(receiving)) = (self.header, self.receiving.as_mut()) {
            receiving.filled = (receiving.filled + count).min(header.data_size_bytes);
        }
    }

    /// Like [`FrameDecoder::decode`], for when the stream has ended: bytes
    /// left over that do not form a whole frame are an error.
    ///
    /// # Errors
    /// As for `decode`, plus [`WireError::Malformed`] for a truncated frame.
    pub fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, WireError> {
        match self.decode(buf)? {
            Some(frame) => Ok(Some(frame)),
            None if buf.is_empty() && self.header.is_none() => Ok(None),
            None => {
                let received = self.received_bytes(buf.len());
                Err(WireError::malformed(format!(
                    "stream ended inside a frame ({} bytes of {} received)",
                    received,
                    self.bytes_wanted(buf.len()) + received
                )))
            }
        }
    }

    /// Bytes of the current frame received so far, given `buffered_bytes`
    /// in the read buffer.
    fn received_bytes(&self, buffered_bytes: usize) -> usize {
        match &self.receiving {
            Some(r) => r.head.len() + r.filled + buffered_bytes,
            None => buffered_bytes,
        }
    }

    /// How many more bytes the next frame needs, given `buffered_bytes`
    /// already received into the read buffer: the rest of the header, of the
    /// whole frame once its header is known, or of the header and body when
    /// its data segment is to be received into aligned memory. A hint for
    /// how much to reserve and read.
    #[must_use]
    pub fn bytes_wanted(&self, buffered_bytes: usize) -> usize {
        let Some(header) = self.header else {
            return HEADER_SIZE_BYTES.saturating_sub(buffered_bytes);
        };
        if receives_aligned(&header) {
            return match &self.receiving {
                Some(r) => (header.data_size_bytes - r.filled).saturating_sub(buffered_bytes),
                None => (HEADER_SIZE_BYTES + header.body_size_bytes).saturating_sub(buffered_bytes),
            };
        }
        header.frame_size_bytes().saturating_sub(buffered_bytes)
    }
}

/// Whether a frame's data segment is received into its own aligned buffer:
/// large enough to be written to disk directly, small enough to allocate up
/// front (a header alone must not pin more than the reserve limit).
fn receives_aligned(header: &Header) -> bool {
    (ALIGNED_DATA_BYTES_MIN..=READ_RESERVE_BYTES_MAX).contains(&header.data_size_bytes)
}

/// Verifies a received frame's checksum and assembles it. `head` starts
/// with the header.
fn check_frame(
    header: &Header,
    head: &[u8],
    body: Bytes,
    data: CheckedBytes,
) -> Result<Frame, WireError> {
    let computed = frame_crc(&head[..HEADER_CHECKED_SIZE_BYTES], &body, &data);
    if computed != header.crc {
        return Err(WireError::Checksum {
            stored: header.crc,
            computed,
        });
    }
    Ok(Frame {
        kind: header.kind,
        request_id: header.request_id,
        is_response: header.flags & FLAG_RESPONSE != 0,
        body,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Ping {
        seq: u32,
        note: String,
    }
    impl Message for Ping {
        const KIND: u16 = 7;
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Pong {
        seq: u32,
    }
    impl Message for Pong {
        const KIND: u16 = 8;
    }

    fn sample() -> Frame {
        Frame {
            kind: 3,
            request_id: 42,
            is_response: true,
            body: Bytes::from_static(b"body"),
            data: Bytes::from_static(b"the data segment").into(),
        }
    }

    fn encoded(frame: &Frame) -> Vec<u8> {
        frame.encode().map(|e| e.to_vec()).unwrap_or_default()
    }

    #[test]
    fn round_trips_one_frame_and_consumes_exactly_it() {
        let frame = sample();
        let mut buf = BytesMut::from(&encoded(&frame)[..]);
        buf.extend_from_slice(b"CRN"); // the start of a next frame stays put
        let got = FrameDecoder::new().decode(&mut buf);
        assert_eq!(got.ok().flatten(), Some(frame));
        assert_eq!(&buf[..], b"CRN");
    }

    #[test]
    fn decoded_body_and_data_alias_the_read_buffer() {
        let frame = sample();
        let mut buf = BytesMut::with_capacity(1024);
        buf.extend_from_slice(&encoded(&frame));
        let start = buf.as_ptr() as usize;
        let range = start..start + buf.len();
        let got = FrameDecoder::new().decode(&mut buf).ok().flatten();
        let got = got.expect("a whole frame was buffered");
        assert!(range.contains(&(got.body.as_ptr() as usize)));
        assert!(range.contains(&(got.data.as_ptr() as usize)));
    }

    #[test]
    fn waits_for_the_whole_frame() {
        let bytes = encoded(&sample());
        let mut decoder = FrameDecoder::new();
        let mut buf = BytesMut::new();
        for (i, byte) in bytes.iter().enumerate() {
            assert!(matches!(decoder.decode(&mut buf), Ok(None)));
            let target = if i < HEADER_SIZE_BYTES {
                HEADER_SIZE_BYTES
            } else {
                bytes.len()
            };
            assert_eq!(decoder.bytes_wanted(buf.len()), target - i);
            buf.put_u8(*byte);
        }
        assert_eq!(decoder.decode(&mut buf).ok().flatten(), Some(sample()));
    }

    #[test]
    fn a_large_data_segment_arrives_in_aligned_memory_however_it_is_cut() {
        let frame = Frame {
            data: Bytes::from(
                (0..ALIGNED_DATA_BYTES_MIN + 123)
                    .map(|i| i as u8)
                    .collect::<Vec<u8>>(),
            )
            .into(),
            ..sample()
        };
        let mut bytes = encoded(&frame);
        bytes.extend_from_slice(b"CRN"); // the start of a next frame
        for piece in [1, 1000, 65_536, bytes.len()] {
            let mut decoder = FrameDecoder::new();
            let mut buf = BytesMut::new();
            let mut got = None;
            let mut fed = 0;
            for chunk in bytes.chunks(piece) {
                if got.is_some() {
                    buf.extend_from_slice(chunk);
                    continue;
                }
                buf.extend_from_slice(chunk);
                fed += chunk.len();
                got = decoder.decode(&mut buf).expect("valid frame");
                assert!(
                    got.is_none() || fed >= bytes.len() - 3,
                    "piece {piece}: early"
                );
                // What the reader would append straight from the socket.
                let missing = decoder.receiving_data().map(|rest| rest.len());
                if let Some(missing) = missing {
                    assert!(missing > 0);
                    assert_eq!(decoder.bytes_wanted(0), missing);
                }
            }
            let got = got.expect("the frame completes");
            assert_eq!(got, frame, "piece {piece}");
            assert!(cairn_iobuf::is_aligned(&got.data), "piece {piece}");
            assert_eq!(&buf[..], b"CRN", "piece {piece}");
        }
    }

    #[test]
    fn a_large_segment_arrives_with_its_block_checksums_which_a_forward_reuses() {
        let data: Vec<u8> = (0..3 * ALIGNED_DATA_BYTES_MIN + 777)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let frame = Frame {
            data: Bytes::from(data.clone()).into(),
            ..sample()
        };
        let bytes = encoded(&frame);
        let mut buf = BytesMut::from(&bytes[..]);
        let got = FrameDecoder::new()
            .decode(&mut buf)
            .ok()
            .flatten()
            .expect("a whole frame");
        let blocks = cairn_types::crc::block_crc32c(&data);
        assert_eq!(got.data.blocks(), Some(&blocks[..]));
        // Forwarded, its checksum comes from the blocks: the same bytes.
        let forward = Frame {
            data: got.data.clone(),
            ..frame.clone()
        };
        assert_eq!(encoded(&forward), bytes);
        // Block checksums that do not belong to the bytes give a frame
        // checksum the receiver rejects.
        let mut wrong = blocks.clone();
        wrong[2] ^= 0x10;
        let forged = Frame {
            data: CheckedBytes::with_blocks(Bytes::from(data), wrong.into()),
            ..frame
        };
        let mut buf = BytesMut::from(&encoded(&forged)[..]);
        assert!(matches!(
            FrameDecoder::new().decode(&mut buf),
            Err(WireError::Checksum { .. })
        ));
    }

    #[test]
    fn a_large_data_segment_can_be_appended_to_directly() {
        let frame = Frame {
            data: Bytes::from(vec![9u8; 3 * ALIGNED_DATA_BYTES_MIN]).into(),
            ..sample()
        };
        let bytes = encoded(&frame);
        let mut decoder = FrameDecoder::new();
        let mut buf = BytesMut::from(&bytes[..HEADER_SIZE_BYTES + 4 + 10]);
        assert!(matches!(decoder.decode(&mut buf), Ok(None)));
        assert!(buf.is_empty(), "the head and read-ahead data were taken");
        let mut at = HEADER_SIZE_BYTES + 4 + 10;
        while let Some(rest) = decoder.receiving_data() {
            let n = rest.len().min(50_000);
            rest[..n].copy_from_slice(&bytes[at..at + n]);
            decoder.received(n);
            at += n;
            if let Some(got) = decoder.decode(&mut buf).expect("valid frame") {
                assert_eq!(got, frame);
                assert_eq!(at, bytes.len());
                return;
            }
        }
        panic!("the frame never completed");
    }

    #[test]
    fn rejects_oversize_lengths_from_the_header_alone() {
        let mut bytes = encoded(&sample());
        bytes[20..24].copy_from_slice(&(DATA_SIZE_BYTES_MAX + 1).to_le_bytes());
        let mut buf = BytesMut::from(&bytes[..HEADER_SIZE_BYTES]);
        let err = FrameDecoder::new().decode(&mut buf);
        assert!(matches!(
            err,
            Err(WireError::TooLarge { field: "data", .. })
        ));
        assert!(
            buf.capacity() < 1024,
            "nothing reserved for a rejected frame"
        );

        bytes[16..20].copy_from_slice(&(BODY_SIZE_BYTES_MAX + 1).to_le_bytes());
        let mut buf = BytesMut::from(&bytes[..HEADER_SIZE_BYTES]);
        let err = FrameDecoder::new().decode(&mut buf);
        assert!(matches!(
            err,
            Err(WireError::TooLarge { field: "body", .. })
        ));
    }

    #[test]
    fn rejects_bad_magic_version_and_flags() {
        let good = encoded(&sample());
        type Expected = fn(&WireError) -> bool;
        let cases: [(usize, u8, Expected); 3] = [
            (0, b'X', |e| matches!(e, WireError::Malformed { .. })),
            (4, 2, |e| matches!(e, WireError::Version(2))),
            (24, 3, |e| matches!(e, WireError::Malformed { .. })),
        ];
        for (offset, value, expected) in cases {
            let mut bytes = good.clone();
            bytes[offset] = value;
            let mut buf = BytesMut::from(&bytes[..]);
            match FrameDecoder::new().decode(&mut buf) {
                Err(e) => assert!(expected(&e), "offset {offset}: {e}"),
                Ok(got) => panic!("offset {offset}: accepted {got:?}"),
            }
        }
    }

    #[test]
    fn encode_refuses_oversize_segments() {
        let mut frame = sample();
        frame.body = Bytes::from(vec![0u8; BODY_SIZE_BYTES_MAX as usize + 1]);
        assert!(matches!(
            frame.encode(),
            Err(WireError::TooLarge { field: "body", .. })
        ));
    }

    #[test]
    fn decode_eof_reports_a_truncated_frame() {
        let bytes = encoded(&sample());
        let mut buf = BytesMut::from(&bytes[..bytes.len() - 1]);
        let mut decoder = FrameDecoder::new();
        assert!(matches!(
            decoder.decode_eof(&mut buf),
            Err(WireError::Malformed { .. })
        ));
        let mut empty = BytesMut::new();
        assert!(matches!(
            FrameDecoder::new().decode_eof(&mut empty),
            Ok(None)
        ));
    }

    #[test]
    fn typed_bodies_round_trip_and_check_their_kind() {
        let ping = Ping {
            seq: 9,
            note: "hello".into(),
        };
        let frame = Frame::request(&ping, Bytes::new()).expect("small body encodes");
        assert_eq!(frame.kind, Ping::KIND);
        assert_eq!(frame.decode_body::<Ping>().ok(), Some(ping));
        assert!(matches!(
            frame.decode_body::<Pong>(),
            Err(WireError::UnexpectedKind {
                expected: 8,
                found: 7
            })
        ));
    }

    #[test]
    fn body_with_trailing_or_missing_bytes_is_a_body_error() {
        let mut frame = Frame::response(1, &Pong { seq: 5 }, Bytes::new()).expect("encodes");
        let mut body = frame.body.to_vec();
        body.push(0);
        frame.body = Bytes::from(body);
        assert!(matches!(
            frame.decode_body::<Pong>(),
            Err(WireError::Body(_))
        ));
        frame.body = Bytes::new();
        assert!(matches!(
            frame.decode_body::<Pong>(),
            Err(WireError::Body(_))
        ));
    }
}

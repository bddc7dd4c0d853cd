//! Typed, versioned, checksummed frames over TCP, and connections that carry
//! many requests at once: the transport every Cairn daemon and client speaks.
//!
//! This crate moves frames and matches responses to requests. It does not
//! know what any message means (mon, osd and client define the messages and
//! their `kind` numbers), it does not retry, reconnect or authenticate, and
//! it has no notion of peers beyond one socket: a server hands each handler
//! the [`Session`] of the connection, which a daemon's own handshake binds
//! to a peer identity, and a client may bind its socket to a source
//! address ([`ConnectOptions::bind_ip`]) so the server can check it.
//!
//! The one design choice to know: a frame's bulk payload travels as a raw
//! **data segment** beside the small postcard body, never through serde. It
//! is sent from the caller's [`bytes::Bytes`] without being copied (header
//! and body in one write, then the data) and received into the read buffer
//! as a zero-copy slice of it. Serializing a 4 MiB payload through serde as
//! `Vec<u8>` is two orders of magnitude slower.
//!
//! # Frame format (protocol version 1)
//!
//! A fixed 32-byte header, all integers little-endian, then the body, then
//! the data segment:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic, the ASCII bytes `CRN1` |
//! | 4 | 2 | protocol version, `u16`, currently 1 |
//! | 6 | 2 | message type (`kind`), `u16`, opaque to this crate |
//! | 8 | 8 | request id, `u64`; 0 marks an unsolicited (one-way) message |
//! | 16 | 4 | body length in bytes, `u32`, at most 1 MiB |
//! | 20 | 4 | data length in bytes, `u32`, at most 256 MiB |
//! | 24 | 4 | flags, `u32`: bit 0 = response; every other bit must be 0 |
//! | 28 | 4 | crc32c (Castagnoli) over bytes 0..28, then the body, then the data |
//! | 32 | body length | body: a postcard-encoded message |
//! | 32 + body length | data length | data segment: raw bytes |
//!
//! A receiver checks magic, version, flags and both lengths from the header
//! alone, before it reserves room for the payload, and the checksum once
//! the frame is complete. A data segment received into aligned memory (64
//! KiB to 16 MiB) is checksummed in 4 KiB blocks, and the frame's checksum
//! derived from theirs (crc32c combines without the bytes); the blocks'
//! checksums travel on with the data ([`cairn_types::checked::CheckedBytes`])
//! to the store, which keeps them as the object's block checksums, and to
//! any frame that forwards the data, whose checksum is again derived from
//! them. The bytes on the wire are the same either way. Any failure is a
//! protocol violation: the
//! connection is closed and the reason logged with the peer's address;
//! nothing panics. The bounds are in [`limits`]; `tests/golden.rs` freezes
//! the bytes of a sample frame.
//!
//! # Connections
//!
//! [`Connection`] is the client: a clonable handle over one socket with a
//! writer task and a reader task; calls get increasing request ids, many are
//! in flight at once, responses may arrive in any order, each call has a
//! timeout, and when the socket dies every pending call fails at once.
//! [`serve`] is the server: it runs a [`Handler`] per request, concurrently
//! and bounded per connection, and writes responses as they finish.
//!
//! # Priority traffic
//!
//! Frames on one connection share one ordered byte stream, so a heartbeat
//! queued behind a 256 MiB data segment waits for it. Traffic that must not
//! wait (heartbeats, lease renewals) should use a separate [`Connection`] to
//! the same peer, which carries only small frames; nothing else here is
//! needed for that.

pub mod limits;

mod connection;
mod error;
mod frame;
mod io;
mod server;

pub use connection::{ConnectOptions, Connection};
pub use error::WireError;
pub use frame::{
    EncodedFrame, FLAG_RESPONSE, Frame, FrameDecoder, MAGIC, Message, PROTOCOL_VERSION,
};
pub use io::FrameReader;
pub use server::{Handler, ServeOptions, Session, serve};

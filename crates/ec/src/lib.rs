//! Erasure coding for Cairn's erasure-coded pools: a Reed–Solomon code
//! behind the [`Codec`] trait ([`ReedSolomon`], on `reed-solomon-simd`'s
//! SIMD engine), the [`StripeLayout`] that maps an object's bytes onto
//! `k` data shards and `m` parity shards, and whole objects to shards and
//! back ([`object`]: split, join, rebuild, gather, and [`object::check`],
//! which re-encodes an object to find shards that disagree with its parity).
//!
//! Pure: no I/O, no async, no clock. The OSD's EC backend decides what to
//! read and write; this crate computes what the bytes are.
//!
//! The choices to know (see `docs/erasure-coding.md`):
//! - shard `i` of an object is the `i`-th chunk column: data shards
//!   `0..k`, parity shards `k..k+m`, stored on position `i` of the acting
//!   set;
//! - an object is striped in chunks of its own **chunk size**: the pool's
//!   stripe unit for objects of a stripe or more, less for smaller ones
//!   (their size over `k`, rounded up to [`CHUNK_ALIGN`]), so a small
//!   object costs its size times `(k + m) / k`, never a whole stripe;
//! - the code is linear over GF(2^16): a write that changes data shard
//!   `i` by `delta` (old XOR new) changes each parity shard by the code of
//!   `delta` alone ([`Codec::parity_delta`]), so a partial write need not
//!   read the untouched data shards.

pub mod codec;
pub mod layout;
pub mod object;

pub use codec::{CODE_BLOCK_BYTES, Codec, CodecError, ReedSolomon};
pub use layout::{CHUNK_ALIGN, Extent, LayoutError, StripeLayout};
pub use object::{ObjectError, Parity, Shards};

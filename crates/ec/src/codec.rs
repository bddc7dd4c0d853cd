//! The code: `k` data chunks of one length in, `m` parity chunks of that
//! length out; any `k` of the `k + m` rebuild the rest.

use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};
use std::sync::Mutex;

/// Why a coding call failed: always a caller's mistake or too few shards,
/// never the data's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("erasure code {k}+{m} is not supported (k >= 1, m >= 1, k + m <= {max})")]
    Unsupported { k: usize, m: usize, max: usize },
    #[error("expected {expected} chunks, got {got}")]
    ChunkCount { expected: usize, got: usize },
    #[error("chunks differ in length ({first} and {other} bytes)")]
    ChunkLengths { first: usize, other: usize },
    #[error("data shard {index} is out of range for k = {k}")]
    ShardIndex { index: usize, k: usize },
    #[error("only {present} of the {k} shards needed are present")]
    TooFewShards { present: usize, k: usize },
    #[error("the coding library refused: {0}")]
    Library(String),
}

/// An erasure code over chunks of equal length.
pub trait Codec: Send + Sync {
    /// Data shards.
    fn k(&self) -> usize;
    /// Parity shards.
    fn m(&self) -> usize;

    /// Computes the `m` parity chunks of `data` (`k` chunks of one
    /// length) into `parity` (`m` buffers of that length).
    ///
    /// # Errors
    /// Wrong counts or lengths.
    fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodecError>;

    /// Rebuilds every missing chunk of `shards` (`k + m` entries, data
    /// then parity, `None` where lost) from any `k` present ones.
    ///
    /// # Errors
    /// Fewer than `k` present, or present chunks of different lengths.
    fn reconstruct(&self, shards: &mut [Option<Vec<u8>>]) -> Result<(), CodecError>;

    /// Adds to `parity` (the `m` parity chunks over some byte range) the
    /// change of data shard `index` by `delta` (its old bytes XOR its new
    /// ones over that range): afterwards `parity` is the parity of the
    /// new data. The range starts at a multiple of
    /// [`CODE_BLOCK_BYTES`](crate::CODE_BLOCK_BYTES) of the chunks.
    ///
    /// # Errors
    /// An index past `k`, or lengths that differ.
    fn parity_delta(
        &self,
        index: usize,
        delta: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodecError>;
}

/// Largest `k + m` accepted (the pool's shards each need a failure
/// domain long before this).
pub const SHARDS_MAX: usize = 256;

/// Reed–Solomon over GF(2^16) (`reed-solomon-simd`: O(n log n), SIMD on
/// x86-64 and AArch64).
pub struct ReedSolomon {
    k: usize,
    m: usize,
    /// Kept between calls: their working space is the costly part.
    encoder: Mutex<Option<ReedSolomonEncoder>>,
    decoder: Mutex<Option<ReedSolomonDecoder>>,
    /// A parity delta's zero chunk and parity change.
    scratch: Mutex<(Vec<u8>, Vec<Vec<u8>>)>,
    /// One parity shard that is the XOR of the data shards (the library's
    /// code for `m` = 1, checked at construction): one missing shard is
    /// then the XOR of the others, without the decoder's fixed cost (an
    /// evaluation over the whole field, about 0.1 ms per call, which
    /// dominates a degraded read of small chunks).
    xor_parity: bool,
}

impl std::fmt::Debug for ReedSolomon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReedSolomon({}+{})", self.k, self.m)
    }
}

fn lib(e: reed_solomon_simd::Error) -> CodecError {
    CodecError::Library(e.to_string())
}

/// The library codes chunks in blocks of this many bytes, each block's
/// 32 symbols of GF(2^16) with their low bytes first and their high bytes
/// 32 bytes later; a last, shorter block is laid out differently. So every
/// chunk is coded as its zero extension to whole blocks (the code is
/// linear: the extra parity bytes are simply dropped). The code of a byte
/// then depends only on the bytes of its own block: a range of chunks
/// coded on its own from an offset that is a multiple of this agrees with
/// the code of the whole chunks, whatever their lengths. Callers that code
/// pieces (a stripe, a degraded read's span, a parity delta) start them
/// at such offsets.
pub const CODE_BLOCK_BYTES: usize = 64;

fn coded_len(len: usize) -> usize {
    len.div_ceil(CODE_BLOCK_BYTES) * CODE_BLOCK_BYTES
}

fn padded(chunk: &[u8], len: usize) -> std::borrow::Cow<'_, [u8]> {
    if chunk.len() == len {
        std::borrow::Cow::Borrowed(chunk)
    } else {
        let mut v = chunk.to_vec();
        v.resize(len, 0);
        std::borrow::Cow::Owned(v)
    }
}

impl ReedSolomon {
    /// # Errors
    /// `k` or `m` zero, or `k + m` past [`SHARDS_MAX`].
    pub fn new(k: usize, m: usize) -> Result<ReedSolomon, CodecError> {
        if k == 0 || m == 0 || k + m > SHARDS_MAX || !ReedSolomonEncoder::supports(k, m) {
            return Err(CodecError::Unsupported {
                k,
                m,
                max: SHARDS_MAX,
            });
        }
        let mut codec = ReedSolomon {
            k,
            m,
            encoder: Mutex::new(None),
            decoder: Mutex::new(None),
            scratch: Mutex::new((Vec::new(), Vec::new())),
            xor_parity: false,
        };
        codec.xor_parity = m == 1 && codec.parity_is_xor()?;
        Ok(codec)
    }

    /// Whether this code's one parity chunk is the XOR of the data chunks,
    /// on a probe of two code blocks of varied bytes.
    fn parity_is_xor(&self) -> Result<bool, CodecError> {
        let len = 2 * CODE_BLOCK_BYTES;
        let data: Vec<Vec<u8>> = (0..self.k)
            .map(|i| {
                (0..len)
                    .map(|j| ((i * 131 + j * 7 + 1) % 251) as u8)
                    .collect()
            })
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut parity = vec![0u8; len];
        self.encode_into(&refs, len, &mut [parity.as_mut_slice()])?;
        let mut xor = vec![0u8; len];
        for chunk in &refs {
            xor_into(&mut xor, chunk);
        }
        Ok(parity == xor)
    }

    fn same_length(chunks: &[&[u8]]) -> Result<usize, CodecError> {
        let first = chunks.first().map_or(0, |c| c.len());
        if let Some(other) = chunks.iter().find(|c| c.len() != first) {
            return Err(CodecError::ChunkLengths {
                first,
                other: other.len(),
            });
        }
        Ok(first)
    }

    /// The parity of `data` (all of one length `len`), into `parity`.
    fn encode_into(
        &self,
        data: &[&[u8]],
        len: usize,
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodecError> {
        if len == 0 {
            return Ok(());
        }
        let coded = coded_len(len);
        let mut slot = self
            .encoder
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let encoder = match slot.as_mut() {
            Some(e) => {
                e.reset(self.k, self.m, coded).map_err(lib)?;
                e
            }
            None => slot.insert(ReedSolomonEncoder::new(self.k, self.m, coded).map_err(lib)?),
        };
        for chunk in data {
            encoder
                .add_original_shard(padded(chunk, coded))
                .map_err(lib)?;
        }
        let result = encoder.encode().map_err(lib)?;
        for (out, made) in parity.iter_mut().zip(result.recovery_iter()) {
            out.copy_from_slice(&made[..len]);
        }
        Ok(())
    }
}

impl Codec for ReedSolomon {
    fn k(&self) -> usize {
        self.k
    }

    fn m(&self) -> usize {
        self.m
    }

    fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodecError> {
        if data.len() != self.k {
            return Err(CodecError::ChunkCount {
                expected: self.k,
                got: data.len(),
            });
        }
        if parity.len() != self.m {
            return Err(CodecError::ChunkCount {
                expected: self.m,
                got: parity.len(),
            });
        }
        let len = Self::same_length(data)?;
        if let Some(p) = parity.iter().find(|p| p.len() != len) {
            return Err(CodecError::ChunkLengths {
                first: len,
                other: p.len(),
            });
        }
        self.encode_into(data, len, parity)
    }

    fn reconstruct(&self, shards: &mut [Option<Vec<u8>>]) -> Result<(), CodecError> {
        let (k, m) = (self.k, self.m);
        if shards.len() != k + m {
            return Err(CodecError::ChunkCount {
                expected: k + m,
                got: shards.len(),
            });
        }
        let present: Vec<&[u8]> = shards.iter().flatten().map(Vec::as_slice).collect();
        if present.len() < k {
            return Err(CodecError::TooFewShards {
                present: present.len(),
                k,
            });
        }
        let len = Self::same_length(&present)?;
        if present.len() == k + m {
            return Ok(());
        }
        if self.xor_parity
            && let Some(missing) = shards.iter().position(Option::is_none)
        {
            // k + 1 shards, one missing: the XOR of the other k.
            let mut made = vec![0u8; len];
            for chunk in shards.iter().flatten() {
                xor_into(&mut made, chunk);
            }
            shards[missing] = Some(made);
            return Ok(());
        }
        let data_missing = shards[..k].iter().any(Option::is_none);
        if data_missing {
            if len == 0 {
                for s in shards[..k].iter_mut() {
                    s.get_or_insert_with(Vec::new);
                }
            } else {
                let coded = coded_len(len);
                let mut slot = self
                    .decoder
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let decoder = match slot.as_mut() {
                    Some(d) => {
                        d.reset(k, m, coded).map_err(lib)?;
                        d
                    }
                    None => slot.insert(ReedSolomonDecoder::new(k, m, coded).map_err(lib)?),
                };
                for (i, s) in shards[..k].iter().enumerate() {
                    if let Some(chunk) = s {
                        decoder
                            .add_original_shard(i, padded(chunk, coded))
                            .map_err(lib)?;
                    }
                }
                for (j, s) in shards[k..].iter().enumerate() {
                    if let Some(chunk) = s {
                        decoder
                            .add_recovery_shard(j, padded(chunk, coded))
                            .map_err(lib)?;
                    }
                }
                let result = decoder.decode().map_err(lib)?;
                let mut restored: Vec<(usize, Vec<u8>)> = Vec::new();
                for (i, s) in shards[..k].iter().enumerate() {
                    if s.is_none() {
                        let chunk = result.restored_original(i).ok_or_else(|| {
                            CodecError::Library(format!("shard {i} not restored"))
                        })?;
                        restored.push((i, chunk[..len].to_vec()));
                    }
                }
                drop(result);
                drop(slot);
                for (i, chunk) in restored {
                    shards[i] = Some(chunk);
                }
            }
        }
        if shards[k..].iter().any(Option::is_none) {
            let mut parity = vec![vec![0u8; len]; m];
            {
                let data: Vec<&[u8]> = shards[..k].iter().flatten().map(Vec::as_slice).collect();
                let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
                self.encode_into(&data, len, &mut outs)?;
            }
            for (slot, made) in shards[k..].iter_mut().zip(parity) {
                if slot.is_none() {
                    *slot = Some(made);
                }
            }
        }
        Ok(())
    }

    fn parity_delta(
        &self,
        index: usize,
        delta: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodecError> {
        if index >= self.k {
            return Err(CodecError::ShardIndex { index, k: self.k });
        }
        if parity.len() != self.m {
            return Err(CodecError::ChunkCount {
                expected: self.m,
                got: parity.len(),
            });
        }
        let len = delta.len();
        if let Some(p) = parity.iter().find(|p| p.len() != len) {
            return Err(CodecError::ChunkLengths {
                first: len,
                other: p.len(),
            });
        }
        // The code of `delta` alone in column `index`: the parity of data
        // that is zero everywhere else (scratch kept between calls, as
        // fresh zeroed buffers of this size cost page faults each time).
        let mut scratch = self
            .scratch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (zero, change) = &mut *scratch;
        if zero.len() < len {
            zero.resize(len, 0);
        }
        change.resize_with(self.m, Vec::new);
        for c in change.iter_mut() {
            c.resize(len, 0);
        }
        let data: Vec<&[u8]> = (0..self.k)
            .map(|i| if i == index { delta } else { &zero[..len] })
            .collect();
        {
            let mut outs: Vec<&mut [u8]> = change.iter_mut().map(|c| &mut c[..len]).collect();
            self.encode_into(&data, len, &mut outs)?;
        }
        for (p, c) in parity.iter_mut().zip(change.iter()) {
            xor_into(p, &c[..len]);
        }
        Ok(())
    }
}

/// `into ^= from`, byte by byte (the additions of GF(2^16)).
pub fn xor_into(into: &mut [u8], from: &[u8]) {
    let n = into.len().min(from.len());
    let (into, from) = (&mut into[..n], &from[..n]);
    let mut wide_into = into.chunks_exact_mut(8);
    let mut wide_from = from.chunks_exact(8);
    for (a, b) in (&mut wide_into).zip(&mut wide_from) {
        let x = u64::from_ne_bytes(a.try_into().unwrap_or([0; 8]))
            ^ u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
        a.copy_from_slice(&x.to_ne_bytes());
    }
    for (a, b) in wide_into
        .into_remainder()
        .iter_mut()
        .zip(wide_from.remainder())
    {
        *a ^= b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The code is local to 64-byte blocks whatever the chunk length: the
    /// parity of a chunk is the prefix of the parity of its zero
    /// extension, and a block-aligned piece coded alone gives the same
    /// bytes as the whole (what stripes rewritten one at a time, degraded
    /// reads of a span and rebuilt shards of any length rely on).
    #[test]
    fn the_code_of_a_byte_depends_only_on_its_block() {
        let code = ReedSolomon::new(3, 2).expect("3+2");
        for len in [1usize, 2, 63, 64, 65, 111, 1000, 4097] {
            let data: Vec<Vec<u8>> = (0..3u8)
                .map(|j| (0..len).map(|i| (i as u8).wrapping_mul(7) ^ j).collect())
                .collect();
            let short = parity_of(&code, &data);
            let long: Vec<Vec<u8>> = data
                .iter()
                .map(|d| {
                    let mut d = d.clone();
                    d.resize(len + 200, 0);
                    d
                })
                .collect();
            let long = parity_of(&code, &long);
            for (s, l) in short.iter().zip(&long) {
                assert_eq!(
                    &l[..len],
                    &s[..],
                    "{len} bytes: a prefix of the longer code"
                );
            }
            let from = len / 2 / CODE_BLOCK_BYTES * CODE_BLOCK_BYTES;
            let piece: Vec<Vec<u8>> = data.iter().map(|d| d[from..].to_vec()).collect();
            for (p, s) in parity_of(&code, &piece).iter().zip(&short) {
                assert_eq!(&s[from..], &p[..], "{len} bytes from {from}: the same code");
            }
        }
    }

    fn chunks(k: usize, len: usize, seed: u8) -> Vec<Vec<u8>> {
        (0..k)
            .map(|i| {
                (0..len)
                    .map(|b| (b as u8).wrapping_mul(31) ^ (i as u8).wrapping_mul(7) ^ seed)
                    .collect()
            })
            .collect()
    }

    fn parity_of(code: &ReedSolomon, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let len = data[0].len();
        let mut parity = vec![vec![0u8; len]; code.m()];
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        code.encode(&refs, &mut outs).expect("encode");
        parity
    }

    /// Every set of lost shards of the given sizes.
    fn loss_patterns(n: usize, up_to: usize) -> Vec<Vec<usize>> {
        (0u32..1 << n)
            .filter(|mask| (mask.count_ones() as usize) <= up_to)
            .map(|mask| (0..n).filter(|i| mask & (1 << i) != 0).collect())
            .collect()
    }

    #[test]
    fn every_pattern_of_up_to_m_lost_shards_rebuilds_byte_exact() {
        for (k, m) in [(2, 1), (3, 1), (4, 2), (8, 3)] {
            let code = ReedSolomon::new(k, m).expect("code");
            // One parity chunk is the data's XOR, and rebuilt as such.
            assert_eq!(code.xor_parity, m == 1, "{k}+{m}");
            // Odd and even lengths, one byte, a few KiB.
            for len in [1, 2, 63, 4096, 4097] {
                let data = chunks(k, len, 5);
                let parity = parity_of(&code, &data);
                let all: Vec<Vec<u8>> = data.iter().chain(&parity).cloned().collect();
                for lost in loss_patterns(k + m, m) {
                    let mut shards: Vec<Option<Vec<u8>>> = all.iter().cloned().map(Some).collect();
                    for i in &lost {
                        shards[*i] = None;
                    }
                    code.reconstruct(&mut shards).expect("reconstruct");
                    for (i, s) in shards.iter().enumerate() {
                        assert_eq!(
                            s.as_deref(),
                            Some(all[i].as_slice()),
                            "{k}+{m}, {len} bytes, lost {lost:?}: shard {i}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn more_than_m_lost_is_refused() {
        let code = ReedSolomon::new(4, 2).expect("code");
        let data = chunks(4, 64, 1);
        let parity = parity_of(&code, &data);
        let mut shards: Vec<Option<Vec<u8>>> = data.into_iter().chain(parity).map(Some).collect();
        shards[0] = None;
        shards[3] = None;
        shards[5] = None;
        assert_eq!(
            code.reconstruct(&mut shards),
            Err(CodecError::TooFewShards { present: 3, k: 4 })
        );
    }

    #[test]
    fn bad_shapes_are_refused() {
        for (k, m) in [(0, 1), (1, 0), (200, 57)] {
            assert!(ReedSolomon::new(k, m).is_err(), "{k}+{m}");
        }
        let code = ReedSolomon::new(2, 1).expect("code");
        let a = [1u8; 4];
        let b = [2u8; 6];
        let mut p = [0u8; 4];
        assert!(matches!(
            code.encode(&[&a, &b], &mut [&mut p]),
            Err(CodecError::ChunkLengths { .. })
        ));
        assert!(matches!(
            code.encode(&[&a], &mut [&mut p]),
            Err(CodecError::ChunkCount { .. })
        ));
        assert!(matches!(
            code.parity_delta(2, &a, &mut [&mut p]),
            Err(CodecError::ShardIndex { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// A parity-delta update gives the parity a full encode of the new
        /// data gives.
        #[test]
        fn parity_delta_equals_reencoding(
            shape in prop::sample::select(vec![(1usize, 1usize), (2, 1), (4, 2), (8, 3)]),
            len in 1usize..300,
            index_seed in any::<usize>(),
            new_bytes in prop::collection::vec(any::<u8>(), 300),
        ) {
            let (k, m) = shape;
            let code = ReedSolomon::new(k, m).expect("code");
            let index = index_seed % k;
            let mut data = chunks(k, len, 9);
            let mut parity = parity_of(&code, &data);
            let new = &new_bytes[..len];
            let mut delta = data[index].clone();
            xor_into(&mut delta, new);
            {
                let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
                code.parity_delta(index, &delta, &mut outs).expect("delta");
            }
            data[index] = new.to_vec();
            prop_assert_eq!(parity, parity_of(&code, &data));
        }
    }
}

//! The data file's extents: payloads allocated and written to fresh
//! extents (with `O_DIRECT` from aligned memory where the file system
//! allows, through the page cache otherwise), read back with every touched
//! checksum block verified, and freed space punched back to the file
//! system.

use crate::failpoint::CrashPoint;
use crate::record::{self, Data, Extent, ObjectRecord};
use crate::shared::Shared;
use crate::{StoreError, limits};
use bytes::Bytes;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// Allocates and writes `data` as extents of at most the extent limit;
/// `direct` bypasses the page cache where the file system allows. `blocks`
/// are the data's block checksums if the caller has them (verified by the
/// wire against the sender's checksum); the extents keep them instead of
/// checksumming the bytes again.
pub(crate) fn write_extents(
    shared: &Shared,
    data: &[u8],
    blocks: Option<&[u32]>,
    direct: bool,
) -> Result<Vec<Extent>, StoreError> {
    let chunk = usize::try_from(limits::EXTENT_SIZE_BYTES_MAX).unwrap_or(usize::MAX);
    let blocks_per_chunk = chunk / to_usize(limits::CSUM_BLOCK_BYTES);
    let blocks =
        blocks.filter(|b| b.len() == data.len().div_ceil(to_usize(limits::CSUM_BLOCK_BYTES)));
    let mut extents = Vec::new();
    for (i, piece) in data.chunks(chunk).enumerate() {
        let known = blocks.map(|b| {
            let start = i * blocks_per_chunk;
            &b[start..(start + blocks_per_chunk).min(b.len())]
        });
        let length = piece.len() as u64;
        let offset = if direct {
            shared.space.allocator().allocate(length)
        } else {
            shared.space.allocator().allocate_small(length)
        };
        shared.grown.cover(&shared.data, offset + length);
        let written = if direct {
            write_direct(shared, piece, known, offset)
        } else {
            shared
                .data
                .write_all_at(piece, offset)
                .map(|()| csums_of(piece, known))
        };
        match written {
            Ok(csums) => extents.push(Extent {
                offset,
                length,
                csums,
            }),
            Err(e) => {
                extents.push(Extent {
                    offset,
                    length,
                    csums: Vec::new(),
                });
                shared.space.release(&extents);
                return Err(e.into());
            }
        }
    }
    Ok(extents)
}

/// The block checksums of `data`: `known` if given, else computed.
fn csums_of(data: &[u8], known: Option<&[u32]>) -> Vec<u32> {
    known.map_or_else(|| record::block_csums(data), <[u32]>::to_vec)
}

/// Writes through the `O_DIRECT` handle: straight from `data` when it is
/// block-aligned in memory, else from a 4 KiB-aligned copy (padded with
/// zeros to whole blocks, inside the extent's allocation). Large writes so
/// skip the kernel's page-cache copy, which costs more than this one. Falls
/// back to a buffered write, for good, if the file system refuses.
///
/// Returns the block checksums (`known`, or computed).
fn write_direct(
    shared: &Shared,
    data: &[u8],
    known: Option<&[u32]>,
    offset: u64,
) -> std::io::Result<Vec<u32>> {
    let block = to_usize(limits::ALLOC_UNIT_BYTES);
    let result = {
        let guard = shared
            .data_direct
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.as_ref().map(|file| {
            // Aligned memory (a payload received into an aligned buffer)
            // is written as it is: only a partial last block is staged.
            let whole = data.len() / block * block;
            if whole > 0 && cairn_iobuf::is_aligned(data) {
                let (body, tail) = data.split_at(whole);
                let body_blocks = known.map(|k| &k[..whole / block]);
                let tail_blocks = known.map(|k| &k[whole / block..]);
                let mut csums = write_checksummed(file, body, body_blocks, offset)?;
                if !tail.is_empty() {
                    csums.extend(write_staged(
                        file,
                        tail,
                        tail_blocks,
                        offset + whole as u64,
                    )?);
                }
                return Ok(csums);
            }
            write_staged(file, data, known, offset)
        })
    };
    match result {
        Some(Ok(csums)) => Ok(csums),
        Some(Err(e)) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
            *shared
                .data_direct
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            shared
                .data
                .write_all_at(data, offset)
                .map(|()| csums_of(data, known))
        }
        Some(Err(e)) => Err(e),
        None => shared
            .data
            .write_all_at(data, offset)
            .map(|()| csums_of(data, known)),
    }
}

/// Writes aligned `data` at `offset` and returns its block checksums
/// (`known`, or computed). A large payload is checksummed on a second
/// thread while the device takes the write (both only read the memory):
/// the checksums of 4 MiB cost about 0.2 ms of CPU, 8% of the write, which
/// this hides.
fn write_checksummed(
    file: &File,
    data: &[u8],
    known: Option<&[u32]>,
    offset: u64,
) -> std::io::Result<Vec<u32>> {
    if known.is_some() || (data.len() as u64) < limits::PARALLEL_CSUM_BYTES_MIN {
        let csums = csums_of(data, known);
        file.write_all_at(data, offset)?;
        return Ok(csums);
    }
    std::thread::scope(|scope| {
        let summer = scope.spawn(|| record::block_csums(data));
        let written = file.write_all_at(data, offset);
        let csums = summer.join().unwrap_or_else(|_| record::block_csums(data));
        written.map(|()| csums)
    })
}

/// Writes `data` through the `O_DIRECT` handle from a pooled aligned copy,
/// padded with zeros to whole blocks; returns the block checksums, computed
/// on each block right after it is copied, while it is in cache.
fn write_staged(
    file: &File,
    data: &[u8],
    known: Option<&[u32]>,
    offset: u64,
) -> std::io::Result<Vec<u32>> {
    let block = to_usize(limits::ALLOC_UNIT_BYTES);
    let padded = data.len().div_ceil(block) * block;
    let pool = cairn_iobuf::shared();
    let mut buffer = pool.take(padded)?;
    let staged = &mut buffer.as_mut_slice()[..padded];
    let mut csums = Vec::with_capacity(data.len().div_ceil(block));
    for (source, target) in data.chunks(block).zip(staged.chunks_mut(block)) {
        target[..source.len()].copy_from_slice(source);
        if known.is_none() {
            csums.push(cairn_types::crc::crc32c(&target[..source.len()]));
        }
    }
    if let Some(known) = known {
        csums.extend_from_slice(known);
    }
    staged[data.len()..].fill(0);
    let result = file.write_all_at(staged, offset).map(|()| csums);
    pool.give_back(buffer);
    result
}

/// Reads `[start, end)` of an object from its record, verifying checksums
/// block by block. Bytes no piece covers are zeros.
pub(crate) fn read_record(
    shared: &Shared,
    rec: &ObjectRecord,
    start: u64,
    end: u64,
    verify: bool,
    what: &dyn Fn() -> String,
) -> Result<Bytes, StoreError> {
    let (extents, pieces) = match &rec.data {
        Data::Inline(bytes) => {
            return Ok(Bytes::copy_from_slice(
                &bytes[to_usize(start)..to_usize(end)],
            ));
        }
        Data::Extents { extents, pieces } => (extents, pieces),
    };
    let mut covering = pieces.iter().filter(|p| p.logical < end && p.end() > start);
    // One piece covering the whole range (the usual large read): its bytes
    // are the result, without assembling a copy.
    if let (Some(p), None) = (covering.next(), covering.next())
        && p.logical <= start
        && p.end() >= end
    {
        let within = p.offset + (start - p.logical);
        return read_extent(
            shared,
            &extents[p.extent as usize],
            within,
            end - start,
            verify,
            what,
        );
    }
    let mut out = vec![0u8; to_usize(end - start)];
    for p in pieces.iter().filter(|p| p.logical < end && p.end() > start) {
        let from = start.max(p.logical);
        let to = end.min(p.end());
        let extent = &extents[p.extent as usize];
        let within = p.offset + (from - p.logical);
        let bytes = read_extent(shared, extent, within, to - from, verify, what)?;
        out[to_usize(from - start)..to_usize(to - start)].copy_from_slice(&bytes);
    }
    Ok(Bytes::from(out))
}

/// Reads `length` bytes at `within` of an extent, checking every checksum
/// block it touches.
fn read_extent(
    shared: &Shared,
    extent: &Extent,
    within: u64,
    length: u64,
    verify: bool,
    what: &dyn Fn() -> String,
) -> Result<Bytes, StoreError> {
    let block = limits::CSUM_BLOCK_BYTES;
    let first = within / block;
    let span_start = first * block;
    let span_end = (within + length)
        .div_ceil(block)
        .saturating_mul(block)
        .min(extent.length);
    let span = read_span(
        shared,
        extent.offset + span_start,
        to_usize(span_end - span_start),
    )
    .map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            StoreError::Corrupt(format!(
                "{}: data file too short for extent at {}",
                what(),
                extent.offset
            ))
        } else {
            e.into()
        }
    })?;
    if verify {
        for (i, chunk) in span.chunks(to_usize(block)).enumerate() {
            let index = to_usize(first) + i;
            if extent.csums.get(index) != Some(&cairn_types::crc::crc32c(chunk)) {
                let at = span_start + i as u64 * block;
                return Err(StoreError::Corrupt(format!(
                    "{}: checksum mismatch in extent bytes {}..{} (data file offset {})",
                    what(),
                    at,
                    at + chunk.len() as u64,
                    extent.offset + at
                )));
            }
        }
    }
    let skip = to_usize(within - span_start);
    Ok(span.slice(skip..skip + to_usize(length)))
}

/// Reads `length` bytes at `offset` (block-aligned) of the data file.
fn read_span(shared: &Shared, offset: u64, length: usize) -> std::io::Result<Bytes> {
    if length >= limits::DIRECT_READ_BYTES_MIN {
        let guard = shared
            .data_direct
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(file) = guard.as_ref() {
            let block = to_usize(limits::ALLOC_UNIT_BYTES);
            let padded = length.div_ceil(block) * block;
            // A pooled buffer: a fresh multi-megabyte one costs page faults
            // and zeroing, more than the read itself on a fast disk.
            let pool = cairn_iobuf::shared();
            let mut buffer = pool.take(padded)?;
            match file.read_exact_at(&mut buffer.as_mut_slice()[..padded], offset) {
                // The aligned buffer becomes the result without a copy, and
                // returns to the pool when the caller drops it.
                Ok(()) => return Ok(pool.lend(buffer, length)),
                // The padded tail of the file's last extent may lie past the
                // end: fall back to a buffered read.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let mut span = vec![0u8; length];
    shared.data.read_exact_at(&mut span, offset)?;
    Ok(Bytes::from(span))
}

pub(crate) fn punch(file: &File, offset: u64, length: u64) -> std::io::Result<()> {
    use rustix::fs::{FallocateFlags, fallocate};
    crate::failpoint::crash_point(CrashPoint::Punch);
    fallocate(
        file,
        FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
        offset,
        length,
    )?;
    Ok(())
}

pub(crate) fn to_usize(n: u64) -> usize {
    usize::try_from(n).expect("sizes are bounded by OBJECT_SIZE_BYTES_MAX")
}

//! Request bodies, read as they arrive. Every byte is hashed (MD5 for the
//! ETag, and each checksum the client asked for); a small body is kept
//! whole for the object's head, a larger one is written to tail objects
//! in pieces of [`PIECE_BYTES`] as the pieces fill, one piece written
//! while the next is read. Then the body is checked against what the
//! request said (length, `Content-MD5`, checksums in headers or
//! trailers): a body that does not match loses its pieces, and nothing
//! of it ever becomes visible.
//!
//! Every buffered piece holds its bytes of the gateway's memory
//! [`Budget`], so many large uploads wait for memory (and their clients,
//! through TCP, for the gateway) instead of exhausting it.

use crate::gateway::{client_error, decode_base64, internal};
use crate::meta::PartRef;
use bytes::{Bytes, BytesMut};
use cairn_client::{Client, ClientError};
use futures::StreamExt;
use md5::{Digest, Md5};
use s3s::dto::{ChecksumAlgorithm, StreamingBlob};
use s3s::{S3Result, s3_error};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// The size of the tail objects a large body is cut into.
pub const PIECE_BYTES: u64 = 4 << 20;
/// Bytes of request and response bodies the gateway holds at once, over
/// all requests.
pub const BUFFER_BYTES_MAX: usize = 64 << 20;
/// S3's largest single PUT, and its largest part.
pub const BODY_BYTES_MAX: u64 = 5 << 30;

/// The gateway's memory for bodies: a piece in memory holds its bytes.
#[derive(Clone, Debug)]
pub struct Budget(Arc<Semaphore>);

impl Budget {
    #[must_use]
    pub fn new(bytes: usize) -> Budget {
        Budget(Arc::new(Semaphore::new(bytes)))
    }

    /// Waits until `bytes` (clamped to one piece, at least one byte) are
    /// free and holds them until the permit drops.
    ///
    /// # Errors
    /// Never in practice: the semaphore is never closed.
    pub async fn take(&self, bytes: u64) -> S3Result<OwnedSemaphorePermit> {
        let bytes = u32::try_from(bytes.clamp(1, PIECE_BYTES)).unwrap_or(u32::MAX);
        Arc::clone(&self.0)
            .acquire_many_owned(bytes)
            .await
            .map_err(internal)
    }

    /// Bytes free now (for tests and logs).
    #[must_use]
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

/// What a request says its body is: its checksums (headers; trailers
/// come with the body), `Content-MD5` and length.
#[derive(Debug, Default)]
pub(crate) struct Given {
    pub algorithm: Option<String>,
    pub crc32: Option<String>,
    pub crc32c: Option<String>,
    pub sha1: Option<String>,
    pub sha256: Option<String>,
    pub crc64nvme: Option<String>,
    pub content_md5: Option<String>,
    pub content_length: Option<i64>,
}

/// Where a body's bytes went.
#[derive(Debug)]
pub(crate) enum Stored {
    /// Kept whole, for the object's head.
    Inline(Bytes),
    /// Written to tail objects (none for an empty body).
    Tail(PartRef),
}

/// A body read and checked against what its request said.
#[derive(Debug)]
pub(crate) struct Received {
    pub stored: Stored,
    pub size: u64,
    /// Hex MD5.
    pub etag: String,
    /// Verified checksums by algorithm name, base64.
    pub checksums: BTreeMap<String, String>,
    pub computed: s3s::dto::Checksum,
    /// The budget an inline body holds until it is written.
    pub _permit: Option<OwnedSemaphorePermit>,
}

/// Where a large body's pieces go: objects `PREFIX/00000`, `PREFIX/00001`,
/// … in `pool`.
pub(crate) struct Tail {
    pub pool: String,
    pub prefix: String,
}

/// Writes a body's pieces, one at a time in the background.
struct PieceWriter {
    client: Client,
    tail: Tail,
    written: u64,
    pending: Option<JoinHandle<Result<(), ClientError>>>,
}

impl PieceWriter {
    /// Waits for the previous piece, then starts writing `data` (which
    /// keeps `permit` until it is written).
    async fn push(&mut self, data: Bytes, permit: OwnedSemaphorePermit) -> S3Result<()> {
        self.wait().await?;
        let name = PartRef::piece_name(&self.tail.prefix, self.written);
        self.written += 1;
        let client = self.client.clone();
        let pool = self.tail.pool.clone();
        self.pending = Some(tokio::spawn(async move {
            let _permit = permit;
            client
                .write_full(&pool, name.as_bytes(), data)
                .await
                .map(|_| ())
        }));
        Ok(())
    }

    async fn wait(&mut self) -> S3Result<()> {
        match self.pending.take() {
            Some(task) => match task.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(client_error(e)),
                Err(e) => Err(internal(e)),
            },
            None => Ok(()),
        }
    }

    /// Removes every piece written (after the last write ends).
    async fn discard(mut self) {
        let _ = self.wait().await;
        for n in 0..self.written {
            let name = PartRef::piece_name(&self.tail.prefix, n);
            if let Err(error) = self.client.remove(&self.tail.pool, name.as_bytes()).await
                && !matches!(error, ClientError::NotFound)
            {
                tracing::warn!(object = %name, %error, "piece of a refused body left behind");
            }
        }
    }
}

/// MD5 and the checksums a request asked for, over a body as it arrives.
struct Hashes {
    md5: Md5,
    checksum: s3s::checksum::ChecksumHasher,
}

impl Hashes {
    fn for_request(given: &Given) -> Hashes {
        let mut checksum = s3s::checksum::ChecksumHasher::default();
        let algorithm = given.algorithm.as_deref();
        let wants = |given: bool, name: &str| given || algorithm == Some(name);
        if wants(given.crc32.is_some(), ChecksumAlgorithm::CRC32) {
            checksum.crc32 = Some(Default::default());
        }
        if wants(given.crc32c.is_some(), ChecksumAlgorithm::CRC32C) {
            checksum.crc32c = Some(Default::default());
        }
        if wants(given.sha1.is_some(), ChecksumAlgorithm::SHA1) {
            checksum.sha1 = Some(Default::default());
        }
        if wants(given.sha256.is_some(), ChecksumAlgorithm::SHA256) {
            checksum.sha256 = Some(Default::default());
        }
        if wants(given.crc64nvme.is_some(), ChecksumAlgorithm::CRC64NVME) {
            checksum.crc64nvme = Some(Default::default());
        }
        Hashes {
            md5: Md5::new(),
            checksum,
        }
    }

    fn update(&mut self, data: &[u8]) {
        self.md5.update(data);
        self.checksum.update(data);
    }
}

fn too_large() -> s3s::S3Error {
    s3_error!(
        EntityTooLarge,
        "Your proposed upload exceeds the maximum allowed size of {BODY_BYTES_MAX} bytes"
    )
}

/// Reads `body`, keeps it whole if it is at most `inline_max` bytes (else
/// writes it to `tail`'s pieces as it arrives), and checks it against
/// `given` and the trailers.
///
/// # Errors
/// `EntityTooLarge`, `IncompleteBody`, `InvalidDigest`, `BadDigest`, or
/// the cluster's error; no piece is left behind.
pub(crate) async fn receive(
    client: &Client,
    budget: &Budget,
    body: StreamingBlob,
    given: Given,
    trailers: Option<s3s::TrailingHeaders>,
    (tail, inline_max): (Tail, u64),
) -> S3Result<Received> {
    let declared = match given.content_length {
        Some(length) => Some(u64::try_from(length).map_err(|_| s3_error!(InvalidArgument))?),
        None => None,
    };
    if declared.is_some_and(|d| d > BODY_BYTES_MAX) {
        return Err(too_large());
    }
    let mut writer = PieceWriter {
        client: client.clone(),
        tail,
        written: 0,
        pending: None,
    };
    let mut hashes = Hashes::for_request(&given);
    match read_pieces(budget, body, declared, &mut hashes, &mut writer, inline_max).await {
        Ok((size, inline)) => match check(hashes, given, trailers, declared, size) {
            Ok((etag, checksums, computed)) => {
                if let Err(e) = writer.wait().await {
                    writer.discard().await;
                    return Err(e);
                }
                let (stored, permit) = match inline {
                    Some((data, permit)) => (Stored::Inline(data), Some(permit)),
                    None => (
                        Stored::Tail(PartRef {
                            object: writer.tail.prefix.clone(),
                            size,
                            piece_bytes: PIECE_BYTES,
                        }),
                        None,
                    ),
                };
                Ok(Received {
                    stored,
                    size,
                    etag,
                    checksums,
                    computed,
                    _permit: permit,
                })
            }
            Err(e) => {
                writer.discard().await;
                Err(e)
            }
        },
        Err(e) => {
            writer.discard().await;
            Err(e)
        }
    }
}

/// A body kept whole, with the budget it holds.
type Inline = (Bytes, OwnedSemaphorePermit);

/// Reads the body into pieces: its size, and its bytes if it stayed
/// small enough to keep whole.
async fn read_pieces(
    budget: &Budget,
    mut body: StreamingBlob,
    declared: Option<u64>,
    hashes: &mut Hashes,
    writer: &mut PieceWriter,
    inline_max: u64,
) -> S3Result<(u64, Option<Inline>)> {
    let next_piece = |flushed: u64| declared.map_or(PIECE_BYTES, |d| d.saturating_sub(flushed));
    let mut size = 0u64;
    let mut flushed = 0u64;
    let mut permit = budget.take(next_piece(0)).await?;
    let mut buf = BytesMut::with_capacity(permit.num_permits());
    while let Some(chunk) = body.next().await {
        let mut chunk = chunk.map_err(|e| s3_error!(IncompleteBody, "{e}"))?;
        size += chunk.len() as u64;
        if size > BODY_BYTES_MAX {
            return Err(too_large());
        }
        if declared.is_some_and(|d| size > d) {
            return Err(s3_error!(
                IncompleteBody,
                "the body is longer than its Content-Length"
            ));
        }
        hashes.update(&chunk);
        while !chunk.is_empty() {
            // A full piece goes only once more bytes come, so a body of
            // exactly one piece (a 4 MiB PUT) stays whole for the head.
            if buf.len() as u64 == PIECE_BYTES {
                // The full piece goes (with its budget) before the next
                // piece's budget is taken: a request waiting for budget
                // holds none but its writes', which end on their own.
                // The whole buffer goes: a split would leave `buf`
                // holding the piece's allocation while it waits.
                flushed += PIECE_BYTES;
                writer
                    .push(std::mem::take(&mut buf).freeze(), permit)
                    .await?;
                permit = budget.take(next_piece(flushed)).await?;
                buf.reserve(permit.num_permits());
            }
            let room = usize::try_from(PIECE_BYTES).unwrap_or(usize::MAX) - buf.len();
            let take = room.min(chunk.len());
            buf.extend_from_slice(&chunk.split_to(take));
        }
    }
    if writer.written == 0 && size <= inline_max {
        return Ok((size, Some((buf.freeze(), permit))));
    }
    if !buf.is_empty() {
        writer.push(buf.freeze(), permit).await?;
    }
    Ok((size, None))
}

/// Checks a body read whole against its request: length, `Content-MD5`,
/// and the checksums of the headers and trailers. Its ETag, the verified
/// checksums, and all it computed.
fn check(
    hashes: Hashes,
    mut given: Given,
    trailers: Option<s3s::TrailingHeaders>,
    declared: Option<u64>,
    size: u64,
) -> S3Result<(String, BTreeMap<String, String>, s3s::dto::Checksum)> {
    if declared.is_some_and(|d| d != size) {
        return Err(s3_error!(IncompleteBody));
    }
    let etag: String = hashes
        .md5
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if let Some(content_md5) = &given.content_md5 {
        let want = decode_base64(content_md5).ok_or_else(|| s3_error!(InvalidDigest))?;
        let want: String = want.iter().map(|b| format!("{b:02x}")).collect();
        if want != etag {
            return Err(s3_error!(
                BadDigest,
                "the Content-MD5 you specified did not match what we received"
            ));
        }
    }
    // Trailing checksums (aws-chunked bodies) arrive after the body.
    if let Some(trailers) = trailers.and_then(|t| t.take()) {
        let get = |name: &str| -> S3Result<Option<String>> {
            trailers
                .get(name)
                .map(|v| {
                    v.to_str()
                        .map(str::to_owned)
                        .map_err(|_| s3_error!(InvalidArgument, "bad trailer {name}"))
                })
                .transpose()
        };
        given.crc32 = get("x-amz-checksum-crc32")?.or(given.crc32);
        given.crc32c = get("x-amz-checksum-crc32c")?.or(given.crc32c);
        given.sha1 = get("x-amz-checksum-sha1")?.or(given.sha1);
        given.sha256 = get("x-amz-checksum-sha256")?.or(given.sha256);
        given.crc64nvme = get("x-amz-checksum-crc64nvme")?.or(given.crc64nvme);
    }
    let computed = hashes.checksum.finalize();
    let mut checksums = BTreeMap::new();
    for (name, got, given) in [
        ("CRC32", &computed.checksum_crc32, &given.crc32),
        ("CRC32C", &computed.checksum_crc32c, &given.crc32c),
        ("SHA1", &computed.checksum_sha1, &given.sha1),
        ("SHA256", &computed.checksum_sha256, &given.sha256),
        ("CRC64NVME", &computed.checksum_crc64nvme, &given.crc64nvme),
    ] {
        if let Some(given) = given
            && got.as_ref() != Some(given)
        {
            return Err(s3_error!(
                BadDigest,
                "the {name} checksum you specified did not match what we received"
            ));
        }
        if let Some(got) = got {
            checksums.insert(name.to_owned(), got.clone());
        }
    }
    Ok((etag, checksums, computed))
}

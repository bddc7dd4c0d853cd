//! Multipart uploads: an upload's record and its parts' records are omap
//! entries in the `s3.meta` pool, each part's bytes a tail object in the
//! bucket's pool. Completing writes the head with the list of parts (a
//! manifest) and no bytes: the parts are the object's data, never copied.
//! A read of a multipart object streams its parts in pieces.

use crate::gateway::{
    Collected, Gateway, Given, KEY_BYTES_MAX, client_error, collect_body, internal,
};
use crate::meta::{self, BucketRecord, META_POOL, ObjectMeta, PartRecord, PartRef, UploadRecord};
use bytes::Bytes;
use cairn_client::{Client, ClientError, ReadOp, ReadResult};
use md5::{Digest, Md5};
use s3s::dto::StreamingBlob;
use s3s::{S3Result, s3_error};
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

/// S3's smallest part other than the last.
pub const PART_BYTES_MIN: u64 = 5 << 20;
/// S3's part numbers.
pub const PART_NUMBER_MAX: i32 = 10_000;
/// The most bytes one read of a part fetches while streaming.
pub const STREAM_PIECE_BYTES: u64 = 4 << 20;

/// The omap key of an upload in its bucket's uploads object.
pub fn upload_key(key: &str, upload_id: &str) -> Vec<u8> {
    let mut out = key.as_bytes().to_vec();
    out.push(0);
    out.extend_from_slice(upload_id.as_bytes());
    out
}

fn part_key(number: i32) -> Vec<u8> {
    format!("{number:05}").into_bytes()
}

impl Gateway {
    /// The upload, if it is one of this key in this bucket.
    pub(crate) async fn upload(
        &self,
        bucket: &BucketRecord,
        key: &str,
        upload_id: &str,
    ) -> S3Result<UploadRecord> {
        let valid = !upload_id.is_empty()
            && upload_id.len() <= 64
            && upload_id.bytes().all(|b| b.is_ascii_hexdigit());
        if !valid {
            return Err(s3_error!(NoSuchUpload));
        }
        let uploads = meta::uploads_object(&bucket.id);
        match meta::omap_value(self.client(), &uploads, &upload_key(key, upload_id)).await? {
            Some(value) => Ok(meta::decode("upload", &value)?),
            None => Err(s3_error!(NoSuchUpload)),
        }
    }

    /// Starts an upload: its record, with the object's metadata to be.
    pub(crate) async fn start_upload(
        &self,
        bucket: &BucketRecord,
        key: &str,
        template: ObjectMeta,
    ) -> S3Result<String> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Err(s3_error!(KeyTooLongError));
        }
        let upload_id = meta::random_hex(16);
        let record = UploadRecord {
            key: key.to_owned(),
            upload_id: upload_id.clone(),
            initiated_ms: meta::now_ms(),
            meta: template,
        };
        let uploads = meta::uploads_object(&bucket.id);
        let made = meta::omap_create(
            self.client(),
            &uploads,
            &upload_key(key, &upload_id),
            &meta::encode(&record),
        )
        .await?;
        if !made {
            return Err(internal("an upload id came up twice"));
        }
        Ok(upload_id)
    }

    /// Stores one part: its bytes in its tail object, then its record.
    pub(crate) async fn put_part(
        &self,
        bucket: &BucketRecord,
        upload: &UploadRecord,
        number: i32,
        body: StreamingBlob,
        given: Given,
        trailers: Option<s3s::TrailingHeaders>,
    ) -> S3Result<(String, Collected)> {
        if !(1..=PART_NUMBER_MAX).contains(&number) {
            return Err(s3_error!(
                InvalidArgument,
                "Part number must be an integer between 1 and {PART_NUMBER_MAX}, inclusive"
            ));
        }
        let collected = collect_body(body, given, trailers).await?;
        let object = meta::part_data(&bucket.id, &upload.upload_id, number);
        self.client()
            .write_full(&bucket.pool, object.as_bytes(), collected.data.clone())
            .await
            .map_err(client_error)?;
        let record = PartRecord {
            size: collected.data.len() as u64,
            etag: collected.etag.clone(),
            mtime_ms: meta::now_ms(),
            checksums: collected.checksums.clone(),
        };
        let parts = meta::parts_object(&upload.upload_id);
        let op = cairn_client::WriteOp::new()
            .create(false)
            .omap_set([(&part_key(number)[..], &meta::encode(&record)[..])]);
        self.client()
            .operate(META_POOL, &parts, op)
            .await
            .map_err(client_error)?;
        Ok((collected.etag.clone(), collected))
    }

    /// Every part record of an upload, by number.
    pub(crate) async fn parts(&self, upload_id: &str) -> S3Result<Vec<(i32, PartRecord)>> {
        let object = meta::parts_object(upload_id);
        let mut out = Vec::new();
        let mut after: Option<Bytes> = None;
        loop {
            let page = match self
                .client()
                .omap_range(META_POOL, &object, after.as_deref(), 1000)
                .await
            {
                Ok(page) => page,
                Err(ClientError::NotFound) => Vec::new(),
                Err(e) => return Err(client_error(e)),
            };
            let Some((last, _)) = page.last() else {
                return Ok(out);
            };
            after = Some(last.clone());
            for (key, value) in &page {
                let number: i32 = std::str::from_utf8(key)
                    .ok()
                    .and_then(|k| k.parse().ok())
                    .ok_or_else(|| internal("a part record with a bad key"))?;
                out.push((number, meta::decode("part", value)?));
            }
        }
    }

    /// Drops an upload's records and the part objects not in `keep`.
    pub(crate) async fn end_upload(
        &self,
        bucket: &BucketRecord,
        upload: &UploadRecord,
        keep: &[PartRef],
    ) -> S3Result<()> {
        let uploads = meta::uploads_object(&bucket.id);
        let key = Bytes::from(upload_key(&upload.key, &upload.upload_id));
        match self.client().omap_remove(META_POOL, &uploads, &[key]).await {
            Ok(_) | Err(ClientError::NotFound) => {}
            Err(e) => return Err(client_error(e)),
        }
        let standing = ObjectMeta {
            parts: keep.to_vec(),
            ..ObjectMeta::default()
        };
        let all: Vec<PartRef> = self
            .parts(&upload.upload_id)
            .await?
            .into_iter()
            .map(|(number, record)| PartRef {
                object: meta::part_data(&bucket.id, &upload.upload_id, number),
                size: record.size,
            })
            .collect();
        self.remove_parts(bucket, &all, &standing).await;
        match self
            .client()
            .remove(META_POOL, &meta::parts_object(&upload.upload_id))
            .await
        {
            Ok(()) | Err(ClientError::NotFound) => Ok(()),
            Err(e) => Err(client_error(e)),
        }
    }
}

/// Checks a CompleteMultipartUpload's list against the parts uploaded
/// and makes the object's part list and its ETag (the MD5 of the parts'
/// MD5s, then `-N`).
///
/// # Errors
/// `InvalidPartOrder`, `InvalidPart` (not uploaded, or another ETag),
/// `EntityTooSmall` (a part but the last under 5 MiB), `MalformedXML`
/// (no parts).
pub fn assemble(
    bucket_id: &str,
    upload_id: &str,
    listed: &[(i32, Option<String>)],
    uploaded: &[(i32, PartRecord)],
) -> S3Result<(Vec<PartRef>, String, u64)> {
    if listed.is_empty() {
        return Err(s3_error!(
            MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema"
        ));
    }
    if listed.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(s3_error!(InvalidPartOrder));
    }
    // Every part named must have been uploaded with that ETag (checked
    // for all before any size, as S3 does).
    let mut records = Vec::with_capacity(listed.len());
    for (number, etag) in listed {
        let Some((_, record)) = uploaded.iter().find(|(n, _)| n == number) else {
            return Err(s3_error!(InvalidPart, "part {number} was not uploaded"));
        };
        let want = etag.as_deref().map(|e| e.trim_matches('"'));
        if want.is_some_and(|e| e != record.etag) {
            return Err(s3_error!(InvalidPart, "part {number} has another ETag"));
        }
        records.push(record);
    }
    let mut parts = Vec::with_capacity(listed.len());
    let mut md5s = Md5::new();
    let mut size = 0u64;
    for (i, ((number, _), record)) in listed.iter().zip(records).enumerate() {
        if i + 1 < listed.len() && record.size < PART_BYTES_MIN {
            return Err(s3_error!(
                EntityTooSmall,
                "part {number} is {} bytes: every part but the last must be at least {PART_BYTES_MIN}",
                record.size
            ));
        }
        let raw: Vec<u8> = (0..record.etag.len() / 2)
            .filter_map(|j| u8::from_str_radix(record.etag.get(2 * j..2 * j + 2)?, 16).ok())
            .collect();
        md5s.update(&raw);
        size += record.size;
        parts.push(PartRef {
            object: meta::part_data(bucket_id, upload_id, *number),
            size: record.size,
        });
    }
    let etag: String = md5s.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((parts, format!("{etag}-{}", listed.len()), size))
}

/// A multipart object's bytes `range` as a stream, read part by part in
/// pieces of at most [`STREAM_PIECE_BYTES`] by a task feeding a small
/// channel (so at most a few pieces are in memory).
pub fn stream_parts(
    client: Client,
    pool: String,
    parts: &[PartRef],
    range: std::ops::Range<u64>,
) -> StreamingBlob {
    let mut pieces: VecDeque<(String, u64, u64)> = VecDeque::new();
    let mut at = 0u64;
    for part in parts {
        let (start, end) = (at, at + part.size);
        at = end;
        let from = range.start.max(start);
        let to = range.end.min(end);
        if from < to {
            pieces.push_back((part.object.clone(), from - start, to - from));
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(2);
    tokio::spawn(async move {
        while let Some((object, offset, length)) = pieces.pop_front() {
            let take = length.min(STREAM_PIECE_BYTES);
            if take < length {
                pieces.push_front((object.clone(), offset + take, length - take));
            }
            let op = ReadOp::new().read(offset, Some(take));
            let piece = match client.operate_read(&pool, object.as_bytes(), op).await {
                Ok(results) => match results.into_iter().next() {
                    Some(ReadResult::Data(data)) if data.len() as u64 == take => Ok(data),
                    other => Err(std::io::Error::other(format!(
                        "part {object} read back {other:?}"
                    ))),
                },
                Err(e) => Err(std::io::Error::other(format!("part {object}: {e}"))),
            };
            let failed = piece.is_err();
            if tx.send(piece).await.is_err() || failed {
                return;
            }
        }
    });
    StreamingBlob::wrap(ChannelStream(rx))
}

struct ChannelStream(tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl futures::Stream for ChannelStream {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(size: u64, etag: &str) -> PartRecord {
        PartRecord {
            size,
            etag: etag.into(),
            mtime_ms: 0,
            checksums: Default::default(),
        }
    }

    #[test]
    fn completion_checks_order_presence_etags_and_sizes() {
        let big = PART_BYTES_MIN;
        let uploaded = vec![
            (1, record(big, "00112233445566778899aabbccddeeff")),
            (2, record(big, "ffeeddccbbaa99887766554433221100")),
            (3, record(10, "0123456789abcdef0123456789abcdef")),
        ];
        let all = [
            (1, None),
            (2, Some("\"ffeeddccbbaa99887766554433221100\"".to_owned())),
            (3, None),
        ];
        let (parts, etag, size) = assemble("b", "u", &all, &uploaded).expect("valid");
        assert_eq!(parts.len(), 3);
        assert_eq!(size, 2 * big + 10);
        assert!(etag.ends_with("-3"), "{etag}");
        let code = |r: S3Result<(Vec<PartRef>, String, u64)>| {
            r.map(|_| ())
                .expect_err("refused")
                .code()
                .as_str()
                .to_owned()
        };
        assert_eq!(
            code(assemble("b", "u", &[(2, None), (1, None)], &uploaded)),
            "InvalidPartOrder"
        );
        assert_eq!(
            code(assemble("b", "u", &[(1, None), (4, None)], &uploaded)),
            "InvalidPart"
        );
        assert_eq!(
            code(assemble("b", "u", &[(1, Some("\"00\"".into()))], &uploaded)),
            "InvalidPart"
        );
        assert_eq!(
            code(assemble(
                "b",
                "u",
                &[(3, None), (4, None)],
                &[(3, record(10, "00")), (4, record(10, "00"))]
            )),
            "EntityTooSmall"
        );
        assert_eq!(code(assemble("b", "u", &[], &uploaded)), "MalformedXML");
    }
}

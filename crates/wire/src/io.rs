//! The two halves of a socket as both client and server use them: a frame
//! reader over `read_buf`, and a writer task that drains a bounded queue.

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;

use crate::error::WireError;
use crate::frame::{EncodedFrame, Frame, FrameDecoder};
use crate::limits::{
    READ_CHUNK_BYTES_MIN, READ_RESERVE_BYTES_MAX, WRITE_BATCH_FRAMES_MAX, WRITE_BUFFER_SIZE_BYTES,
};

/// Reads whole frames from one byte stream.
#[derive(Debug)]
pub struct FrameReader<R> {
    reader: R,
    buf: BytesMut,
    decoder: FrameDecoder,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(reader: R) -> FrameReader<R> {
        FrameReader {
            reader,
            buf: BytesMut::new(),
            decoder: FrameDecoder::new(),
        }
    }

    /// The next frame; `Ok(None)` when the peer closed cleanly between
    /// frames. Cancel-safe: dropping the future loses no bytes.
    ///
    /// # Errors
    /// A protocol violation, a stream that ends inside a frame, or an I/O
    /// error.
    pub async fn next(&mut self) -> Result<Option<Frame>, WireError> {
        loop {
            if let Some(frame) = self.decoder.decode(&mut self.buf)? {
                return Ok(Some(frame));
            }
            // A large data segment goes straight into its aligned buffer.
            if let Some(rest) = self.decoder.receiving_data() {
                let count = self.reader.read(rest).await?;
                if count == 0 {
                    return self.decoder.decode_eof(&mut self.buf);
                }
                self.decoder.received(count);
                continue;
            }
            let wanted_bytes = self.reserve();
            // Bounded, so little of a following large data segment is read
            // (and later copied) into this buffer ahead of its header.
            let limit = u64::try_from(wanted_bytes).unwrap_or(u64::MAX);
            if (&mut self.reader)
                .take(limit)
                .read_buf(&mut self.buf)
                .await?
                == 0
            {
                return self.decoder.decode_eof(&mut self.buf);
            }
        }
    }

    /// Makes room for the rest of the current frame in one allocation (so a
    /// data segment lands contiguously and is never copied again), but never
    /// more than [`READ_RESERVE_BYTES_MAX`] ahead of received bytes. Returns
    /// how many bytes to read.
    fn reserve(&mut self) -> usize {
        let wanted_bytes = self
            .decoder
            .bytes_wanted(self.buf.len())
            .clamp(READ_CHUNK_BYTES_MIN, READ_RESERVE_BYTES_MAX);
        self.buf.reserve(wanted_bytes);
        wanted_bytes
    }
}

/// Writes queued frames until every sender is gone, then half-closes the
/// stream so the peer sees a clean end.
///
/// Small frames are coalesced in a buffer and flushed when the queue runs
/// dry; a data segment at least as large as the buffer goes straight to the
/// socket without being copied.
///
/// # Errors
/// The first I/O error; the frames still queued are lost with the
/// connection.
pub async fn write_frames<W: AsyncWrite + Unpin>(
    writer: W,
    mut queue: mpsc::Receiver<EncodedFrame>,
) -> Result<(), WireError> {
    let mut writer = BufWriter::with_capacity(WRITE_BUFFER_SIZE_BYTES, writer);
    while let Some(frame) = queue.recv().await {
        write_one(&mut writer, &frame).await?;
        let mut batch_frames = 1;
        while batch_frames < WRITE_BATCH_FRAMES_MAX {
            let Ok(frame) = queue.try_recv() else { break };
            write_one(&mut writer, &frame).await?;
            batch_frames += 1;
        }
        writer.flush().await?;
    }
    writer.shutdown().await?;
    Ok(())
}

async fn write_one<W: AsyncWrite + Unpin>(
    writer: &mut BufWriter<W>,
    frame: &EncodedFrame,
) -> Result<(), WireError> {
    writer.write_all(&frame.head).await?;
    if !frame.data.is_empty() {
        writer.write_all(&frame.data).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tokio::io::AsyncWriteExt;

    use super::*;

    fn frame(request_id: u64, data_size_bytes: usize) -> Frame {
        Frame {
            kind: 1,
            request_id,
            is_response: false,
            body: Bytes::from_static(b"b"),
            data: Bytes::from(vec![7u8; data_size_bytes]).into(),
        }
    }

    #[tokio::test]
    async fn writer_and_reader_agree_across_a_small_pipe() {
        // A 4 KiB pipe forces partial reads and writes of every frame.
        let (client, server) = tokio::io::duplex(4096);
        let (queue_tx, queue_rx) = mpsc::channel(4);
        let writer = tokio::spawn(write_frames(client, queue_rx));
        let sent: Vec<Frame> = (1..=20).map(|i| frame(i, (i as usize) * 10_000)).collect();
        let producer = {
            let sent = sent.clone();
            tokio::spawn(async move {
                for f in sent {
                    let encoded = f.encode().expect("within limits");
                    queue_tx.send(encoded).await.expect("writer alive");
                }
            })
        };
        let mut reader = FrameReader::new(server);
        for expected in &sent {
            let got = reader.next().await.expect("valid stream");
            assert_eq!(got.as_ref(), Some(expected));
            if let Some(got) = got
                && got.data.len() >= crate::limits::ALIGNED_DATA_BYTES_MIN
            {
                assert!(
                    cairn_iobuf::is_aligned(&got.data),
                    "a {}-byte data segment lands in aligned memory",
                    got.data.len()
                );
            }
        }
        producer.await.expect("producer");
        writer.await.expect("writer task").expect("writes succeed");
        assert!(
            matches!(reader.next().await, Ok(None)),
            "clean end after the last frame"
        );
    }

    #[tokio::test]
    async fn a_stream_cut_inside_a_frame_is_malformed() {
        let (mut client, server) = tokio::io::duplex(4096);
        let bytes = frame(1, 100).encode().expect("within limits").to_vec();
        client.write_all(&bytes[..50]).await.expect("write");
        drop(client);
        let mut reader = FrameReader::new(server);
        assert!(matches!(
            reader.next().await,
            Err(WireError::Malformed { .. })
        ));
    }

    #[tokio::test]
    async fn a_stream_cut_inside_an_aligned_data_segment_is_malformed() {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let bytes = frame(1, 200_000).encode().expect("within limits").to_vec();
        client.write_all(&bytes[..150_000]).await.expect("write");
        drop(client);
        let mut reader = FrameReader::new(server);
        match reader.next().await {
            Err(WireError::Malformed { reason }) => {
                assert!(reason.contains("150000 bytes of"), "{reason}");
            }
            other => panic!("expected a truncation error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_corrupt_aligned_data_segment_fails_its_checksum() {
        // The segment is checksummed piece by piece as it arrives: a flip in
        // the part read ahead with the header, in the middle, or in the very
        // last byte is caught alike.
        let good = frame(1, 200_000).encode().expect("within limits").to_vec();
        for at in [good.len() - 200_000, 150_000, good.len() - 1] {
            let (mut client, server) = tokio::io::duplex(1 << 20);
            let mut bytes = good.clone();
            bytes[at] ^= 1;
            client.write_all(&bytes).await.expect("write");
            drop(client);
            let mut reader = FrameReader::new(server);
            assert!(
                matches!(reader.next().await, Err(WireError::Checksum { .. })),
                "flip at {at}"
            );
        }
        let (mut client, server) = tokio::io::duplex(1 << 20);
        client.write_all(&good).await.expect("write");
        drop(client);
        let mut reader = FrameReader::new(server);
        assert!(matches!(reader.next().await, Ok(Some(_))));
    }
}

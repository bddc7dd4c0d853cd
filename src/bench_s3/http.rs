//! The HTTP side of `cairn bench s3`: one keep-alive HTTP/1.1 connection
//! per worker (hyper's own connection, no pool, so `--concurrency` is the
//! number of connections), SigV4-signed path-style requests, bodies
//! streamed both ways, and S3's XML answers (errors, ListObjectsV2 pages).
//!
//! A request body is slices of one shared chunk, so a worker holds no
//! object in memory however large it is; a GET body is counted as it
//! arrives and dropped.

use super::sigv4::{self, Credentials, SignedRequest};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, CONTENT_LENGTH, HOST};
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

/// Largest error body read for its code; S3's are a few hundred bytes.
const ERROR_BODY_BYTES_MAX: usize = 64 << 10;
/// Largest ListObjectsV2 page read (1,000 keys of 1 KiB are ~1.3 MB).
const LIST_BODY_BYTES_MAX: usize = 16 << 20;
/// The region whose buckets are made without a location constraint.
const DEFAULT_REGION: &str = "us-east-1";

/// Where requests go: `http://host:port`, path-style (`/bucket/key`).
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// The `Host` header: host and port as the URL gave them.
    host: String,
    /// What to connect to: host and port (80 when the URL had none).
    addr: String,
}

impl Endpoint {
    pub(crate) fn parse(url: &str) -> Result<Endpoint, String> {
        if url.starts_with("https://") {
            return Err(format!(
                "--endpoint {url}: https is not supported (no TLS in the benchmark); \
                 give the server's http:// address"
            ));
        }
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("--endpoint {url}: not an http://host:port URL"))?;
        let host = rest.strip_suffix('/').unwrap_or(rest);
        if host.is_empty() || host.contains(['/', '?', '#', '@', ' ']) {
            return Err(format!(
                "--endpoint {url}: give only http://host:port (requests are path-style)"
            ));
        }
        // `[::1]:9000` and `host:9000` carry a port; `[::1]` and `host` do not.
        let has_port = host
            .rsplit_once(':')
            .is_some_and(|(before, port)| !before.is_empty() && port.parse::<u16>().is_ok());
        let addr = if has_port {
            host.to_owned()
        } else {
            format!("{host}:80")
        };
        Ok(Endpoint {
            host: host.to_owned(),
            addr,
        })
    }
}

/// What every connection of a run talks to and as whom.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) endpoint: Endpoint,
    pub(crate) credentials: Credentials,
    pub(crate) bucket: String,
}

/// Why a request failed.
#[derive(Clone, Debug)]
pub(crate) enum S3Error {
    /// No answer: connecting, I/O, a timeout, a malformed response.
    Transport(String),
    /// A non-2xx answer with S3's error code: from its XML body, or the
    /// status's reason when there is none (HEAD answers have no body).
    Status {
        status: u16,
        code: String,
        message: String,
    },
    /// A 2xx answer that does not hold what it should (a short body, a
    /// listing that cannot be read).
    Invalid(String),
}

impl S3Error {
    /// S3's error code, or the kind of failure: what `errors_by_code` counts.
    pub(crate) fn code(&self) -> &str {
        match self {
            S3Error::Transport(_) => "transport",
            S3Error::Status { code, .. } => code,
            S3Error::Invalid(_) => "invalid",
        }
    }

    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            S3Error::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl std::fmt::Display for S3Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            S3Error::Transport(what) | S3Error::Invalid(what) => f.write_str(what),
            S3Error::Status {
                status,
                code,
                message,
            } if message.is_empty() => write!(f, "HTTP {status} {code}"),
            S3Error::Status {
                status,
                code,
                message,
            } => write!(f, "HTTP {status} {code}: {message}"),
        }
    }
}

/// A request body of `remaining_bytes`, sent as slices of one shared
/// chunk.
#[derive(Debug)]
pub(crate) struct PatternBody {
    chunk: Bytes,
    remaining_bytes: u64,
}

impl PatternBody {
    pub(crate) fn new(chunk: Bytes, length_bytes: u64) -> PatternBody {
        assert!(
            length_bytes == 0 || !chunk.is_empty(),
            "a body needs a chunk to repeat"
        );
        PatternBody {
            chunk,
            remaining_bytes: length_bytes,
        }
    }

    fn empty() -> PatternBody {
        PatternBody::new(Bytes::new(), 0)
    }
}

impl Body for PatternBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.remaining_bytes == 0 {
            return Poll::Ready(None);
        }
        let take = usize::try_from(this.remaining_bytes)
            .unwrap_or(usize::MAX)
            .min(this.chunk.len());
        this.remaining_bytes -= take as u64;
        Poll::Ready(Some(Ok(Frame::data(this.chunk.slice(..take)))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining_bytes == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining_bytes)
    }
}

/// One object of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ListedObject {
    pub(crate) key: String,
    pub(crate) size_bytes: u64,
}

/// One ListObjectsV2 page.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ListPage {
    pub(crate) objects: Vec<ListedObject>,
    /// Where the next page starts; `None` on the last page.
    pub(crate) next_token: Option<String>,
}

/// One worker's connection; it reconnects after any failure.
#[derive(Debug)]
pub(crate) struct S3Connection {
    target: Arc<Target>,
    sender: Option<SendRequest<PatternBody>>,
}

impl S3Connection {
    pub(crate) fn new(target: Arc<Target>) -> S3Connection {
        S3Connection {
            target,
            sender: None,
        }
    }

    /// Drops the connection (after a timeout its state is unknown).
    pub(crate) fn reset(&mut self) {
        self.sender = None;
    }

    /// Creates the bucket; one this user already owns is fine.
    pub(crate) async fn create_bucket(&mut self) -> Result<(), S3Error> {
        let region = &self.target.credentials.region;
        let body = if region == DEFAULT_REGION {
            PatternBody::empty()
        } else {
            let xml = format!(
                "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
                 <LocationConstraint>{region}</LocationConstraint></CreateBucketConfiguration>"
            );
            let length = xml.len() as u64;
            PatternBody::new(Bytes::from(xml), length)
        };
        let response = self.send(Method::PUT, None, &[], body).await?;
        match check(response).await {
            Ok(response) => drain(response.into_body()).await.map(drop),
            Err(error) if error.code() == "BucketAlreadyOwnedByYou" => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// PUTs `length_bytes` of `chunk` repeated; returns the bytes sent.
    pub(crate) async fn put_object(
        &mut self,
        key: &str,
        chunk: &Bytes,
        length_bytes: u64,
    ) -> Result<u64, S3Error> {
        let body = PatternBody::new(chunk.clone(), length_bytes);
        let response = self.send(Method::PUT, Some(key), &[], body).await?;
        drain(check(response).await?.into_body()).await?;
        Ok(length_bytes)
    }

    /// GETs a whole object; returns the bytes received.
    pub(crate) async fn get_object(&mut self, key: &str) -> Result<u64, S3Error> {
        let response = self
            .send(Method::GET, Some(key), &[], PatternBody::empty())
            .await?;
        drain(check(response).await?.into_body()).await
    }

    /// GETs a whole object of at most `length_max_bytes` into memory, to
    /// check what it holds; a longer one is an error.
    pub(crate) async fn get_object_bytes(
        &mut self,
        key: &str,
        length_max_bytes: usize,
    ) -> Result<Bytes, S3Error> {
        let response = self
            .send(Method::GET, Some(key), &[], PatternBody::empty())
            .await?;
        let body = Limited::new(check(response).await?.into_body(), length_max_bytes)
            .collect()
            .await
            .map_err(|e| {
                S3Error::Invalid(format!(
                    "GET {key}: {e} (more than the {length_max_bytes} bytes expected?)"
                ))
            })?;
        Ok(body.to_bytes())
    }

    /// HEADs an object; returns its `Content-Length`.
    pub(crate) async fn head_object(&mut self, key: &str) -> Result<u64, S3Error> {
        let response = self
            .send(Method::HEAD, Some(key), &[], PatternBody::empty())
            .await?;
        let response = check(response).await?;
        response
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok()?.parse().ok())
            .ok_or_else(|| S3Error::Invalid(format!("HEAD {key}: no Content-Length")))
    }

    pub(crate) async fn delete_object(&mut self, key: &str) -> Result<(), S3Error> {
        let response = self
            .send(Method::DELETE, Some(key), &[], PatternBody::empty())
            .await?;
        drain(check(response).await?.into_body()).await.map(drop)
    }

    /// One ListObjectsV2 page of keys under `prefix`.
    pub(crate) async fn list_page(
        &mut self,
        prefix: &str,
        keys_max: u32,
        token: Option<&str>,
    ) -> Result<ListPage, S3Error> {
        let keys_max = keys_max.to_string();
        let mut query = vec![
            ("list-type", "2"),
            ("prefix", prefix),
            ("max-keys", keys_max.as_str()),
        ];
        if let Some(token) = token {
            query.push(("continuation-token", token));
        }
        let response = self
            .send(Method::GET, None, &query, PatternBody::empty())
            .await?;
        let body = Limited::new(check(response).await?.into_body(), LIST_BODY_BYTES_MAX)
            .collect()
            .await
            .map_err(|e| S3Error::Transport(format!("reading a listing: {e}")))?
            .to_bytes();
        parse_list(&body).map_err(|e| S3Error::Invalid(format!("a ListObjectsV2 page: {e}")))
    }

    /// Signs and sends one request on this worker's connection.
    async fn send(
        &mut self,
        method: Method,
        key: Option<&str>,
        query: &[(&str, &str)],
        body: PatternBody,
    ) -> Result<Response<Incoming>, S3Error> {
        let target = self.target.clone();
        let path = match key {
            Some(key) => format!("/{}/{key}", target.bucket),
            None => format!("/{}", target.bucket),
        };
        let payload_sha256 = if body.is_end_stream() {
            sigv4::EMPTY_PAYLOAD_SHA256
        } else {
            sigv4::UNSIGNED_PAYLOAD
        };
        let unix_secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let amz_date = sigv4::amz_date(unix_secs);
        let host = target.endpoint.host.as_str();
        let headers = [
            ("host", host),
            ("x-amz-content-sha256", payload_sha256),
            ("x-amz-date", amz_date.as_str()),
        ];
        let authorization = sigv4::authorization(
            &target.credentials,
            &SignedRequest {
                method: method.as_str(),
                path: &path,
                query,
                headers: &headers,
                payload_sha256,
                amz_date: &amz_date,
            },
        );
        let mut uri = sigv4::uri_encode(&path, true);
        if !query.is_empty() {
            uri.push('?');
            uri.push_str(&sigv4::canonical_query(query));
        }
        let mut builder = Request::builder()
            .method(method.clone())
            .uri(uri)
            .header(HOST, host)
            .header("x-amz-content-sha256", payload_sha256)
            .header("x-amz-date", &amz_date)
            .header(AUTHORIZATION, authorization);
        if method == Method::PUT {
            // S3 wants a length, not a chunked upload.
            builder = builder.header(CONTENT_LENGTH, body.remaining_bytes);
        }
        let request = builder
            .body(body)
            .map_err(|e| S3Error::Transport(format!("building a request: {e}")))?;
        let sender = self.ready_sender().await?;
        let sent = sender.send_request(request).await;
        sent.map_err(|e| {
            self.sender = None;
            S3Error::Transport(format!("{method} {path}: {e}"))
        })
    }

    /// The connection, ready for a request: the kept one if the server
    /// has not closed it, else a new one.
    async fn ready_sender(&mut self) -> Result<&mut SendRequest<PatternBody>, S3Error> {
        if let Some(sender) = &mut self.sender
            && sender.ready().await.is_err()
        {
            self.sender = None;
        }
        if self.sender.is_none() {
            self.sender = Some(connect(&self.target.endpoint).await?);
        }
        self.sender
            .as_mut()
            .ok_or_else(|| S3Error::Transport("no connection".into()))
    }
}

async fn connect(endpoint: &Endpoint) -> Result<SendRequest<PatternBody>, S3Error> {
    let failed = |e: &dyn std::fmt::Display| {
        S3Error::Transport(format!("connecting to {}: {e}", endpoint.addr))
    };
    let stream = tokio::net::TcpStream::connect(&endpoint.addr)
        .await
        .map_err(|e| failed(&e))?;
    // Small requests must not wait for Nagle's timer.
    stream.set_nodelay(true).map_err(|e| failed(&e))?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| failed(&e))?;
    // Drives the connection; ends when the sender is dropped or the
    // server closes it (the next request then reconnects).
    tokio::spawn(async move {
        drop(connection.await);
    });
    Ok(sender)
}

/// The response if it is a 2xx, else its error.
async fn check(response: Response<Incoming>) -> Result<Response<Incoming>, S3Error> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = Limited::new(response.into_body(), ERROR_BODY_BYTES_MAX)
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default();
    let (code, message) = parse_error(&body).unwrap_or_else(|| {
        let reason = status.canonical_reason().unwrap_or("Error");
        (reason.replace(' ', ""), String::new())
    });
    Err(S3Error::Status {
        status: status.as_u16(),
        code,
        message,
    })
}

/// Reads a body to its end; returns its length.
async fn drain(mut body: Incoming) -> Result<u64, S3Error> {
    let mut length_bytes = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| S3Error::Transport(format!("reading a body: {e}")))?;
        if let Some(data) = frame.data_ref() {
            length_bytes += data.len() as u64;
        }
    }
    Ok(length_bytes)
}

/// Calls `field` with the path of element names (`["Error", "Code"]`)
/// and the unescaped text of each element as it ends.
fn xml_fields(xml: &[u8], mut field: impl FnMut(&[String], &str)) -> Result<(), String> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_reader(xml);
    let mut path: Vec<String> = Vec::new();
    // The element's text as written (entities still escaped).
    let mut raw = String::new();
    loop {
        match reader.read_event().map_err(|e| e.to_string())? {
            Event::Start(start) => {
                path.push(String::from_utf8_lossy(start.local_name().as_ref()).into_owned());
                raw.clear();
            }
            Event::Text(text) => raw.push_str(&text.decode().map_err(|e| e.to_string())?),
            Event::GeneralRef(reference) => {
                raw.push('&');
                raw.push_str(&reference.decode().map_err(|e| e.to_string())?);
                raw.push(';');
            }
            Event::End(_) => {
                let text = quick_xml::escape::unescape(&raw).map_err(|e| e.to_string())?;
                field(&path, &text);
                path.pop();
                raw.clear();
            }
            Event::Eof => return Ok(()),
            _ => {}
        }
    }
}

/// The `Code` and `Message` of an S3 error body.
fn parse_error(xml: &[u8]) -> Option<(String, String)> {
    let mut code = None;
    let mut message = String::new();
    xml_fields(xml, |path, text| match path {
        [_, name] if name == "Code" => code = Some(text.to_owned()),
        [_, name] if name == "Message" => message = text.to_owned(),
        _ => {}
    })
    .ok()?;
    Some((code?, message))
}

fn parse_list(xml: &[u8]) -> Result<ListPage, String> {
    let mut page = ListPage::default();
    let mut truncated = false;
    let mut token = None;
    let (mut key, mut size_bytes) = (None, None);
    let mut bad_size = None;
    xml_fields(xml, |path, text| match path {
        [_, name] if name == "IsTruncated" => truncated = text == "true",
        [_, name] if name == "NextContinuationToken" => token = Some(text.to_owned()),
        [_, contents, name] if contents == "Contents" && name == "Key" => {
            key = Some(text.to_owned());
        }
        [_, contents, name] if contents == "Contents" && name == "Size" => match text.parse() {
            Ok(size) => size_bytes = Some(size),
            Err(_) => bad_size = Some(text.to_owned()),
        },
        [_, contents] if contents == "Contents" => {
            if let (Some(key), Some(size_bytes)) = (key.take(), size_bytes.take()) {
                page.objects.push(ListedObject { key, size_bytes });
            }
        }
        _ => {}
    })?;
    if let Some(size) = bad_size {
        return Err(format!("size {size:?} is not a number"));
    }
    if truncated {
        // Without a token the walk could not go on: it would loop.
        page.next_token = Some(token.ok_or("truncated without a NextContinuationToken")?);
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_an_error_body() {
        let xml = br#"<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature &amp; more</Message><RequestId>1</RequestId></Error>"#;
        assert_eq!(
            parse_error(xml),
            Some((
                "SignatureDoesNotMatch".to_owned(),
                "The request signature & more".to_owned()
            ))
        );
        assert_eq!(parse_error(b""), None);
        assert_eq!(parse_error(b"<html>bad gateway</html>"), None);
    }

    #[test]
    fn reads_a_listing_page_with_escaped_keys() {
        let xml = br#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>b</Name><Prefix>bench/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>
  <IsTruncated>true</IsTruncated>
  <Contents><Key>bench/00000000</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>
    <ETag>&quot;abc&quot;</ETag><Size>4096</Size><StorageClass>STANDARD</StorageClass></Contents>
  <Contents><Key>bench/a&amp;b&#x20;c</Key><Size>0</Size></Contents>
  <NextContinuationToken>tok/en=</NextContinuationToken>
</ListBucketResult>"#;
        let page = parse_list(xml).expect("parses");
        assert_eq!(
            page.objects,
            vec![
                ListedObject {
                    key: "bench/00000000".into(),
                    size_bytes: 4096
                },
                ListedObject {
                    key: "bench/a&b c".into(),
                    size_bytes: 0
                },
            ]
        );
        assert_eq!(page.next_token.as_deref(), Some("tok/en="));
        let last = br"<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";
        assert_eq!(parse_list(last), Ok(ListPage::default()));
        let endless = br"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>";
        assert!(parse_list(endless).is_err());
    }

    #[test]
    fn parses_endpoints() {
        let endpoint = Endpoint::parse("http://127.0.0.1:9000/").expect("valid");
        assert_eq!(
            (endpoint.host.as_str(), endpoint.addr.as_str()),
            ("127.0.0.1:9000", "127.0.0.1:9000")
        );
        let endpoint = Endpoint::parse("http://s3.local").expect("valid");
        assert_eq!(endpoint.addr, "s3.local:80");
        let endpoint = Endpoint::parse("http://[::1]:8080").expect("valid");
        assert_eq!(endpoint.addr, "[::1]:8080");
        assert!(Endpoint::parse("https://s3.amazonaws.com").is_err());
        assert!(Endpoint::parse("127.0.0.1:9000").is_err());
        assert!(Endpoint::parse("http://host:9000/bucket").is_err());
    }

    #[test]
    fn a_body_is_slices_of_its_chunk() {
        use std::task::Waker;
        let mut body = PatternBody::new(Bytes::from_static(b"abcd"), 10);
        let mut cx = Context::from_waker(Waker::noop());
        let mut lengths = Vec::new();
        while let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut body).poll_frame(&mut cx) {
            lengths.push(frame.into_data().map_or(0, |data| data.len()));
        }
        assert_eq!(lengths, vec![4, 4, 2]);
        assert!(body.is_end_stream());
    }
}

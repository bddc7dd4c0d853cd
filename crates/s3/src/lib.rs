//! Cairn's S3 gateway: a stateless HTTP/1.1 front end (`s3s` for the S3
//! protocol and SigV4, `hyper` for HTTP) over the client library. Users,
//! keys, buckets and bucket indexes live in omap objects of the `s3.meta`
//! pool, object heads in each bucket's pool ([`meta`]); any number of
//! gateways can serve one cluster. See `docs/s3.md`.

pub mod auth;
pub mod body;
pub mod checksum;
pub mod gateway;
pub mod index;
pub mod intent;
pub mod meta;
pub mod multipart;
pub mod orphans;
pub mod tagging;
pub mod versioning;

/// Ends the process at crash point `point` if `CAIRN_S3_CRASH_AT` names
/// it: how the fault tests cut a versioned write exactly between two of
/// its steps, as a power cut or SIGKILL would. Unset, it does nothing.
pub(crate) fn crash_point(point: &str) {
    static AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let at = AT.get_or_init(|| std::env::var("CAIRN_S3_CRASH_AT").ok());
    if at.as_deref() == Some(point) {
        tracing::error!(point, "CAIRN_S3_CRASH_AT: stopping here");
        std::process::abort();
    }
}

use cairn_client::{Client, WriteOp};

/// The region the gateway answers as (GetBucketLocation's empty answer
/// means this one).
pub const REGION: &str = "us-east-1";

/// The region a request's SigV4 credential scope names (header or
/// presigned query), if it has one.
fn signed_region(req: &http::Request<hyper::body::Incoming>) -> Option<String> {
    let scope = match req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        Some(auth) => auth
            .split("Credential=")
            .nth(1)?
            .split([',', ' '])
            .next()?
            .to_owned(),
        None => {
            let query = req.uri().query()?;
            let value = query
                .split('&')
                .find_map(|pair| pair.strip_prefix("X-Amz-Credential="))?;
            value.replace("%2F", "/").replace("%2f", "/")
        }
    };
    // ACCESS_KEY/DATE/REGION/SERVICE/aws4_request
    let parts: Vec<&str> = scope.rsplitn(4, '/').collect();
    (parts.len() == 4).then(|| parts[2].to_owned())
}

/// S3's answer to a request signed for a region that cannot be one (s3cmd
/// signs for `US` until told better): `AuthorizationHeaderMalformed`
/// naming the right region, which clients retry with, as they do on AWS.
fn wrong_region(region: &str) -> s3s::HttpResponse {
    let escaped: String = region
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AuthorizationHeaderMalformed</Code>\
         <Message>The authorization header is malformed; the region '{escaped}' is wrong; expecting '{REGION}'</Message>\
         <Region>{REGION}</Region></Error>"
    );
    let mut response = http::Response::new(s3s::Body::from(body));
    *response.status_mut() = http::StatusCode::BAD_REQUEST;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    response.headers_mut().insert(
        "x-amz-bucket-region",
        http::HeaderValue::from_static(REGION),
    );
    response
}

/// The gateway's HTTP service: s3s, after the few checks s3s answers
/// differently from AWS.
#[derive(Clone)]
struct Front(s3s::service::S3Service);

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for Front {
    type Response = s3s::HttpResponse;
    type Error = s3s::HttpError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn call(&self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        // s3s refuses a region outside [a-z0-9-] as a bad request; AWS
        // answers which region to sign for.
        if let Some(region) = signed_region(&req)
            && !region.is_empty()
            && !region
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            let response = wrong_region(&region);
            return Box::pin(async move { Ok(response) });
        }
        hyper::service::Service::call(&self.0, req)
    }
}
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::service::S3ServiceBuilder;
use std::net::SocketAddr;
use tokio::net::TcpListener;

/// Makes the gateway's records pool and record objects if missing.
///
/// # Errors
/// The cluster's error.
pub async fn prepare(client: &Client, pg_num: u32, size: u32) -> Result<(), meta::MetaError> {
    let map = client.refresh_map().await?;
    if !map.pools.iter().any(|p| p.name == meta::META_POOL) {
        let command = cairn_proto::mon::MonCommand::PoolCreate {
            name: meta::META_POOL.to_owned(),
            pg_num,
            redundancy: cairn_proto::mon::RedundancySpec::Replicated {
                size,
                min_size: size.saturating_sub(1).max(1),
            },
            failure_domain: cairn_proto::mon::FailureDomainSpec::Osd,
            device_class: None,
        };
        match client.mon_command(command).await {
            Ok(_) => {}
            // Another gateway made it first.
            Err(_)
                if client
                    .refresh_map()
                    .await?
                    .pools
                    .iter()
                    .any(|p| p.name == meta::META_POOL) => {}
            Err(e) => return Err(e.into()),
        }
        // The pool is in the map once the monitor commits it.
        let started = std::time::Instant::now();
        while !client
            .refresh_map()
            .await?
            .pools
            .iter()
            .any(|p| p.name == meta::META_POOL)
        {
            if started.elapsed() > std::time::Duration::from_secs(30) {
                return Err(cairn_client::ClientError::NoPool(meta::META_POOL.to_owned()).into());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    for object in [meta::USERS_OBJECT, meta::BUCKETS_OBJECT] {
        client
            .operate(meta::META_POOL, object, WriteOp::new().create(false))
            .await?;
    }
    Ok(())
}

/// A TLS server configuration from a PEM certificate chain and a PEM
/// private key (PKCS#8, PKCS#1 or SEC1).
///
/// # Errors
/// A file that cannot be read, holds no certificate or key, or a key
/// that does not fit the certificate.
pub fn tls_config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<std::sync::Arc<tokio_rustls::rustls::ServerConfig>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("cannot read the certificate {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate {} is not PEM: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{} holds no certificate", cert.display()));
    }
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("cannot read a private key from {}: {e}", key.display()))?;
    let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| format!("the key does not fit the certificate: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(std::sync::Arc::new(config))
}

/// Serves S3 on `listener` until the task is dropped (over TLS if `tls`
/// is given); buckets made without a location constraint naming a pool
/// go to `default_pool`; requests to `BUCKET.DOMAIN` for one of
/// `domains` name their bucket in the host.
///
/// # Errors
/// The listener fails.
pub async fn serve(
    client: Client,
    listener: TcpListener,
    default_pool: String,
    domains: auth::Domains,
    tls: Option<std::sync::Arc<tokio_rustls::rustls::ServerConfig>>,
) -> std::io::Result<()> {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let keys = auth::Keys::new(client.clone());
    let gateway = gateway::Gateway::new(client, keys.clone(), default_pool);
    tokio::spawn(intent::background(gateway.clone()));
    let service = {
        let mut builder = S3ServiceBuilder::new(gateway);
        builder.set_auth(keys);
        builder.set_access(auth::Access);
        builder.set_host(domains);
        Front(builder.build())
    };
    let http = ConnBuilder::new(TokioExecutor::new());
    loop {
        let (socket, peer): (_, SocketAddr) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        let (http, service) = (http.clone(), service.clone());
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let ended = match acceptor {
                Some(acceptor) => match acceptor.accept(socket).await {
                    Ok(stream) => http.serve_connection(TokioIo::new(stream), service).await,
                    Err(error) => {
                        tracing::debug!(%peer, %error, "TLS handshake failed");
                        return;
                    }
                },
                None => http.serve_connection(TokioIo::new(socket), service).await,
            };
            if let Err(error) = ended {
                tracing::debug!(%peer, %error, "connection ended");
            }
        });
    }
}

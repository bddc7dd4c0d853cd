//! Cairn's S3 gateway: a stateless HTTP/1.1 front end (`s3s` for the S3
//! protocol and SigV4, `hyper` for HTTP) over the client library. Users,
//! keys, buckets and bucket indexes live in omap objects of the `s3.meta`
//! pool, object heads in each bucket's pool ([`meta`]); any number of
//! gateways can serve one cluster. See `docs/s3.md`.

pub mod auth;
pub mod body;
pub mod gateway;
pub mod index;
pub mod intent;
pub mod meta;
pub mod multipart;
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

/// Serves S3 on `listener` until the task is dropped; buckets made
/// without a location constraint naming a pool go to `default_pool`;
/// requests to `BUCKET.DOMAIN` for one of `domains` name their bucket in
/// the host.
///
/// # Errors
/// The listener fails.
pub async fn serve(
    client: Client,
    listener: TcpListener,
    default_pool: String,
    domains: auth::Domains,
) -> std::io::Result<()> {
    let keys = auth::Keys::new(client.clone());
    let gateway = gateway::Gateway::new(client, keys.clone(), default_pool);
    tokio::spawn(intent::background(gateway.clone()));
    let service = {
        let mut builder = S3ServiceBuilder::new(gateway);
        builder.set_auth(keys);
        builder.set_access(auth::Access);
        builder.set_host(domains);
        builder.build()
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
        let conn = http
            .serve_connection(TokioIo::new(socket), service.clone())
            .into_owned();
        tokio::spawn(async move {
            if let Err(error) = conn.await {
                tracing::debug!(%peer, %error, "connection ended");
            }
        });
    }
}

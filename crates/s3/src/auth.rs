//! Access keys: the secret SigV4 checks against, and the user a key
//! belongs to, read from the cluster and kept for [`KEY_CACHE_TTL`].

use crate::meta;
use cairn_client::Client;
use s3s::S3Result;
use s3s::auth::{S3Auth, SecretKey};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a key read from the cluster is trusted: a removed key stops
/// working on every gateway within this.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(10);

/// The access keys this gateway has seen, shared by the signature check
/// and the operations (which need the user).
#[derive(Clone, Debug)]
pub struct Keys {
    client: Client,
    cache: Arc<Mutex<HashMap<String, (meta::KeyRecord, Instant)>>>,
}

impl Keys {
    #[must_use]
    pub fn new(client: Client) -> Keys {
        Keys {
            client,
            cache: Arc::default(),
        }
    }

    /// The user of a key the signature check accepted.
    #[must_use]
    pub fn user_of(&self, access: &str) -> Option<String> {
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.get(access).map(|(record, _)| record.user.clone())
    }

    async fn record(&self, access: &str) -> S3Result<Option<meta::KeyRecord>> {
        {
            let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((record, at)) = cache.get(access)
                && at.elapsed() < KEY_CACHE_TTL
            {
                return Ok(Some(record.clone()));
            }
        }
        let record = meta::key_record(&self.client, access).await?;
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        match &record {
            Some(record) => {
                cache.insert(access.to_owned(), (record.clone(), Instant::now()));
            }
            None => {
                cache.remove(access);
            }
        }
        Ok(record)
    }
}

#[async_trait::async_trait]
impl S3Auth for Keys {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.record(access_key).await? {
            Some(record) => Ok(SecretKey::from(record.secret)),
            None => Err(s3s::s3_error!(InvalidAccessKeyId)),
        }
    }
}

/// The operations an unsigned request may ask for: reads of a bucket made
/// public-read (the operation checks the bucket; every other unsigned
/// request is refused here).
pub const ANONYMOUS_OPERATIONS: &[&str] = &[
    "GetObject",
    "HeadObject",
    "HeadBucket",
    "ListObjects",
    "ListObjectsV2",
    "ListObjectVersions",
];

/// Who may ask for what before the operation runs: a signed request for
/// anything (the operation checks ownership), an unsigned one only for
/// [`ANONYMOUS_OPERATIONS`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Access;

#[async_trait::async_trait]
impl s3s::access::S3Access for Access {
    async fn check(&self, cx: &mut s3s::access::S3AccessContext<'_>) -> S3Result<()> {
        if cx.credentials().is_some() || ANONYMOUS_OPERATIONS.contains(&cx.s3_op().name()) {
            return Ok(());
        }
        Err(s3s::s3_error!(AccessDenied, "Signature is required"))
    }
}

/// Which requests name their bucket in the host (virtual-hosted
/// addressing): `BUCKET.DOMAIN` for each of the gateway's domains. Any
/// other host (a domain itself, an IP address, a name the gateway was not
/// given) is path-style, so a gateway answers under any name it is
/// reached by.
#[derive(Clone, Debug)]
pub struct Domains(Vec<String>);

impl Domains {
    /// The domains, checked (`localhost` is always one).
    ///
    /// # Errors
    /// A domain that is not a host name.
    pub fn new(domains: &[String]) -> Result<Domains, String> {
        let mut out = vec!["localhost".to_owned()];
        for domain in domains {
            let domain = domain.trim().trim_end_matches('.').to_ascii_lowercase();
            let valid = !domain.is_empty()
                && domain.split('.').all(|label| {
                    !label.is_empty()
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                });
            if !valid {
                return Err(format!("{domain:?} is not a domain name"));
            }
            if !out.contains(&domain) {
                out.push(domain);
            }
        }
        Ok(Domains(out))
    }
}

impl s3s::host::S3Host for Domains {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<s3s::host::VirtualHost<'a>> {
        // The port, if any, is not part of the name.
        let name = match host.rsplit_once(':') {
            Some((name, port))
                if !name.ends_with(']') && port.bytes().all(|b| b.is_ascii_digit()) =>
            {
                name
            }
            _ => host,
        };
        let lower = name.to_ascii_lowercase();
        for domain in &self.0 {
            if let Some(bucket) = lower
                .strip_suffix(domain.as_str())
                .and_then(|rest| rest.strip_suffix('.'))
                .filter(|bucket| !bucket.is_empty())
            {
                return Ok(
                    s3s::host::VirtualHost::new(domain.as_str()).with_bucket(bucket.to_owned())
                );
            }
        }
        Ok(s3s::host::VirtualHost::new(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::host::S3Host;

    #[test]
    fn hosts_under_a_domain_name_their_bucket_and_others_are_path_style() {
        let domains = Domains::new(&["s3.example.org".into()]).expect("valid");
        let bucket = |host: &str| {
            domains
                .parse_host_header(host)
                .expect("parses")
                .bucket()
                .map(str::to_owned)
        };
        assert_eq!(bucket("photos.s3.example.org"), Some("photos".into()));
        assert_eq!(bucket("photos.s3.example.org:9000"), Some("photos".into()));
        assert_eq!(
            bucket("my.dotted.bucket.localhost:9000"),
            Some("my.dotted.bucket".into())
        );
        assert_eq!(bucket("s3.example.org:9000"), None);
        assert_eq!(bucket("localhost:9000"), None);
        assert_eq!(bucket("127.0.0.1:9000"), None);
        assert_eq!(bucket("[::1]:9000"), None);
        assert_eq!(bucket("elsewhere.example.com"), None);
        assert!(Domains::new(&["bad domain".into()]).is_err());
        assert!(Domains::new(&["a..b".into()]).is_err());
    }
}

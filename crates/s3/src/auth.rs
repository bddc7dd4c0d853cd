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

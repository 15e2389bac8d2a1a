//! argon2id verification off the async workers: at most one run per core at a time, identical
//! concurrent checks share one run, and unknown users are checked against a dummy hash so they cost
//! the same time as known ones.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use argon2::{Argon2, PasswordHash, PasswordHasher, PasswordVerifier as _};
use tokio::sync::{OnceCell, Semaphore};

use super::cache::CacheKey;
use crate::config::Secret;

pub struct Verifier {
    permits: Arc<Semaphore>,
    inflight: Mutex<HashMap<CacheKey, Arc<OnceCell<bool>>>>,
    dummy: PasswordHash,
    counters: Arc<Counters>,
}

/// What argon2 has done, for metrics and the tests that count it.
#[derive(Default)]
pub struct Counters {
    pub runs: AtomicU64,
    pub running: AtomicUsize,
    pub peak_running: AtomicUsize,
}

/// Hash a password with the OWASP-recommended argon2id parameters (m=19 MiB, t=2, p=1).
pub fn hash_password(password: &str) -> String {
    Argon2::default()
        .hash_password(password.as_bytes())
        .expect("argon2 with default parameters and a random salt cannot fail")
        .to_string()
}

impl Verifier {
    pub fn new(max_concurrent: usize) -> Self {
        let mut pw = [0u8; 24];
        getrandom::fill(&mut pw).expect("the OS random source is available");
        let dummy_text = hash_password(&String::from_utf8_lossy(&pw));
        Verifier {
            permits: Arc::new(Semaphore::new(max_concurrent.max(1))),
            inflight: Mutex::new(HashMap::new()),
            dummy: PasswordHash::new(&dummy_text).expect("a hash we just made parses"),
            counters: Arc::new(Counters::default()),
        }
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Verify `password` against `hash` (the dummy when the user is unknown, which always fails).
    /// `key` identifies the credential: concurrent calls with the same key share one argon2 run,
    /// and only a call that starts a run asks `admit` (the login limiter) first. So a client that
    /// opens many connections at once with one new credential is charged one attempt, not one per
    /// connection, and joining a run can never start an uncharged one.
    pub async fn verify<E>(
        &self,
        key: CacheKey,
        hash: Option<&PasswordHash>,
        password: &Secret,
        admit: impl FnOnce() -> Result<(), E>,
    ) -> Result<bool, E> {
        let known = hash.is_some();
        let cell = {
            let mut map = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            match map.get(&key) {
                Some(running) => running.clone(),
                None => {
                    admit()?;
                    map.entry(key).or_default().clone()
                }
            }
        };
        let hash = hash.unwrap_or(&self.dummy).clone();
        let ok = *cell
            .get_or_init(|| {
                let password = password.clone();
                let permits = self.permits.clone();
                let counters = self.counters.clone();
                async move {
                    let Ok(permit) = permits.acquire_owned().await else {
                        return false;
                    };
                    // The permit moves into the blocking task: if the request that started this
                    // verification goes away, the argon2 run still holds its slot until it ends.
                    tokio::task::spawn_blocking(move || {
                        let _permit = permit;
                        let now = counters.running.fetch_add(1, Ordering::SeqCst) + 1;
                        counters.peak_running.fetch_max(now, Ordering::SeqCst);
                        counters.runs.fetch_add(1, Ordering::SeqCst);
                        let ok = Argon2::default()
                            .verify_password(password.expose().as_bytes(), &hash)
                            .is_ok();
                        counters.running.fetch_sub(1, Ordering::SeqCst);
                        ok
                    })
                    .await
                    .unwrap_or(false)
                }
            })
            .await;
        {
            let mut map = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            if map.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                map.remove(&key);
            }
        }
        Ok(ok && known)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admit() -> Result<(), ()> {
        Ok(())
    }

    #[tokio::test]
    async fn refused_admission_starts_no_run() {
        let v = Verifier::new(1);
        let hash = PasswordHash::new(&hash_password("pw")).unwrap();
        assert_eq!(
            v.verify([4; 32], Some(&hash), &Secret::new("pw"), || Err("limited"))
                .await,
            Err("limited")
        );
        assert_eq!(v.counters().runs.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn right_and_wrong_passwords() {
        let v = Verifier::new(2);
        let hash = PasswordHash::new(&hash_password("correct horse")).unwrap();
        assert_eq!(
            v.verify([1; 32], Some(&hash), &Secret::new("correct horse"), admit)
                .await,
            Ok(true)
        );
        assert_eq!(
            v.verify([2; 32], Some(&hash), &Secret::new("wrong"), admit).await,
            Ok(false)
        );
        assert_eq!(
            v.verify([3; 32], None, &Secret::new("correct horse"), admit).await,
            Ok(false),
            "unknown users never pass"
        );
        assert_eq!(
            v.counters().runs.load(Ordering::SeqCst),
            3,
            "the unknown user cost a run too"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn identical_concurrent_checks_share_one_run() {
        let v = Arc::new(Verifier::new(1));
        let hash = PasswordHash::new(&hash_password("pw")).unwrap();
        let before = v.counters().runs.load(Ordering::SeqCst);
        let admitted = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let v = v.clone();
                let hash = hash.clone();
                let admitted = admitted.clone();
                tokio::spawn(async move {
                    v.verify([9; 32], Some(&hash), &Secret::new("pw"), || {
                        admitted.fetch_add(1, Ordering::SeqCst);
                        Ok::<(), ()>(())
                    })
                    .await
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap(), Ok(true));
        }
        let runs = v.counters().runs.load(Ordering::SeqCst) - before;
        assert!(runs < 8, "8 identical checks ran argon2 {runs} times");
        assert_eq!(
            admitted.load(Ordering::SeqCst) as u64,
            runs,
            "only checks that started a run were charged"
        );
        assert_eq!(v.counters().peak_running.load(Ordering::SeqCst), 1);
    }
}

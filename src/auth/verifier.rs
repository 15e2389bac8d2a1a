//! argon2id verification off the async workers: at most one run per core at a time, identical
//! concurrent checks share one run, and unknown users are checked against a dummy hash so they cost
//! the same time as known ones.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use argon2::{Argon2, PasswordHash, PasswordHasher, PasswordVerifier as _};
use tokio::sync::{Semaphore, watch};

use super::cache::CacheKey;
use crate::config::Secret;

pub struct Verifier {
    permits: Arc<Semaphore>,
    /// Runs in progress by credential; each sender is held by the call that started the run.
    inflight: Mutex<HashMap<CacheKey, watch::Receiver<Option<bool>>>>,
    dummy: PasswordHash,
    counters: Arc<Counters>,
}

/// What argon2 has done, for metrics and the tests that count it.
#[derive(Default)]
pub(crate) struct Counters {
    pub runs: AtomicU64,
    pub running: AtomicUsize,
    /// Runs waiting for a core.
    pub waiting: AtomicUsize,
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
    pub(crate) fn new(max_concurrent: usize) -> Self {
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

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Verify `password` against `hash` (the dummy when the user is unknown, which always fails).
    /// `key` identifies the credential: concurrent calls with the same key share one argon2 run,
    /// and only a call that starts a run asks `admit` (the login limiter) and then `admit_shared`
    /// (its allowances shared with other gateways, `Limiters::shared_attempt`) first. So a client that
    /// opens many connections at once with one new credential is charged one attempt, not one per
    /// connection, and joining a run can never start an uncharged one.
    ///
    /// The in-flight entry belongs to the call that started the run and is removed by a guard,
    /// also when that call is cancelled (its client went away mid-verification): otherwise the next
    /// call would find the entry, skip `admit`, and start an uncharged run. Calls that had joined a
    /// cancelled run start over, and are charged if they start the next one.
    pub(crate) async fn verify<E, Shared: Future<Output = Result<(), E>>>(
        &self,
        key: CacheKey,
        hash: Option<&PasswordHash>,
        password: &Secret,
        mut admit: impl FnMut() -> Result<(), E>,
        mut admit_shared: impl FnMut() -> Shared,
    ) -> Result<bool, E> {
        let known = hash.is_some();
        loop {
            let role = {
                let mut map = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
                match map.get(&key) {
                    Some(running) => Err(running.clone()),
                    None => {
                        admit()?;
                        let (tx, rx) = watch::channel(None);
                        map.insert(key, rx);
                        Ok(tx)
                    }
                }
            };
            match role {
                Err(mut joined) => {
                    // `Err` here: the run's starter was cancelled before a verdict. Start over.
                    if let Ok(verdict) = joined.wait_for(Option::is_some).await {
                        return Ok(verdict.unwrap_or(false) && known);
                    }
                }
                Ok(tx) => {
                    let _entry = InflightEntry {
                        verifier: self,
                        key,
                        rx: tx.subscribe(),
                    };
                    // The shared half (other gateways' allowances, in the store) is awaited here,
                    // outside the lock: refused, the entry goes and those who joined start over.
                    admit_shared().await?;
                    let ok = self.run(hash.unwrap_or(&self.dummy).clone(), password.clone()).await;
                    let _ = tx.send(Some(ok));
                    return Ok(ok && known);
                }
            }
        }
    }

    /// One argon2 run on a blocking thread, at most one per core.
    async fn run(&self, hash: PasswordHash, password: Secret) -> bool {
        let queued = Queued::new(&self.counters);
        let permit = self.permits.clone().acquire_owned().await;
        drop(queued);
        let Ok(permit) = permit else {
            return false;
        };
        let counters = self.counters.clone();
        // The permit moves into the blocking task: if the request that started this verification
        // goes away, the argon2 run still holds its slot until it ends.
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

    #[cfg(test)]
    fn inflight_len(&self) -> usize {
        self.inflight.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Removes a run's in-flight entry when the call that started it ends, however it ends.
struct InflightEntry<'a> {
    verifier: &'a Verifier,
    key: CacheKey,
    rx: watch::Receiver<Option<bool>>,
}

impl Drop for InflightEntry<'_> {
    fn drop(&mut self) {
        let mut map = self.verifier.inflight.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(&self.key).is_some_and(|rx| rx.same_channel(&self.rx)) {
            map.remove(&self.key);
        }
    }
}

/// Counted in `waiting` while it lives: also when the request waiting for a core goes away.
struct Queued<'a>(&'a Counters);

impl<'a> Queued<'a> {
    fn new(c: &'a Counters) -> Self {
        c.waiting.fetch_add(1, Ordering::Relaxed);
        Queued(c)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admit() -> Result<(), ()> {
        Ok(())
    }

    /// Verify `password` for `key` with the limiter refusing.
    async fn limited(v: &Verifier, key: CacheKey, hash: &PasswordHash, password: &str) -> Result<bool, &'static str> {
        v.verify(
            key,
            Some(hash),
            &Secret::new(password),
            || Err("limited"),
            || async { Ok(()) },
        )
        .await
    }

    /// Verify `password` for `key`, each admission adding one to `charged` (the shared half
    /// always admits).
    async fn counted(
        v: &Verifier,
        key: CacheKey,
        hash: &PasswordHash,
        password: &str,
        charged: &AtomicUsize,
    ) -> Result<bool, ()> {
        let admit = || {
            charged.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        v.verify(key, Some(hash), &Secret::new(password), admit, || async { Ok(()) })
            .await
    }

    #[tokio::test]
    async fn refused_admission_starts_no_run() {
        let v = Verifier::new(1);
        let hash = PasswordHash::new(&hash_password("pw")).unwrap();
        assert_eq!(limited(&v, [4; 32], &hash, "pw").await, Err("limited"));
        assert_eq!(v.counters().runs.load(Ordering::SeqCst), 0);
    }

    /// The shared half refusing (another gateway spent the allowance) starts no run either, and
    /// leaves no entry behind: the next call is asked again.
    #[tokio::test]
    async fn refused_shared_admission_starts_no_run() {
        let v = Verifier::new(1);
        let hash = PasswordHash::new(&hash_password("pw")).unwrap();
        let refuse = || async { Err("spent elsewhere") };
        assert_eq!(
            v.verify([5; 32], Some(&hash), &Secret::new("pw"), || Ok(()), refuse)
                .await,
            Err("spent elsewhere")
        );
        assert_eq!(v.counters().runs.load(Ordering::SeqCst), 0);
        assert_eq!(v.inflight_len(), 0);
        assert_eq!(
            v.verify(
                [5; 32],
                Some(&hash),
                &Secret::new("pw"),
                || Ok::<(), &str>(()),
                || async { Ok(()) }
            )
            .await,
            Ok(true)
        );
    }

    #[tokio::test]
    async fn right_and_wrong_passwords() {
        let v = Verifier::new(2);
        let hash = PasswordHash::new(&hash_password("correct horse")).unwrap();
        assert_eq!(
            v.verify([1; 32], Some(&hash), &Secret::new("correct horse"), admit, || async {
                Ok(())
            })
            .await,
            Ok(true)
        );
        assert_eq!(
            v.verify([2; 32], Some(&hash), &Secret::new("wrong"), admit, || async { Ok(()) })
                .await,
            Ok(false)
        );
        assert_eq!(
            v.verify([3; 32], None, &Secret::new("correct horse"), admit, || async { Ok(()) })
                .await,
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
                tokio::spawn(async move { counted(&v, [9; 32], &hash, "pw", &admitted).await })
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_verification_cancelled_mid_run_leaves_no_entry_and_the_next_is_charged() {
        let v = Arc::new(Verifier::new(1));
        let hash = PasswordHash::new(&hash_password("pw")).unwrap();
        let charged = Arc::new(AtomicUsize::new(0));
        let (v2, hash2, charged2) = (v.clone(), hash.clone(), charged.clone());
        let first = tokio::spawn(async move { counted(&v2, [7; 32], &hash2, "guess", &charged2).await });
        // Wait (bounded) until argon2 runs, then cancel the request, as a client that hangs up does.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while v.counters().running.load(Ordering::SeqCst) == 0 {
            assert!(std::time::Instant::now() < deadline, "argon2 never started");
            tokio::task::yield_now().await;
        }
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        assert_eq!(v.inflight_len(), 0, "the cancelled run left its in-flight entry");
        // The same credential again: a new run, and the limiter is asked (and may refuse).
        assert_eq!(
            limited(&v, [7; 32], &hash, "guess").await,
            Err("limited"),
            "the next attempt skipped the limiter"
        );
        assert_eq!(charged.load(Ordering::SeqCst), 1);
        assert_eq!(v.inflight_len(), 0);
    }
}

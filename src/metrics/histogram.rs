//! A latency histogram of atomics: the library's own histogram takes a mutex on every
//! observation, and this one is observed once per proxied request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Upper bounds in seconds: from a local server's few milliseconds to a model that thinks.
pub(crate) const BOUNDS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

#[derive(Debug, Default)]
struct Inner {
    /// Per bucket, not cumulative; the last one is `+Inf`.
    buckets: [AtomicU64; BOUNDS.len() + 1],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

/// Cloning shares the counts (a family hands out clones of one histogram per label set).
#[derive(Clone, Debug, Default)]
pub struct Latency(Arc<Inner>);

impl Latency {
    pub(crate) fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BOUNDS.iter().position(|b| secs <= *b).unwrap_or(BOUNDS.len());
        self.0.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.0
            .sum_micros
            .fetch_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.0.count.fetch_add(1, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn count(&self) -> u64 {
        self.0.count.load(Ordering::Relaxed)
    }
}

impl TypedMetric for Latency {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Latency {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets: Vec<(f64, u64)> = BOUNDS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.0.buckets.iter().map(|b| b.load(Ordering::Relaxed)))
            .collect();
        // The count is the buckets' sum, so `_count` and the `+Inf` bucket always agree even when
        // an observation lands between the loads.
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.0.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = Latency::default();
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_secs(100));
        let n = |i: usize| h.0.buckets[i].load(Ordering::Relaxed);
        assert_eq!((n(0), n(1), n(BOUNDS.len())), (2, 0, 1));
        assert_eq!(h.count(), 3);
        assert_eq!(h.0.sum_micros.load(Ordering::Relaxed), 100_008_000);
    }
}

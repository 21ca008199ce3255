//! The arithmetic the benchmarks share: percentiles of samples, ratios of two
//! summaries, and the tally of a burst (loss, duplicates, order).

use crate::{Delivery, Ratios, Summary};
use std::collections::HashSet;

/// The nearest-rank percentile of `sorted` (ascending): the smallest sample with at
/// least `q` (0 to 1) of the samples at or below it. NaN when there are none.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// p50, p90, p99 (nearest rank) and the mean of `samples`, in their unit; NaN for
/// each when there are no samples.
pub fn summary(samples: &[f64]) -> Summary {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mean = if sorted.is_empty() {
        f64::NAN
    } else {
        sorted.iter().sum::<f64>() / sorted.len() as f64
    };
    Summary {
        p50: percentile(&sorted, 0.50),
        p90: percentile(&sorted, 0.90),
        p99: percentile(&sorted, 0.99),
        mean,
    }
}

/// `ours ÷ baseline` per percentile.
pub fn ratios(ours: &Summary, baseline: &Summary) -> Ratios {
    Ratios {
        p50: ours.p50 / baseline.p50,
        p90: ours.p90 / baseline.p90,
        p99: ours.p99 / baseline.p99,
    }
}

/// What one receiver got of a burst of messages numbered 0, 1, 2… in sending order.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    order: Vec<u64>,
    distinct: HashSet<u64>,
}

impl Tally {
    /// Records the arrival of message `index`; returns whether it is new (not a copy).
    pub fn arrived(&mut self, index: u64) -> bool {
        self.order.push(index);
        self.distinct.insert(index)
    }

    /// Distinct messages received so far.
    pub fn distinct(&self) -> u64 {
        self.distinct.len() as u64
    }

    /// The counts for a burst of `sent` messages: `missing` is those of `0..sent` never
    /// received; `duplicates` the extra copies; `out_of_order` the arrivals of a message
    /// sent before the one that arrived just before it.
    pub fn delivery(&self, sent: u64) -> Delivery {
        let received = self.distinct();
        let in_burst = self.distinct.iter().filter(|&&i| i < sent).count() as u64;
        Delivery {
            received,
            missing: sent - in_burst,
            duplicates: self.order.len() as u64 - received,
            out_of_order: self.order.windows(2).filter(|w| w[1] < w[0]).count() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = summary(&samples);
        assert_eq!((s.p50, s.p90, s.p99), (50.0, 90.0, 99.0));
        assert_eq!(s.mean, 50.5);
        let s = summary(&[3.0, 1.0, 2.0]);
        // ceil(0.5 * 3) = 2nd smallest; ceil(0.9 * 3) = ceil(0.99 * 3) = 3rd.
        assert_eq!((s.p50, s.p90, s.p99), (2.0, 3.0, 3.0));
        assert_eq!(summary(&[7.0]).p50, 7.0);
        assert_eq!(percentile(&[1.0, 2.0], 0.0), 1.0);
    }

    #[test]
    fn no_samples_give_nan() {
        let s = summary(&[]);
        assert!(s.p50.is_nan() && s.p90.is_nan() && s.p99.is_nan() && s.mean.is_nan());
    }

    #[test]
    fn negative_samples_sort_before_positive_ones() {
        let s = summary(&[5.0, -1.0, 2.0, 0.5]);
        assert_eq!(s.p50, 0.5);
        assert_eq!(percentile(&[-1.0, 0.5, 2.0, 5.0], 0.25), -1.0);
    }

    #[test]
    fn ratios_divide_ours_by_the_baseline() {
        let ours = summary(&[2.0, 4.0, 8.0]);
        let base = summary(&[1.0, 1.0, 2.0]);
        let r = ratios(&ours, &base);
        assert_eq!((r.p50, r.p90, r.p99), (4.0, 4.0, 4.0));
    }

    #[test]
    fn a_clean_burst_has_nothing_to_report() {
        let mut t = Tally::default();
        for i in 0..5 {
            assert!(t.arrived(i));
        }
        let d = t.delivery(5);
        assert_eq!(
            (d.received, d.missing, d.duplicates, d.out_of_order),
            (5, 0, 0, 0)
        );
    }

    #[test]
    fn loss_copies_and_reordering_are_each_counted() {
        let mut t = Tally::default();
        for i in [0, 2, 1, 2, 4] {
            t.arrived(i);
        }
        assert!(!t.arrived(0), "a copy is not new");
        let d = t.delivery(6);
        // Received 0, 1, 2, 4; 3 and 5 are missing; 2 and 0 came twice; 2→1 and 4→0 went back.
        assert_eq!(d.received, 4);
        assert_eq!(d.missing, 2);
        assert_eq!(d.duplicates, 2);
        assert_eq!(d.out_of_order, 2);
    }

    #[test]
    fn messages_outside_the_burst_are_not_counted_as_delivered() {
        let mut t = Tally::default();
        t.arrived(0);
        t.arrived(9);
        assert_eq!(t.delivery(2).missing, 1);
    }
}

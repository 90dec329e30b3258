//! Latency histogram summaries and HdrHistogram's percentile-distribution text format.

use std::fmt::Write as _;

use std::time::{Duration, UNIX_EPOCH};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use serde::Serialize;

use crate::limits;

/// Percentile iteration resolution, as in HdrHistogram's `outputPercentileDistribution`
/// (5 ticks per halving of the remaining distance to 100 %).
pub const TICKS_PER_HALF_DISTANCE: u32 = 5;

/// The headline numbers of a histogram, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Highest recorded latency.
    pub max_ms: f64,
    /// Mean.
    pub mean_ms: f64,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1_000.0
}

impl Percentiles {
    /// Summarises a histogram of microseconds. All zero when it is empty.
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Percentiles {
                p50_ms: 0.0,
                p90_ms: 0.0,
                p99_ms: 0.0,
                p999_ms: 0.0,
                max_ms: 0.0,
                mean_ms: 0.0,
            };
        }
        Percentiles {
            p50_ms: ms(h.value_at_quantile(0.5)),
            p90_ms: ms(h.value_at_quantile(0.9)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
            mean_ms: h.mean() / 1_000.0,
        }
    }
}

/// One point of the percentile distribution: the latency at or below which `quantile` of the
/// requests completed, and how many requests that is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DistributionPoint {
    /// Latency, milliseconds.
    pub value_ms: f64,
    /// Quantile in `[0, 1]`.
    pub quantile: f64,
    /// Requests at or below `value_ms`.
    pub total_count: u64,
}

/// The percentile distribution, HdrHistogram-style (finer near 100 %). Empty for an empty histogram.
pub fn distribution(h: &Histogram<u64>) -> Vec<DistributionPoint> {
    let mut out = Vec::new();
    if h.is_empty() {
        return out;
    }
    let mut total = 0u64;
    for v in h.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
        total += v.count_since_last_iteration();
        out.push(DistributionPoint {
            value_ms: ms(h.highest_equivalent(v.value_iterated_to())),
            quantile: v.quantile_iterated_to(),
            total_count: total,
        });
    }
    out
}

/// Sub-buckets per bucket for our precision, as HdrHistogram reports it in the footer:
/// the power of two at or above `2 * 10^sigfigs`.
fn sub_bucket_count() -> u64 {
    (2 * 10u64.pow(u32::from(limits::HISTOGRAM_SIGFIGS))).next_power_of_two()
}

/// The histogram in HdrHistogram's `outputPercentileDistribution` text format (values in
/// milliseconds), readable by HdrHistogram's plotter and HistogramLogAnalyzer.
pub fn hgrm(h: &Histogram<u64>) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail; the results are ignored on purpose.
    let _ = writeln!(
        s,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    for p in distribution(h) {
        if p.quantile < 1.0 {
            let _ = writeln!(
                s,
                "{:12.3} {:2.12} {:10} {:14.2}",
                p.value_ms,
                p.quantile,
                p.total_count,
                1.0 / (1.0 - p.quantile)
            );
        } else {
            let _ = writeln!(s, "{:12.3} {:2.12} {:10}", p.value_ms, p.quantile, p.total_count);
        }
    }
    let (mean, stdev, max) = if h.is_empty() {
        (0.0, 0.0, 0.0)
    } else {
        (h.mean() / 1_000.0, h.stdev() / 1_000.0, ms(h.max()))
    };
    let _ = writeln!(s, "#[Mean    = {mean:12.3}, StdDeviation   = {stdev:12.3}]");
    let _ = writeln!(s, "#[Max     = {max:12.3}, Total count    = {:12}]", h.len());
    let _ =
        writeln!(s, "#[Buckets = {:12}, SubBuckets     = {:12}]", h.buckets(), sub_bucket_count());
    s
}

/// The histogram as an HdrHistogram interval log (`.hlog`) holding one interval: the whole
/// measured time, lossless (V2 + DEFLATE, base64), tagged with `tag`. HistogramLogAnalyzer and
/// HdrHistogram's tools read it, and histograms of several runs can be merged from it exactly.
/// Values are microseconds; the interval's max column is in milliseconds.
pub fn hlog(
    h: &Histogram<u64>,
    tag: &str,
    start_since_epoch: Duration,
    duration: Duration,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let mut writer = IntervalLogWriterBuilder::new()
        .add_comment("bench latency histogram; values in microseconds")
        .with_start_time(UNIX_EPOCH + start_since_epoch)
        .with_base_time(UNIX_EPOCH + start_since_epoch)
        .with_max_value_divisor(1_000.0)
        .begin_log_with(&mut out, &mut serializer)
        .map_err(|e| e.to_string())?;
    let tag = Tag::new(tag).ok_or_else(|| format!("tag {tag:?} has a comma, space or newline"))?;
    writer.write_histogram(h, Duration::ZERO, duration, Some(tag)).map_err(|e| e.to_string())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::new_histogram;

    fn uniform_1_to_10ms() -> Histogram<u64> {
        let mut h = new_histogram();
        for us in 1..=10_000 {
            h.record(us).unwrap();
        }
        h
    }

    #[test]
    fn unit_percentiles_of_a_known_histogram() {
        // 1..=10000 us uniformly: p50 is 5 ms, p99 9.9 ms, max 10 ms, within 0.1 % precision.
        let p = Percentiles::of(&uniform_1_to_10ms());
        let close = |a: f64, b: f64| (a - b).abs() <= b * 0.001 + 0.001;
        assert!(close(p.p50_ms, 5.0), "{p:?}");
        assert!(close(p.p90_ms, 9.0), "{p:?}");
        assert!(close(p.p99_ms, 9.9), "{p:?}");
        assert!(close(p.p999_ms, 9.99), "{p:?}");
        assert!(close(p.max_ms, 10.0), "{p:?}");
        assert!(close(p.mean_ms, 5.0005), "{p:?}");
        assert_eq!(Percentiles::of(&new_histogram()).max_ms, 0.0);
    }

    #[test]
    fn unit_hgrm_has_the_hdrhistogram_layout() {
        // Header, monotone rows ending at percentile 1.0 with the full count and no
        // 1/(1-p) column, then the three footer lines with count and max.
        let h = uniform_1_to_10ms();
        let text = hgrm(&h);
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["Value", "Percentile", "TotalCount", "1/(1-Percentile)"]);
        assert_eq!(lines.next(), Some(""));
        let rows: Vec<Vec<f64>> = text
            .lines()
            .skip(2)
            .take_while(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().map(|w| w.parse().unwrap()).collect())
            .collect();
        assert!(rows.len() > 20);
        for pair in rows.windows(2) {
            assert!(pair[0][0] <= pair[1][0], "values must not decrease");
            assert!(pair[0][1] <= pair[1][1], "percentiles must not decrease");
            assert!(pair[0][2] <= pair[1][2], "counts must not decrease");
        }
        let last = rows.last().unwrap();
        assert_eq!(last.len(), 3);
        assert_eq!(last[1], 1.0);
        assert_eq!(last[2], 10_000.0);
        assert!(rows[..rows.len() - 1].iter().all(|r| r.len() == 4));
        assert!(text.contains("Total count    =        10000]"));
        assert!(
            text.contains("#[Max     =       10.007") || text.contains("#[Max     =       10.000")
        );
        assert!(text.contains("SubBuckets     =         2048]"));
    }

    #[test]
    fn unit_hlog_holds_one_tagged_interval() {
        // The log parses back as one interval with our tag, duration and max (in ms), after
        // the StartTime and BaseTime headers.
        use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
        let bytes = hlog(
            &uniform_1_to_10ms(),
            "postgres",
            Duration::from_secs(1_700_000_000),
            Duration::from_secs(15),
        )
        .unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.contains("#[StartTime: 1700000000.000"), "{text}");
        let intervals: Vec<_> = IntervalLogIterator::new(&bytes)
            .filter_map(|e| match e.unwrap() {
                LogEntry::Interval(i) => {
                    Some((i.tag().map(|t| t.as_str().to_owned()), i.duration(), i.max()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(intervals.len(), 1);
        let (tag, duration, max) = &intervals[0];
        assert_eq!(tag.as_deref(), Some("postgres"));
        assert_eq!(*duration, Duration::from_secs(15));
        assert!((max - 10.007).abs() < 0.01, "max {max}");
        assert!(hlog(&new_histogram(), "bad tag", Duration::ZERO, Duration::ZERO).is_err());
    }

    #[test]
    fn unit_hgrm_of_empty_histogram_is_header_and_footer() {
        // An empty run (every request failed) still writes a valid file, with count 0.
        let text = hgrm(&new_histogram());
        assert!(text.contains("Total count    =            0]"));
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 2);
        assert!(distribution(&new_histogram()).is_empty());
    }
}

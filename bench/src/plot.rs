//! Latency-by-percentile plots as hand-written SVG (no font or graphics library needed: the
//! viewer renders the text). The x axis is `log10(1 / (1 - p))`, as HdrHistogram's plotter
//! draws it, so 90 %, 99 %, 99.9 % ... are evenly spaced and the tail gets the room.

use std::fmt::Write as _;

use crate::hist::DistributionPoint;

const WIDTH: f64 = 860.0;
const HEIGHT: f64 = 500.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 50.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;
/// The x axis never extends past 99.9999 %.
const NINES_MAX: u32 = 6;
const COLORS: [&str; 8] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

/// One line of a plot: a name for the legend and its distribution.
pub struct Series<'a> {
    /// Legend text.
    pub name: &'a str,
    /// From `hist::distribution`.
    pub points: &'a [DistributionPoint],
}

/// Escapes text for XML content and attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// The x position (in nines) of quantile `q`: 0 at 0 %, 1 at 90 %, 2 at 99 %...
pub fn nines(q: f64) -> f64 {
    if q >= 1.0 {
        f64::from(NINES_MAX)
    } else {
        (1.0 / (1.0 - q)).log10().min(f64::from(NINES_MAX))
    }
}

/// A round upper bound for the y axis and its tick step: 1, 2 or 5 times a power of ten, with
/// four to nine ticks.
pub fn nice_axis(max: f64) -> (f64, f64) {
    if max.is_nan() || max <= 0.0 || max.is_infinite() {
        return (1.0, 0.2);
    }
    let raw = max / 8.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    ((max / step).ceil() * step, step)
}

fn percent_label(nines: u32) -> String {
    match nines {
        0 => "0%".to_owned(),
        1 => "90%".to_owned(),
        2 => "99%".to_owned(),
        n => format!("99.{}%", "9".repeat(n as usize - 2)),
    }
}

/// Above this ratio between the largest latency and the smallest median of the series, a
/// linear y axis would squash that series' body into the bottom 2 % of the plot, so the axis
/// becomes logarithmic.
const LOG_RATIO_MIN: f64 = 50.0;

/// How the y axis maps latency (ms) to height.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum YAxis {
    /// `0 ..= max`, ticks every `step`.
    Linear {
        /// Top of the axis.
        max: f64,
        /// Tick spacing.
        step: f64,
    },
    /// `10^lo ..= 10^hi`, a tick per decade.
    Log {
        /// Lowest decade.
        lo: i32,
        /// Highest decade (> lo).
        hi: i32,
    },
}

impl YAxis {
    /// Picks the axis for these series (see `LOG_RATIO_MIN`).
    pub fn for_series(series: &[Series<'_>]) -> Self {
        let values = || series.iter().flat_map(|s| s.points.iter()).map(|p| p.value_ms);
        let max = values().fold(0.0f64, f64::max);
        let min_median = series
            .iter()
            .filter_map(|s| s.points.iter().find(|p| p.quantile >= 0.5).map(|p| p.value_ms))
            .fold(f64::INFINITY, f64::min);
        let min_positive = values().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
        if max > 0.0
            && min_median > 0.0
            && min_median.is_finite()
            && max / min_median > LOG_RATIO_MIN
        {
            let lo = small_int(min_positive.log10().floor());
            let hi = small_int(max.log10().ceil()).max(lo + 1);
            YAxis::Log { lo, hi }
        } else {
            let (max, step) = nice_axis(max);
            YAxis::Linear { max, step }
        }
    }

    /// Height fraction `0..=1` of a latency.
    pub fn fraction(&self, ms: f64) -> f64 {
        match *self {
            YAxis::Linear { max, .. } => (ms / max).clamp(0.0, 1.0),
            YAxis::Log { lo, hi } => {
                let v = ms.max(10f64.powi(lo)).log10();
                ((v - f64::from(lo)) / f64::from(hi - lo)).clamp(0.0, 1.0)
            }
        }
    }

    /// Tick values.
    pub fn ticks(&self) -> Vec<f64> {
        match *self {
            YAxis::Linear { max, step } => {
                let count = small_int((max / step).round()).max(0);
                (0..=count).map(|i| f64::from(i) * step).collect()
            }
            YAxis::Log { lo, hi } => (lo..=hi).map(|e| 10f64.powi(e)).collect(),
        }
    }

    fn label(&self) -> &'static str {
        match self {
            YAxis::Linear { .. } => "latency (ms)",
            YAxis::Log { .. } => "latency (ms, log scale)",
        }
    }
}

/// An SVG plot of latency (ms) by percentile, one line per series.
pub fn svg(title: &str, series: &[Series<'_>]) -> String {
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    // The x range covers the deepest finite percentile any series reached (at least 99.9 %).
    let deepest = series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|p| p.quantile < 1.0)
        .map(|p| nines(p.quantile))
        .fold(3.0f64, f64::max);
    let x_nines = deepest.ceil().min(f64::from(NINES_MAX));
    let axis = YAxis::for_series(series);
    let x_of = |n: f64| LEFT + plot_w * (n.min(x_nines) / x_nines);
    let y_of = |ms: f64| TOP + plot_h * (1.0 - axis.fraction(ms));

    let mut s = String::new();
    // Writing to a String cannot fail; results are ignored on purpose.
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="13">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="28" text-anchor="middle" font-size="16">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    // Grid and y ticks.
    for y in axis.ticks() {
        let py = y_of(y);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + plot_w,
            LEFT - 8.0,
            py + 4.0,
            trim_number(y)
        );
    }
    // x ticks at each nine.
    for n in (0..=NINES_MAX).filter(|&n| f64::from(n) <= x_nines) {
        let px = x_of(f64::from(n));
        let _ = writeln!(
            s,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + plot_h,
            TOP + plot_h + 20.0,
            percent_label(n)
        );
    }
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">percentile</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 15.0
    );
    let _ = writeln!(
        s,
        r#"<text x="20" y="{:.1}" text-anchor="middle" transform="rotate(-90 20 {:.1})">{}</text>"#,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        axis.label()
    );
    // One line per series, then the legend.
    for (i, series_i) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut points = String::new();
        for p in series_i.points {
            let _ = write!(points, "{:.1},{:.1} ", x_of(nines(p.quantile)), y_of(p.value_ms));
        }
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.trim_end()
        );
        let ly = TOP + 18.0 + 20.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            LEFT + 14.0,
            LEFT + 40.0,
            LEFT + 46.0,
            ly + 4.0,
            escape(series_i.name)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Rounds a float known to be a small whole number (a decade exponent or a tick count) to
/// `i32`, clamped to `-100..=100` first so the cast cannot truncate.
#[allow(clippy::cast_possible_truncation)]
fn small_int(x: f64) -> i32 {
    // NaN casts to 0; the clamp keeps every other value well inside i32.
    x.clamp(-100.0, 100.0) as i32
}

fn trim_number(v: f64) -> String {
    let text = if v < 0.001 && v > 0.0 { format!("{v:.6}") } else { format!("{v:.3}") };
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(scale: f64) -> Vec<DistributionPoint> {
        [0.0, 0.5, 0.9, 0.99, 0.999, 1.0]
            .into_iter()
            .enumerate()
            .map(|(i, q)| DistributionPoint {
                value_ms: scale * (i + 1) as f64,
                quantile: q,
                total_count: 1000,
            })
            .collect()
    }

    #[test]
    fn unit_nines_axis_positions() {
        // 0 % at 0, 90 % at 1, 99.9 % at 3, 100 % at the axis end.
        assert_eq!(nines(0.0), 0.0);
        assert!((nines(0.9) - 1.0).abs() < 1e-9);
        assert!((nines(0.999) - 3.0).abs() < 1e-9);
        assert_eq!(nines(1.0), f64::from(NINES_MAX));
        assert_eq!(percent_label(0), "0%");
        assert_eq!(percent_label(1), "90%");
        assert_eq!(percent_label(2), "99%");
        assert_eq!(percent_label(4), "99.99%");
    }

    #[test]
    fn unit_nice_axis_is_round_and_covers_the_data() {
        // The bound covers the maximum with a 1-2-5 step and a handful of ticks.
        for max in [0.07, 0.3, 1.0, 4.2, 17.0, 99.0, 1234.5] {
            let (top, step) = nice_axis(max);
            assert!(top >= max, "{max}");
            let ticks = top / step;
            assert!((4.0..=10.0).contains(&ticks.round()), "{max}: {top} / {step}");
        }
        assert_eq!(nice_axis(0.0), (1.0, 0.2));
    }

    #[test]
    fn unit_y_axis_turns_logarithmic_when_series_differ_widely() {
        // Close series keep a linear axis; a tail 100x above a median gets decades.
        let a = points(1.0); // 1..6 ms, median 2 ms
        let b = points(2.0); // 2..12 ms
        let both = [Series { name: "a", points: &a }, Series { name: "b", points: &b }];
        assert!(matches!(YAxis::for_series(&both), YAxis::Linear { .. }));
        let slow = points(100.0); // 100..600 ms
        let mixed = [Series { name: "a", points: &a }, Series { name: "slow", points: &slow }];
        let axis = YAxis::for_series(&mixed);
        assert_eq!(axis, YAxis::Log { lo: 0, hi: 3 });
        assert_eq!(axis.ticks(), [1.0, 10.0, 100.0, 1000.0]);
        assert!((axis.fraction(10.0) - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(axis.fraction(0.0), 0.0);
        assert_eq!(axis.fraction(1e9), 1.0);
        let text = svg("mixed", &mixed);
        assert!(text.contains("log scale"));
        assert!(text.contains(">1000<"));
        assert!(!text.contains("NaN"));
        // Linear ticks run from 0 to the top in equal steps.
        let lin = YAxis::Linear { max: 15.0, step: 5.0 };
        assert_eq!(lin.ticks(), [0.0, 5.0, 10.0, 15.0]);
        assert_eq!(trim_number(0.0001), "0.0001");
    }

    #[test]
    fn unit_svg_has_one_line_per_target_and_escaped_names() {
        // Two series give two polylines and two legend entries; names are XML-escaped and
        // the y axis covers the largest value.
        let a = points(1.0);
        let b = points(2.0);
        let text = svg(
            "ycsb-a <demo>",
            &[Series { name: "postgres", points: &a }, Series { name: "tessera&co", points: &b }],
        );
        assert!(text.starts_with("<svg"));
        assert!(text.trim_end().ends_with("</svg>"));
        assert_eq!(text.matches("<polyline").count(), 2);
        assert!(text.contains("tessera&amp;co"));
        assert!(text.contains("ycsb-a &lt;demo&gt;"));
        assert!(text.contains(">99.9%<"));
        assert!(text.contains(">12<"), "y axis reaches the max of 12 ms");
        assert!(!text.contains("NaN"));
        // An empty series (a run where everything failed) still gives a valid plot.
        let empty = svg("x", &[Series { name: "t", points: &[] }]);
        assert!(empty.contains("<polyline"));
        assert!(!empty.contains("NaN"));
    }
}

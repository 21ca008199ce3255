//! The push-latency histogram (`latency.svg`).
//!
//! Drawn with plotters' SVG backend and no font feature: plotters then estimates text
//! sizes itself and writes text as SVG `<text>` elements in `sans-serif`, which the
//! viewer renders, so nothing reads system fonts at build or run time.

use plotters::element::DashedPathElement;
use plotters::prelude::*;

use crate::{PushLatency, Results, Summary};

/// About this many bins across the drawn range.
const TARGET_BINS: f64 = 30.0;
/// The drawn range ends at this multiple of the larger p99; slower samples are counted
/// in the last bin, so that one outlier does not squash the distribution to the left.
const TAIL_FACTOR: f64 = 1.5;

const WIDTH: u32 = 900;
const HEIGHT: u32 = 500;

/// The matrix-channel bars (`#1F77B4`).
pub const CHANNEL_COLOR: RGBColor = RGBColor(31, 119, 180);
/// The raw `/sync` bars (`#FF7F0E`).
pub const RAW_SYNC_COLOR: RGBColor = RGBColor(255, 127, 14);
const CHANNEL_MARK: RGBColor = RGBColor(8, 48, 107);
const RAW_SYNC_MARK: RGBColor = RGBColor(166, 54, 3);

/// Two sample sets counted in the same bins. Bin `i` covers
/// `[start + i·width, start + (i+1)·width)` milliseconds; the last bin also holds
/// every sample beyond it (see `tail_from`).
#[derive(Debug, Clone, PartialEq)]
pub struct Bins {
    /// Left edge of the first bin (ms), a multiple of `width`.
    pub start: f64,
    /// Width of every bin (ms): 1, 2, 2.5 or 5 times a power of ten.
    pub width: f64,
    /// Per bin, how many of the first set fall in it.
    pub a: Vec<u64>,
    /// Per bin, how many of the second set fall in it.
    pub b: Vec<u64>,
    /// When the range was cut: the last bin's left edge (ms), and how many samples of
    /// each set beyond the last bin's right edge it holds.
    pub tail_from: Option<(f64, u64, u64)>,
}

impl Bins {
    /// The right edge of the last bin (ms).
    pub fn end(&self) -> f64 {
        self.start + self.width * self.a.len() as f64
    }
}

/// Counts `a` and `b` (ms) in shared bins of a round width, about 30 across. When
/// `cut` is given and a sample lies beyond it, the range stops at the bin holding `cut`
/// and the slower samples are counted in that last bin. Non-finite samples are
/// ignored; `None` when no sample is left.
pub fn shared_bins(a: &[f64], b: &[f64], cut: Option<f64>) -> Option<Bins> {
    let finite = |xs: &[f64]| {
        xs.iter()
            .copied()
            .filter(|x| x.is_finite())
            .collect::<Vec<_>>()
    };
    let (a, b) = (finite(a), finite(b));
    let all = || a.iter().chain(b.iter()).copied();
    let min = all().reduce(f64::min)?;
    let max = all().reduce(f64::max)?;
    let upper = match cut {
        Some(cut) if cut.is_finite() && cut > min && max > cut => cut,
        _ => max,
    };
    let width = round_width((upper - min) / TARGET_BINS);
    let start = (min / width).floor() * width;
    let bins = ((upper - start) / width).floor() as usize + 1;
    let end = start + width * bins as f64;
    let count = |xs: &[f64]| {
        let mut counts = vec![0u64; bins];
        for &x in xs {
            let i = (((x - start) / width).floor().max(0.0) as usize).min(bins - 1);
            counts[i] += 1;
        }
        counts
    };
    let beyond = |xs: &[f64]| xs.iter().filter(|&&x| x >= end).count() as u64;
    let tail_from = (max >= end).then(|| (end - width, beyond(&a), beyond(&b)));
    Some(Bins {
        start,
        width,
        a: count(&a),
        b: count(&b),
        tail_from,
    })
}

/// The smallest of 1, 2, 2.5, 5 (times a power of ten) that is at least `raw`.
fn round_width(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&w| w >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * power)
}

/// An SVG (900×500) of the push-latency distributions: matrix-channel's and the raw
/// `/sync` client's histograms side by side in shared bins (x: latency in ms, y: messages
/// per bin), with each one's p50 (solid) and p99 (dashed) from the benchmark's summary
/// as vertical lines, a legend, axis labels and a caption. Bars are `<rect>`s filled
/// with [`CHANNEL_COLOR`] and [`RAW_SYNC_COLOR`], one per non-empty bin (the legend adds
/// one of each). `None` when there are no latency samples.
pub fn histogram_svg(results: &Results) -> Option<String> {
    let p = results.channel.as_ref()?.push_latency.as_ref()?;
    let cut = TAIL_FACTOR * p.channel.p99.max(p.raw_sync.p99);
    let bins = shared_bins(&p.channel_ms, &p.raw_sync_ms, Some(cut))?;
    let mut svg = String::new();
    draw(&mut svg, p, &bins).expect("plotters draws into a String");
    Some(svg)
}

type DrawResult = Result<(), DrawingAreaErrorKind<std::io::Error>>;

fn draw(svg: &mut String, p: &PushLatency, bins: &Bins) -> DrawResult {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = bins.a.iter().chain(&bins.b).copied().max().unwrap_or(0);
    // Headroom for the legend above the tallest bar.
    let y_max = ((top as f64 * 1.5).ceil() as u64).max(top + 1);
    let x_range = bins.start..bins.end();
    let mut x_desc = "latency (ms), human's send returned → MCP notification received".to_owned();
    if let Some((from, _, _)) = bins.tail_from {
        let slowest = p
            .channel_ms
            .iter()
            .chain(&p.raw_sync_ms)
            .copied()
            .filter(|x| x.is_finite())
            .fold(f64::MIN, f64::max);
        x_desc.push_str(&format!(
            "; the last bin holds all ≥ {from:.1} (slowest {slowest:.1})"
        ));
    }
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Push latency of {} messages: matrix-channel vs raw /sync",
                p.samples
            ),
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(56)
        .build_cartesian_2d(x_range.clone(), 0..y_max)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc(x_desc)
        .y_desc("messages per bin")
        .x_label_formatter(&|x| format!("{x:.1}"))
        .axis_desc_style(("sans-serif", 15))
        .label_style(("sans-serif", 13))
        .draw()?;

    let w = bins.width;
    let series = [
        (
            "matrix-channel",
            &bins.a,
            p.channel_ms.len(),
            CHANNEL_COLOR,
            0.05,
        ),
        (
            "raw /sync",
            &bins.b,
            p.raw_sync_ms.len(),
            RAW_SYNC_COLOR,
            0.5,
        ),
    ];
    for (name, counts, n, color, offset) in series {
        let bars = counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(move |(i, &c)| {
                let x0 = bins.start + i as f64 * w + offset * w;
                Rectangle::new([(x0, 0), (x0 + 0.45 * w, c)], color.filled())
            });
        chart
            .draw_series(bars)?
            .label(format!("{name} ({n} messages)"))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.filled()));
    }

    let marks = [
        ("matrix-channel", &p.channel, CHANNEL_MARK),
        ("raw /sync", &p.raw_sync, RAW_SYNC_MARK),
    ];
    for (name, summary, color) in marks {
        let Summary { p50, p99, .. } = *summary;
        let style = color.stroke_width(2);
        if x_range.contains(&p50) {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(p50, 0), (p50, y_max)],
                    style,
                )))?
                .label(format!("{name} p50 {p50:.1} ms"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        }
        if x_range.contains(&p99) {
            chart
                .draw_series(std::iter::once(DashedPathElement::new(
                    vec![(p99, 0), (p99, y_max)],
                    6,
                    4,
                    style,
                )))?
                .label(format!("{name} p99 {p99:.1} ms"))
                .legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 16, y)], 4, 3, style)
                });
        }
    }

    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.5))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bin_widths_are_round() {
        assert_eq!(round_width(0.76), 1.0);
        assert_eq!(round_width(0.5), 0.5);
        assert_eq!(round_width(1.7), 2.0);
        assert_eq!(round_width(2.2), 2.5);
        assert_eq!(round_width(3.0), 5.0);
        assert_eq!(round_width(6.0), 10.0);
        assert_eq!(round_width(0.0), 1.0);
    }

    #[test]
    fn both_sets_share_the_bins_and_every_sample_is_counted_once() {
        let a = [10.0, 10.4, 12.9, 35.0];
        let b = [9.1, 11.0, 11.2];
        let bins = shared_bins(&a, &b, None).unwrap();
        assert_eq!(bins.width, 1.0);
        assert_eq!(bins.start, 9.0);
        assert_eq!(bins.a.len(), 27); // 9..36
        assert_eq!(bins.a.len(), bins.b.len());
        assert_eq!(bins.a.iter().sum::<u64>(), 4);
        assert_eq!(bins.b.iter().sum::<u64>(), 3);
        assert_eq!(bins.a[1], 2); // 10.0 and 10.4
        assert_eq!(bins.a[26], 1); // 35.0
        assert_eq!(bins.b[0], 1);
        assert_eq!(bins.b[2], 2);
        assert_eq!(bins.tail_from, None);
    }

    #[test]
    fn samples_beyond_the_cut_land_in_the_last_bin() {
        let a = [10.0, 11.0, 12.0, 100.0, 200.0];
        let b = [10.5, 300.0];
        let bins = shared_bins(&a, &b, Some(15.0)).unwrap();
        assert!(bins.end() <= 16.0, "range ends near the cut: {bins:?}");
        assert_eq!(bins.a.iter().sum::<u64>(), 5);
        assert_eq!(*bins.a.last().unwrap(), 2);
        assert_eq!(*bins.b.last().unwrap(), 1);
        let (from, above_a, above_b) = bins.tail_from.unwrap();
        assert_eq!(from, bins.end() - bins.width);
        assert_eq!((above_a, above_b), (2, 1));
    }

    #[test]
    fn a_cut_above_every_sample_changes_nothing() {
        let a = [1.0, 2.0, 3.0];
        assert_eq!(shared_bins(&a, &[], Some(50.0)), shared_bins(&a, &[], None));
        assert_eq!(shared_bins(&a, &[], Some(50.0)).unwrap().tail_from, None);
    }

    #[test]
    fn no_finite_samples_means_no_bins() {
        assert_eq!(shared_bins(&[], &[], None), None);
        assert_eq!(shared_bins(&[f64::NAN], &[f64::INFINITY], None), None);
    }

    #[test]
    fn equal_samples_fill_one_bin() {
        let bins = shared_bins(&[5.0, 5.0], &[5.0], None).unwrap();
        assert_eq!((bins.a.clone(), bins.b.clone()), (vec![2], vec![1]));
    }
}

//! PNG line plots for sweeps (plotters, bitmap backend).

use plotters::prelude::*;
use std::path::Path;

/// One named line of (x, y) points.
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// One panel of a figure.
pub struct Panel {
    /// Title above the panel.
    pub title: String,
    /// Y axis label.
    pub y_label: String,
    /// Lines.
    pub series: Vec<Series>,
}

/// Draws panels side by side sharing an x axis (log2 when `x_log2`).
pub fn line_panels(
    path: &Path,
    x_label: &str,
    x_log2: bool,
    panels: &[Panel],
) -> Result<(), String> {
    let width = 700 * panels.len().max(1) as u32;
    let root = BitMapBackend::new(path, (width, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(panels) {
        draw_panel(area, x_label, x_log2, panel)?;
    }
    root.present()
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

fn draw_panel(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    x_label: &str,
    x_log2: bool,
    panel: &Panel,
) -> Result<(), String> {
    let tx = |x: f64| if x_log2 { x.max(1e-9).log2() } else { x };
    let all: Vec<(f64, f64)> = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|&(x, y)| (tx(x), y)))
        .collect();
    let (x_min, x_max) = bounds(all.iter().map(|p| p.0));
    let (_, y_max) = bounds(all.iter().map(|p| p.1));
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x_min..x_max, 0.0..y_max * 1.1 + 1e-9)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(if x_log2 {
            format!("{x_label} (log2)")
        } else {
            x_label.to_string()
        })
        .y_desc(&panel.y_label)
        .x_label_formatter(&|x| {
            if x_log2 {
                format!("{}", 2f64.powf(*x).round())
            } else {
                format!("{x}")
            }
        })
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, series) in panel.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = series.points.iter().map(|&(x, y)| (tx(x), y)).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(&series.label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| e.to_string())
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi <= lo {
        return (lo - 0.5, hi + 0.5);
    }
    (lo, hi)
}

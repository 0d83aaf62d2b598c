//! PNG plots like Ransom, Lim & Mitzenmacher figures 3 and 4: per-k costs with the fitted
//! functions of k, and measured throughput against the model's curves.

use std::ops::Range;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::error::{ModelError, Result};
use crate::grid::{Grid, Op};
use crate::model::{DeviceModel, OpModel};
use crate::rational::Rational;

/// Points per drawn curve.
const CURVE_POINTS: usize = 200;

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// Draws both figures next to `model_path` (`<stem>_costs.png`,
/// `<stem>_throughput.png`) and returns their paths.
pub fn draw_all(model: &DeviceModel, grid: &Grid, model_path: &Path) -> Result<Vec<PathBuf>> {
    let stem = model_path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("model");
    let costs_path = model_path.with_file_name(format!("{stem}_costs.png"));
    let throughput_path = model_path.with_file_name(format!("{stem}_throughput.png"));
    draw_costs(model, &costs_path).map_err(|reason| plot_error(&costs_path, reason))?;
    draw_throughput(model, grid, &throughput_path)
        .map_err(|reason| plot_error(&throughput_path, reason))?;
    Ok(vec![costs_path, throughput_path])
}

fn plot_error(path: &Path, reason: String) -> ModelError {
    ModelError::Plot {
        path: path.to_owned(),
        reason,
    }
}

/// Figure 3: setup and transfer costs against k, one panel each per op.
fn draw_costs(model: &DeviceModel, path: &Path) -> std::result::Result<(), String> {
    let root = BitMapBackend::new(path, (1200, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((2, 2));
    let k_range = f64::from(model.k_measured_min)..f64::from(model.k_measured_max).max(2.0);
    for (row, op) in Op::ALL.into_iter().enumerate() {
        let Some(costs) = model.op(op) else { continue };
        let names = match op {
            Op::Read => ["t(k) read setup", "alpha(k) read transfer"],
            Op::Write => ["s(k) write setup", "beta(k) write transfer"],
        };
        let setup: Vec<(f64, f64)> = costs
            .per_k
            .iter()
            .map(|r| (f64::from(r.k), r.setup_us))
            .collect();
        let transfer: Vec<(f64, f64)> = costs
            .per_k
            .iter()
            .map(|r| (f64::from(r.k), r.transfer_us))
            .collect();
        let panel = &panels[row * 2];
        cost_panel(panel, names[0], &setup, &costs.setup_us, k_range.clone())?;
        let panel = &panels[row * 2 + 1];
        cost_panel(
            panel,
            names[1],
            &transfer,
            &costs.transfer_us,
            k_range.clone(),
        )?;
    }
    root.present().map_err(|e| e.to_string())
}

fn cost_panel(
    area: &Area,
    title: &str,
    points: &[(f64, f64)],
    function: &Rational,
    k_range: Range<f64>,
) -> std::result::Result<(), String> {
    let curve = curve(|k| function.eval(k), k_range.clone());
    let y_range = log_range(points.iter().chain(&curve).map(|p| p.1));
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(k_range.log_scale(), y_range.log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("k (requests in flight)")
        .y_desc("µs")
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(LineSeries::new(curve, BLUE.stroke_width(2)))
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(points.iter().map(|&p| Circle::new(p, 5, RED.filled())))
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Figure 4: throughput against the random fraction, one line per k.
fn draw_throughput(
    model: &DeviceModel,
    grid: &Grid,
    path: &Path,
) -> std::result::Result<(), String> {
    let root = BitMapBackend::new(path, (1400, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((1, 2));
    for (index, op) in Op::ALL.into_iter().enumerate() {
        if let Some(costs) = model.op(op) {
            throughput_panel(&panels[index], op, costs, model, grid)?;
        }
    }
    root.present().map_err(|e| e.to_string())
}

fn throughput_panel(
    area: &Area,
    op: Op,
    costs: &OpModel,
    model: &DeviceModel,
    grid: &Grid,
) -> std::result::Result<(), String> {
    let measured: Vec<(u32, f64, f64)> = grid
        .points_of(op)
        .map(|p| {
            (
                p.k,
                p.random_fraction(),
                p.throughput_bytes_per_s(grid.page_bytes) / 1e6,
            )
        })
        .collect();
    let f_range = log_range(measured.iter().map(|m| m.1));
    let y_range = log_range(measured.iter().map(|m| m.2));
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{} throughput: measured (dots) vs model", op.name()),
            ("sans-serif", 22),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(f_range.clone().log_scale(), y_range.log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("random fraction f (random accesses / pages)")
        .y_desc("MB/s")
        .draw()
        .map_err(|e| e.to_string())?;
    for (index, row) in costs.per_k.iter().enumerate() {
        let color = Palette99::pick(index).to_rgba();
        let k = f64::from(row.k.min(model.k_measured_max));
        let (setup, transfer) = (costs.setup_us.eval(k), costs.transfer_us.eval(k));
        let page_mb = model.page_bytes as f64 / 1e6;
        let line = curve(|f| page_mb * 1e6 / (transfer + f * setup), f_range.clone());
        chart
            .draw_series(LineSeries::new(line, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(format!("k={}", row.k))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        let dots = measured.iter().filter(|m| m.0 == row.k);
        chart
            .draw_series(dots.map(|m| Circle::new((m.1, m.2), 4, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerLeft)
        .draw()
        .map_err(|e| e.to_string())
}

/// Samples `function` log-uniformly over `range`.
fn curve(function: impl Fn(f64) -> f64, range: Range<f64>) -> Vec<(f64, f64)> {
    let (low, high) = (range.start.ln(), range.end.ln());
    (0..CURVE_POINTS)
        .map(|i| (low + (high - low) * i as f64 / (CURVE_POINTS - 1) as f64).exp())
        .map(|x| (x, function(x)))
        .filter(|p| p.1.is_finite() && p.1 > 0.0)
        .collect()
}

/// A positive range covering `values` with some margin, for log axes.
fn log_range(values: impl Iterator<Item = f64>) -> Range<f64> {
    let (low, high) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0_f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !(low.is_finite() && high > 0.0) {
        return 1.0..10.0;
    }
    // At least one decade, so the log axis gets labelled ticks.
    let (low, high) = (low / 1.5, high * 1.5);
    let widen = (10.0 / (high / low)).max(1.0).sqrt();
    (low / widen)..(high * widen)
}

//! PNG plots with plotters: throughput bars, latency CDF, ops/s per second.

use std::path::Path;

use plotters::prelude::*;

use crate::compare::EngineRun;

const SIZE_PX: (u32, u32) = (900, 520);

fn err(error: impl std::fmt::Display) -> String {
    format!("plot: {error}")
}

/// Writes throughput.png, latency_cdf.png and timeline.png into `dir`.
pub fn write_plots(dir: &Path, runs: &[EngineRun]) -> Result<(), String> {
    if runs.is_empty() {
        return Ok(());
    }
    throughput_bars(&dir.join("throughput.png"), runs)?;
    cost_bars(&dir.join("cost.png"), runs)?;
    latency_cdf(&dir.join("latency_cdf.png"), runs)?;
    timeline(&dir.join("timeline.png"), runs)
}

fn throughput_bars(path: &Path, runs: &[EngineRun]) -> Result<(), String> {
    let root = BitMapBackend::new(path, SIZE_PX).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let ops_max = runs
        .iter()
        .map(|r| r.summary.ops_per_sec)
        .fold(1.0, f64::max)
        * 1.15;
    let names: Vec<String> = runs.iter().map(|r| r.summary.engine.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{}: throughput", runs[0].summary.workload),
            ("sans-serif", 24),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d((0..runs.len()).into_segmented(), 0.0..ops_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc("ops/s")
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()
        .map_err(err)?;
    chart
        .draw_series(runs.iter().enumerate().map(|(i, run)| {
            let color = Palette99::pick(i).filled();
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), run.summary.ops_per_sec),
                ],
                color,
            );
            bar.set_margin(0, 0, 20, 20);
            bar
        }))
        .map_err(err)?;
    root.present().map_err(err)
}

/// Bars of one figure per engine into `area`.
fn bars_into<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    y_desc: &str,
    names: &[String],
    values: &[f64],
) -> Result<(), String> {
    let value_max = values.iter().copied().fold(1e-9, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d((0..values.len()).into_segmented(), 0.0..value_max)
        .map_err(|e| err(e.to_string()))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_desc)
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()
        .map_err(|e| err(e.to_string()))?;
    chart
        .draw_series(values.iter().enumerate().map(|(i, value)| {
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), *value),
                ],
                Palette99::pick(i).filled(),
            );
            bar.set_margin(0, 0, 15, 15);
            bar
        }))
        .map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// ops/s beside ops/s per $ (engines not priced: 0).
fn cost_bars(path: &Path, runs: &[EngineRun]) -> Result<(), String> {
    let root = BitMapBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (left, right) = root.split_horizontally(600);
    let names: Vec<String> = runs.iter().map(|r| r.summary.engine.clone()).collect();
    let ops: Vec<f64> = runs.iter().map(|r| r.summary.ops_per_sec).collect();
    let per_usd: Vec<f64> = runs
        .iter()
        .map(|r| {
            r.summary
                .cost
                .as_ref()
                .map_or(0.0, |c| c.ops_per_sec_per_usd)
        })
        .collect();
    let workload = &runs[0].summary.workload;
    // Where the reads that price the SSD's share were counted.
    let mut sources: Vec<&str> = runs
        .iter()
        .filter_map(|r| r.summary.cost.as_ref()?.reads_source)
        .map(crate::cost::ReadSource::label)
        .collect();
    sources.sort_unstable();
    sources.dedup();
    let reads = if sources.is_empty() {
        String::new()
    } else {
        format!(" (reads: {})", sources.join(", "))
    };
    bars_into(&left, &format!("{workload}: ops/s"), "ops/s", &names, &ops)?;
    bars_into(
        &right,
        &format!("{workload}: ops/s per ${reads}"),
        "ops/s per $",
        &names,
        &per_usd,
    )?;
    root.present().map_err(err)
}

fn latency_cdf(path: &Path, runs: &[EngineRun]) -> Result<(), String> {
    let root = BitMapBackend::new(path, SIZE_PX).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let lat_us_max = runs
        .iter()
        .flat_map(|r| r.latency_cdf.iter().map(|(us, _)| *us))
        .fold(10.0, f64::max)
        * 1.5;
    let mut chart = ChartBuilder::on(&root)
        .caption("latency CDF", ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0.1..lat_us_max).log_scale(), 0.0..1.0)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("latency µs")
        .y_desc("fraction ≤")
        .draw()
        .map_err(err)?;
    for (i, run) in runs.iter().enumerate() {
        let color = Palette99::pick(i);
        let points = run.latency_cdf.iter().map(|(us, q)| (us.max(0.1), *q));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(err)?
            .label(run.summary.engine.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// The whole seconds of a run's timeline: the second its clock ran out in
/// holds only the operations that finished after it, so a plot of it would
/// show a drop to near 0 that did not happen.
pub(crate) fn whole_seconds(run: &EngineRun) -> &[u64] {
    let whole = (run.seconds.floor() as usize).max(1);
    &run.ops_per_second[..run.ops_per_second.len().min(whole)]
}

fn timeline(path: &Path, runs: &[EngineRun]) -> Result<(), String> {
    let root = BitMapBackend::new(path, SIZE_PX).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let seconds_max = runs
        .iter()
        .map(|r| whole_seconds(r).len())
        .max()
        .unwrap_or(1)
        .max(1);
    let ops_max = runs
        .iter()
        .flat_map(|r| whole_seconds(r).iter().copied())
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption("ops/s over the run", ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..seconds_max as f64, 0.0..ops_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("second")
        .y_desc("ops/s")
        .draw()
        .map_err(err)?;
    for (i, run) in runs.iter().enumerate() {
        let color = Palette99::pick(i);
        let points = whole_seconds(run)
            .iter()
            .enumerate()
            .map(|(s, ops)| (s as f64 + 0.5, *ops as f64));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(err)?
            .label(run.summary.engine.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeline_drops_the_partial_last_second() {
        let mut run = crate::targets::tests::run("flashtree", 1.0, 1.0, 0.0);
        run.seconds = 3.0;
        run.ops_per_second = vec![100, 110, 105, 7];
        assert_eq!(whole_seconds(&run), &[100, 110, 105]);
        run.seconds = 10.0;
        assert_eq!(whole_seconds(&run), &[100, 110, 105, 7]);
        run.seconds = 0.5;
        assert_eq!(whole_seconds(&run), &[100]);
    }
}

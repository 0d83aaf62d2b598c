//! The summary of a suite: several workloads and data factors run by one
//! `bench compare` (`--workload ycsb --data-factor 0.5,10`). Writes
//! `summary.md` (ops/s, space amplification after load and after run,
//! flashtree ÷ each engine and CPU µs/op per combination, each linked to
//! its own report), `summary.json` (one line
//! per combination and engine) and `summary.png` (flashtree ÷ each engine).

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use crate::compare::{CompareArgs, Summary};

/// One finished (workload, data factor).
#[derive(Debug, Clone)]
pub struct Combination {
    pub workload: String,
    pub data_factor: f64,
    /// The device limit measured after it (None: not measured).
    pub device_iops: Option<f64>,
    /// One per engine, in the order they ran.
    pub summaries: Vec<Summary>,
}

impl Combination {
    /// Name of its results subdirectory.
    pub fn dir_name(&self) -> String {
        format!("{}-x{}", self.workload, self.data_factor)
    }

    fn summary_of(&self, engine: &str) -> Option<&Summary> {
        self.summaries.iter().find(|s| s.engine == engine)
    }

    /// flashtree's ops/s ÷ `engine`'s.
    pub fn flashtree_ratio(&self, engine: &str) -> Option<f64> {
        let ours = self.summary_of("flashtree")?.ops_per_sec;
        let theirs = self.summary_of(engine)?.ops_per_sec;
        (theirs > 0.0).then(|| ours / theirs)
    }
}

/// Engines in the order of the first combination.
fn engine_names(done: &[Combination]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for summary in done.iter().flat_map(|c| &c.summaries) {
        if !names.contains(&summary.engine) {
            names.push(summary.engine.clone());
        }
    }
    names
}

fn cell(value: Option<f64>, precision: usize) -> String {
    value.map_or("–".to_string(), |v| format!("{v:.precision$}"))
}

/// summary.md's text.
pub fn summary_markdown(args: &CompareArgs, done: &[Combination]) -> String {
    let engines = engine_names(done);
    let peers: Vec<&String> = engines.iter().filter(|e| *e != "flashtree").collect();
    let has_flashtree = engines.iter().any(|e| e == "flashtree");
    let mut text = String::from("# comparison summary\n\n");
    let _ = writeln!(
        text,
        "memory budget {} per engine, cores {:?}, {} s per timed run after a {} s warm-up, threads swept over {} for thread-per-request engines; {}. Each row links to its own report (settings, sweeps, latencies, plots).\n",
        args.memory,
        args.cores,
        args.seconds,
        args.warmup,
        args.threads,
        crate::compare::durability_line(engines.iter().map(String::as_str), args.durability)
    );
    let header = |text: &mut String, columns: &[String]| {
        let _ = writeln!(text, "| workload | data factor | {} |", columns.join(" | "));
        let _ = writeln!(text, "|---|---|{}", "---|".repeat(columns.len()));
    };
    let row_start = |c: &Combination| {
        format!(
            "| [{}]({}/report.md) | {} |",
            c.workload,
            c.dir_name(),
            c.data_factor
        )
    };

    let _ = writeln!(text, "## ops/s\n");
    let mut columns: Vec<String> = engines.clone();
    columns.push("device limit IOPS".into());
    header(&mut text, &columns);
    for c in done {
        let mut row = row_start(c);
        for engine in &engines {
            let _ = write!(
                row,
                " {} |",
                cell(c.summary_of(engine).map(|s| s.ops_per_sec), 0)
            );
        }
        let _ = write!(row, " {} |", cell(c.device_iops, 0));
        let _ = writeln!(text, "{row}");
    }
    let _ = writeln!(
        text,
        "\n## Space amplification (after load / after run)\n\nBytes the engine's directory takes on disk (allocated blocks) ÷ raw key and value bytes, after the load and after the run (live raw bytes where the workload knows them, else the loaded ones); n/a: not measurable, the combination's report says why.\n"
    );
    header(&mut text, &engines);
    for c in done {
        let mut row = row_start(c);
        for engine in &engines {
            let amps = c
                .summary_of(engine)
                .map_or("–".to_string(), crate::report::space_amps);
            let _ = write!(row, " {amps} |");
        }
        let _ = writeln!(text, "{row}");
    }
    if has_flashtree && !peers.is_empty() {
        let _ = writeln!(text, "\n## flashtree ÷ each engine (ops/s)\n");
        let columns: Vec<String> = peers.iter().map(|p| format!("÷ {p}")).collect();
        header(&mut text, &columns);
        for c in done {
            let mut row = row_start(c);
            for peer in &peers {
                let _ = write!(row, " {} |", cell(c.flashtree_ratio(peer), 2));
            }
            let _ = writeln!(text, "{row}");
        }
    }
    let _ = writeln!(text, "\n## CPU µs per operation\n");
    header(&mut text, &engines);
    for c in done {
        let mut row = row_start(c);
        for engine in &engines {
            let cpu = c.summary_of(engine).and_then(|s| s.cpu_us_per_op);
            let _ = write!(row, " {} |", cell(cpu, 2));
        }
        let _ = writeln!(text, "{row}");
    }
    let _ = writeln!(text, "\nPlot: summary.png (flashtree ÷ each engine).");
    text
}

/// Writes summary.md, summary.json and summary.png into `dir`.
pub fn write_summary(dir: &Path, args: &CompareArgs, done: &[Combination]) -> Result<(), String> {
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    write("summary.md", summary_markdown(args, done))?;
    let mut lines = String::new();
    for c in done {
        for summary in &c.summaries {
            let mut value = serde_json::to_value(summary).map_err(|e| e.to_string())?;
            if let Some(object) = value.as_object_mut() {
                object.insert("data_factor".into(), c.data_factor.into());
                object.insert("device_iops".into(), c.device_iops.into());
            }
            lines.push_str(&value.to_string());
            lines.push('\n');
        }
    }
    write("summary.json", lines)?;
    ratio_bars(&dir.join("summary.png"), done)
}

fn err(error: impl std::fmt::Display) -> String {
    format!("plot: {error}")
}

/// Grouped bars: per combination, flashtree ÷ each peer, and a line at 1.
fn ratio_bars(path: &Path, done: &[Combination]) -> Result<(), String> {
    let engines = engine_names(done);
    let peers: Vec<&String> = engines.iter().filter(|e| *e != "flashtree").collect();
    let root = BitMapBackend::new(path, (1000, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    if peers.is_empty() || done.is_empty() {
        return root.present().map_err(err);
    }
    let ratio_max = done
        .iter()
        .flat_map(|c| peers.iter().filter_map(|p| c.flashtree_ratio(p)))
        .fold(1.0, f64::max)
        * 1.15;
    let labels: Vec<String> = done
        .iter()
        .map(|c| format!("{} ×{}", c.workload, c.data_factor))
        .collect();
    let mut chart = ChartBuilder::on(&root)
        .caption("flashtree ops/s ÷ each engine's", ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0..done.len()).into_segmented(), 0.0..ratio_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc("flashtree ÷ engine")
        .x_labels(done.len())
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()
        .map_err(err)?;
    let bar_width = 0.8 / peers.len() as f64;
    // Bars are placed in pixels inside their combination's segment.
    let segment_px = f64::from(chart.plotting_area().dim_in_pixel().0) / done.len() as f64;
    for (at, peer) in peers.iter().enumerate() {
        let color = Palette99::pick(at + 1);
        chart
            .draw_series(done.iter().enumerate().filter_map(|(i, c)| {
                let ratio = c.flashtree_ratio(peer)?;
                let left = 0.1 + bar_width * at as f64;
                let right = left + bar_width;
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), ratio),
                    ],
                    color.filled(),
                );
                bar.set_margin(
                    0,
                    0,
                    (left * segment_px) as u32,
                    ((1.0 - right) * segment_px) as u32,
                );
                Some(bar)
            }))
            .map_err(err)?
            .label(format!("÷ {peer}"))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .draw_series(LineSeries::new(
            [
                (SegmentValue::Exact(0), 1.0),
                (SegmentValue::Exact(done.len()), 1.0),
            ],
            BLACK.stroke_width(1),
        ))
        .map_err(err)?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: CompareArgs,
    }

    fn summary(engine: &str, ops_per_sec: f64, cpu_us_per_op: f64) -> Summary {
        Summary::for_tests(engine, ops_per_sec, cpu_us_per_op)
    }

    #[test]
    fn workload_and_data_factor_lists_give_every_combination() {
        let args = Cli::parse_from([
            "compare",
            "--workload",
            "ycsb,lookup,ycsb-a",
            "--data-factor",
            "0.5, 10",
        ])
        .args;
        let all = args.combinations().unwrap();
        assert_eq!(all.len(), 14);
        assert_eq!(
            (
                all[0].workload.as_str(),
                all[0].data_factor_value().unwrap()
            ),
            ("ycsb-a", 0.5)
        );
        assert_eq!(
            (
                all[13].workload.as_str(),
                all[13].data_factor_value().unwrap()
            ),
            ("lookup", 10.0)
        );
        assert!(args.data_factor_value().is_err());
        for bad in ["0", "x", "2000", "1,,2"] {
            let args = Cli::parse_from(["compare", "--data-factor", bad]).args;
            assert!(args.combinations().is_err(), "{bad} accepted");
        }
        let args = Cli::parse_from(["compare", "--workload", " , "]).args;
        assert!(args.combinations().is_err());
    }

    #[test]
    fn the_summary_has_ops_ratios_and_cpu_per_combination() {
        let args = Cli::parse_from(["compare"]).args;
        let done = vec![
            Combination {
                workload: "ycsb-a".into(),
                data_factor: 0.5,
                device_iops: Some(80_000.0),
                summaries: vec![
                    summary("flashtree", 300.0, 2.0),
                    summary("rocksdb", 100.0, 8.0),
                ],
            },
            Combination {
                workload: "ycsb-c".into(),
                data_factor: 10.0,
                device_iops: None,
                summaries: vec![
                    summary("flashtree", 50.0, 3.0),
                    Summary {
                        space_amp_after_run: None,
                        ..summary("lmdb", 100.0, 4.0)
                    },
                ],
            },
        ];
        let text = summary_markdown(&args, &done);
        // Space amplification: a column per engine, after load / after run.
        assert!(
            text.contains(
                "| [ycsb-a](ycsb-a-x0.5/report.md) | 0.5 | 1.47 / 2.21 | 1.47 / 2.21 | – |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| [ycsb-c](ycsb-c-x10/report.md) | 10 | 1.47 / 2.21 | – | 1.47 / n/a |"),
            "{text}"
        );
        assert!(
            text.contains("| [ycsb-a](ycsb-a-x0.5/report.md) | 0.5 | 300 | 100 | – | 80000 |"),
            "{text}"
        );
        assert!(
            text.contains("| [ycsb-a](ycsb-a-x0.5/report.md) | 0.5 | 3.00 | – |"),
            "{text}"
        );
        assert!(
            text.contains("| [ycsb-c](ycsb-c-x10/report.md) | 10 | – | 0.50 |"),
            "{text}"
        );
        assert!(
            text.contains("| [ycsb-c](ycsb-c-x10/report.md) | 10 | 3.00 | – | 4.00 |"),
            "{text}"
        );
        let dir = tempfile::tempdir().unwrap();
        write_summary(dir.path(), &args, &done).unwrap();
        let json = std::fs::read_to_string(dir.path().join("summary.json")).unwrap();
        let lines: Vec<serde_json::Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[1]["engine"], "rocksdb");
        assert_eq!(lines[1]["data_factor"], 0.5);
        assert_eq!(lines[3]["device_iops"], serde_json::Value::Null);
        assert_eq!(lines[1]["disk_bytes_after_run"], 300_000);
        assert_eq!(lines[1]["raw_bytes"], 136_000);
        assert_eq!(lines[3]["space_amp_after_run"], serde_json::Value::Null);
        assert!(
            std::fs::metadata(dir.path().join("summary.png"))
                .unwrap()
                .len()
                > 1000
        );
    }
}

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
use crate::cost::{Prices, ReadSource};

/// One finished (workload, data factor).
#[derive(Debug, Clone)]
pub struct Combination {
    pub workload: String,
    pub data_factor: f64,
    /// The pool share of a `--pool-shares` sweep (None: not a sweep).
    pub pool_share: Option<f64>,
    /// The device limit measured after it (None: not measured).
    pub device_iops: Option<f64>,
    /// One per engine, in the order they ran.
    pub summaries: Vec<Summary>,
}

impl Combination {
    /// Name of its results subdirectory.
    pub fn dir_name(&self) -> String {
        match self.pool_share {
            Some(share) => format!("{}-pool{share}", self.workload),
            None => format!("{}-x{}", self.workload, self.data_factor),
        }
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

    /// Where its engines' reads were counted: "device counters (vda ...)"
    /// when all were alike, else each engine's; "–": none measured.
    pub fn reads_sources(&self) -> String {
        let of = |s: &Summary| {
            let source = s.cost.as_ref().and_then(|c| c.reads_source)?;
            Some(match (source, &s.device) {
                (ReadSource::DeviceCounters, Some(device)) => {
                    format!("{} of {device}", source.label())
                }
                _ => source.label().to_string(),
            })
        };
        let all: Vec<(String, Option<String>)> = self
            .summaries
            .iter()
            .map(|s| (s.engine.clone(), of(s)))
            .collect();
        match all.first() {
            None => "–".into(),
            Some((_, first)) if all.iter().all(|(_, source)| source == first) => {
                first.clone().unwrap_or_else(|| "–".into())
            }
            Some(_) => all
                .iter()
                .map(|(engine, source)| format!("{engine}: {}", source.as_deref().unwrap_or("–")))
                .collect::<Vec<_>>()
                .join("; "),
        }
    }

    /// `engine`'s ops/s per $ (None: not priced).
    pub fn ops_per_usd(&self, engine: &str) -> Option<f64> {
        self.summary_of(engine)?
            .cost
            .as_ref()
            .map(|c| c.ops_per_sec_per_usd)
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
pub fn summary_markdown(args: &CompareArgs, prices: &Prices, done: &[Combination]) -> String {
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
    let _ = writeln!(
        text,
        "\n## ops/s per $\n\nEach engine's ops/s ÷ the $ of the resources its best run used (cores, DRAM, the share of the priced SSD by space, by read operations or by read bytes), priced from {}; each report's Cost section gives the parts. Reads counted by: \"device counters\" (the block device's reads completed and bytes read, which count every process's I/O to it during the run, not only the engine's) or \"process bytes ÷ 4096\" (an estimate, where the device counters were not available).\n",
        prices.describe()
    );
    let mut columns: Vec<String> = engines.clone();
    columns.push("reads counted by".into());
    header(&mut text, &columns);
    for c in done {
        let mut row = row_start(c);
        for engine in &engines {
            let _ = write!(row, " {} |", cell(c.ops_per_usd(engine), 1));
        }
        let _ = write!(row, " {} |", c.reads_sources());
        let _ = writeln!(text, "{row}");
    }
    if has_flashtree && !peers.is_empty() {
        let _ = writeln!(text, "\n## flashtree ÷ each engine (ops/s per $)\n");
        let columns: Vec<String> = peers.iter().map(|p| format!("÷ {p}")).collect();
        header(&mut text, &columns);
        for c in done {
            let mut row = row_start(c);
            for peer in &peers {
                let ratio = c
                    .ops_per_usd("flashtree")
                    .zip(c.ops_per_usd(peer).filter(|v| *v > 0.0))
                    .map(|(ours, theirs)| ours / theirs);
                let _ = write!(row, " {} |", cell(ratio, 2));
            }
            let _ = writeln!(text, "{row}");
        }
    }
    text.push_str(&pool_share_section(done));
    let _ = writeln!(
        text,
        "\nPlots: summary.png (flashtree ÷ each engine, ops/s), summary-cost.png (flashtree ÷ each engine, ops/s per $){}.",
        if done.iter().any(|c| c.pool_share.is_some()) {
            ", pool-shares-<workload>.png (ops/s and ops/s per $ against the pool share)"
        } else {
            ""
        }
    );
    text
}

/// Workloads of a pool-share sweep, in order, each with its combinations
/// by share (largest first).
fn pool_share_workloads(done: &[Combination]) -> Vec<(String, Vec<&Combination>)> {
    let mut workloads: Vec<(String, Vec<&Combination>)> = Vec::new();
    for c in done.iter().filter(|c| c.pool_share.is_some()) {
        match workloads.iter_mut().find(|(w, _)| *w == c.workload) {
            Some((_, list)) => list.push(c),
            None => workloads.push((c.workload.clone(), vec![c])),
        }
    }
    for (_, list) in &mut workloads {
        list.sort_by(|a, b| {
            b.pool_share
                .unwrap_or(0.0)
                .total_cmp(&a.pool_share.unwrap_or(0.0))
        });
    }
    workloads
}

/// The share (and its ops/s per $) at which `engine` had the most ops/s
/// per $ among `list` (None: never priced).
pub fn best_share(list: &[&Combination], engine: &str) -> Option<(f64, f64)> {
    list.iter()
        .filter_map(|c| Some((c.pool_share?, c.ops_per_usd(engine)?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// The pool-share sweep: per workload, each engine's ops/s and ops/s per $
/// at each share, and its best share by ops/s per $.
fn pool_share_section(done: &[Combination]) -> String {
    let workloads = pool_share_workloads(done);
    if workloads.is_empty() {
        return String::new();
    }
    let engines = engine_names(done);
    let mut text = String::from(
        "\n## Pool-share sweep: how much DRAM to buy\n\nThe same data at every share; the pool or cache (and for LMDB its page cache) set to that share of the data's raw bytes. Best share: the one with the most ops/s per $.\n",
    );
    for (workload, list) in &workloads {
        let _ = writeln!(text, "\n### {workload}\n");
        let shares: Vec<String> = list
            .iter()
            .map(|c| {
                format!(
                    "[{}]({}/report.md)",
                    c.pool_share.unwrap_or(0.0),
                    c.dir_name()
                )
            })
            .collect();
        let _ = writeln!(
            text,
            "| engine | figure | {} | best share |",
            shares.join(" | ")
        );
        let _ = writeln!(text, "|---|---|{}---|", "---|".repeat(list.len()));
        for engine in &engines {
            let ops: Vec<String> = list
                .iter()
                .map(|c| cell(c.summary_of(engine).map(|s| s.ops_per_sec), 0))
                .collect();
            let per_usd: Vec<String> = list
                .iter()
                .map(|c| cell(c.ops_per_usd(engine), 1))
                .collect();
            let best = best_share(list, engine).map_or("–".to_string(), |(share, value)| {
                format!("**{share}** ({value:.1} ops/s per $)")
            });
            let _ = writeln!(text, "| {engine} | ops/s | {} | |", ops.join(" | "));
            let _ = writeln!(
                text,
                "| {engine} | ops/s per $ | {} | {best} |",
                per_usd.join(" | ")
            );
        }
    }
    text
}

/// Writes summary.md, summary.json and summary.png into `dir`.
pub fn write_summary(
    dir: &Path,
    args: &CompareArgs,
    prices: &Prices,
    done: &[Combination],
) -> Result<(), String> {
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    write("summary.md", summary_markdown(args, prices, done))?;
    let mut lines = String::new();
    for c in done {
        for summary in &c.summaries {
            let mut value = serde_json::to_value(summary).map_err(|e| e.to_string())?;
            if let Some(object) = value.as_object_mut() {
                object.insert("data_factor".into(), c.data_factor.into());
                object.insert("device_iops".into(), c.device_iops.into());
                object.insert("pool_share".into(), c.pool_share.into());
            }
            lines.push_str(&value.to_string());
            lines.push('\n');
        }
    }
    write("summary.json", lines)?;
    ratio_bars(&dir.join("summary.png"), done, "ops/s", &|c, peer| {
        c.flashtree_ratio(peer)
    })?;
    ratio_bars(
        &dir.join("summary-cost.png"),
        done,
        "ops/s per $",
        &|c, peer| {
            c.ops_per_usd("flashtree")
                .zip(c.ops_per_usd(peer).filter(|v| *v > 0.0))
                .map(|(ours, theirs)| ours / theirs)
        },
    )?;
    for (workload, list) in pool_share_workloads(done) {
        pool_share_plot(
            &dir.join(format!("pool-shares-{workload}.png")),
            &workload,
            &list,
        )?;
    }
    Ok(())
}

/// Two panels: ops/s and ops/s per $ against the pool share (log scale),
/// a line per engine.
fn pool_share_plot(path: &Path, workload: &str, list: &[&Combination]) -> Result<(), String> {
    let engines = engine_names(&list.iter().map(|c| (*c).clone()).collect::<Vec<_>>());
    let root = BitMapBackend::new(path, (1300, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (left, right) = root.split_horizontally(650);
    let share_min = list.iter().filter_map(|c| c.pool_share).fold(1.0, f64::min) * 0.8;
    type Figure<'a> = &'a dyn Fn(&Combination, &str) -> Option<f64>;
    let panels: [(&DrawingArea<_, _>, &str, Figure<'_>); 2] = [
        (&left, "ops/s", &|c, e| {
            c.summary_of(e).map(|s| s.ops_per_sec)
        }),
        (&right, "ops/s per $", &|c, e| c.ops_per_usd(e)),
    ];
    for (area, y_desc, figure) in panels {
        let value_max = list
            .iter()
            .flat_map(|c| engines.iter().filter_map(|e| figure(c, e)))
            .fold(1e-9, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("{workload}: {y_desc} by pool share"),
                ("sans-serif", 22),
            )
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d((share_min..1.2).log_scale(), 0.0..value_max)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("pool ÷ data")
            .x_labels(8)
            .x_label_formatter(&|x| format!("{x:.2}"))
            .y_desc(y_desc)
            .draw()
            .map_err(err)?;
        for (i, engine) in engines.iter().enumerate() {
            let color = Palette99::pick(i);
            let points: Vec<(f64, f64)> = list
                .iter()
                .filter_map(|c| Some((c.pool_share?, figure(c, engine)?)))
                .collect();
            let dot = Palette99::pick(i).filled();
            chart
                .draw_series(points.iter().map(|p| Circle::new(*p, 4, dot)))
                .map_err(err)?;
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(err)?
                .label(engine.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)
}

fn err(error: impl std::fmt::Display) -> String {
    format!("plot: {error}")
}

/// Grouped bars: per combination, flashtree ÷ each peer of `figure`
/// (`ratio`), and a line at 1.
fn ratio_bars(
    path: &Path,
    done: &[Combination],
    figure: &str,
    ratio: &dyn Fn(&Combination, &str) -> Option<f64>,
) -> Result<(), String> {
    let engines = engine_names(done);
    let peers: Vec<&String> = engines.iter().filter(|e| *e != "flashtree").collect();
    let root = BitMapBackend::new(path, (1000, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    if peers.is_empty() || done.is_empty() {
        return root.present().map_err(err);
    }
    let ratio_max = done
        .iter()
        .flat_map(|c| peers.iter().filter_map(|p| ratio(c, p)))
        .fold(1.0, f64::max)
        * 1.15;
    let labels: Vec<String> = done
        .iter()
        .map(|c| format!("{} ×{}", c.workload, c.data_factor))
        .collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("flashtree {figure} ÷ each engine's"),
            ("sans-serif", 24),
        )
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
                let ratio = ratio(c, peer)?;
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
                pool_share: None,
                device_iops: Some(80_000.0),
                summaries: vec![
                    summary("flashtree", 300.0, 2.0),
                    summary("rocksdb", 100.0, 8.0),
                ],
            },
            Combination {
                workload: "ycsb-c".into(),
                data_factor: 10.0,
                pool_share: None,
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
        let text = summary_markdown(&args, &Prices::default_table(), &done);
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
        write_summary(dir.path(), &args, &Prices::default_table(), &done).unwrap();
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

    #[test]
    fn pool_shares_fix_the_data_and_set_the_pool_to_each_share() {
        let args = Cli::parse_from([
            "compare",
            "--workload",
            "lookup,ycsb-b",
            "--memory",
            "64MiB",
            "--data-factor",
            "10",
            "--pool-shares",
            "1.0, 0.5,0.05",
        ])
        .args;
        let all = args.combinations().unwrap();
        assert_eq!(all.len(), 6);
        let memory = crate::sys::parse_bytes("64MiB").unwrap();
        let lookup = crate::compare::build_workload(&all[0], memory).unwrap();
        let data_bytes = lookup.dataset_bytes();
        assert!(
            data_bytes > 9 * memory && data_bytes <= 10 * memory,
            "{data_bytes}"
        );
        for (at, share) in [1.0, 0.5, 0.05].into_iter().enumerate() {
            let c = &all[at];
            assert_eq!(c.workload, "lookup");
            assert_eq!(c.pool_share, Some(share));
            assert_eq!(c.records, Some(lookup.records_count()));
            let pool = crate::sys::parse_bytes(&c.memory).unwrap();
            assert_eq!(pool, (data_bytes as f64 * share) as u64);
            let w = crate::compare::build_workload(c, pool).unwrap();
            assert_eq!(w.dataset_bytes(), data_bytes, "the data stays the same");
            assert_eq!(c.data_factor_value().unwrap(), 1.0 / share);
        }
        assert_eq!(all[3].workload, "ycsb-b");
        for bad in ["0", "1.5", "x", "0.5,0.5", "0.5,-0.1"] {
            let args = Cli::parse_from(["compare", "--pool-shares", bad]).args;
            assert!(args.combinations().is_err(), "{bad} accepted");
        }
        let args = Cli::parse_from(["compare", "--workload", "tpcc", "--pool-shares", "0.5"]).args;
        assert!(args.combinations().unwrap_err().contains("lookup and YCSB"));
    }

    fn priced(engine: &str, ops_per_sec: f64, usd_total: f64) -> Summary {
        let mut s = summary(engine, ops_per_sec, 1.0);
        s.price(&Prices::default_table(), None);
        let cost = s.cost.as_mut().unwrap();
        cost.usd_total = usd_total;
        cost.ops_per_sec_per_usd = ops_per_sec / usd_total;
        s
    }

    #[test]
    fn the_summary_gives_ops_per_usd_and_each_engines_best_pool_share() {
        let args = Cli::parse_from(["compare"]).args;
        let point = |share: f64, flashtree: (f64, f64), lmdb: (f64, f64)| Combination {
            workload: "lookup".into(),
            data_factor: 1.0 / share,
            pool_share: Some(share),
            device_iops: None,
            summaries: vec![
                priced("flashtree", flashtree.0, flashtree.1),
                priced("lmdb", lmdb.0, lmdb.1),
            ],
        };
        let done = vec![
            point(1.0, (1000.0, 100.0), (800.0, 100.0)),
            point(0.1, (900.0, 30.0), (100.0, 50.0)),
            point(0.5, (950.0, 50.0), (500.0, 50.0)),
        ];
        let text = summary_markdown(&args, &Prices::default_table(), &done);
        assert!(text.contains("## ops/s per $"), "{text}");
        assert!(text.contains("SSDs Striking Back"), "{text}");
        assert!(text.contains("August/September 2021"), "{text}");
        assert!(
            text.contains("| [lookup](lookup-pool0.1/report.md) | 10 | 30.0 | 2.0 |"),
            "{text}"
        );
        // flashtree ÷ lmdb in ops/s per $ at share 0.1: 30 / 2.
        assert!(
            text.contains("| [lookup](lookup-pool0.1/report.md) | 10 | 15.00 |"),
            "{text}"
        );
        // The sweep, largest share first, and the best share by ops/s per $.
        assert!(
            text.contains(
                "| flashtree | ops/s per $ | 10.0 | 19.0 | 30.0 | **0.1** (30.0 ops/s per $) |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| lmdb | ops/s per $ | 8.0 | 10.0 | 2.0 | **0.5** (10.0 ops/s per $) |"),
            "{text}"
        );
        assert!(
            text.contains("| lmdb | ops/s | 800 | 500 | 100 | |"),
            "{text}"
        );
        let dir = tempfile::tempdir().unwrap();
        write_summary(dir.path(), &args, &Prices::default_table(), &done).unwrap();
        for png in ["summary.png", "summary-cost.png", "pool-shares-lookup.png"] {
            assert!(
                std::fs::metadata(dir.path().join(png)).unwrap().len() > 1000,
                "{png}"
            );
        }
        let json = std::fs::read_to_string(dir.path().join("summary.json")).unwrap();
        let first: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
        assert_eq!(first["pool_share"], 1.0);
        assert_eq!(first["cost"]["ops_per_sec_per_usd"], 10.0);
        assert_eq!(first["cost"]["prices"], "huang-cidr2022-p4800x1");
        assert_eq!(first["cost"]["prices_date"], "August/September 2021");
        assert!(first["cost"]["prices_source"]
            .as_str()
            .unwrap()
            .contains("SSDs Striking Back"));
        assert_eq!(first["cost"]["reads_source"], serde_json::Value::Null);
    }

    #[test]
    fn the_summary_says_where_each_combinations_reads_were_counted() {
        let args = Cli::parse_from(["compare"]).args;
        let counted = |engine: &str, device: bool| {
            let mut s = summary(engine, 1000.0, 1.0);
            if device {
                s.read_iops = Some(100.0);
                s.device_read_bytes_per_sec = Some(409_600.0);
                s.device = Some("vda (254:0, whole device)".into());
            } else {
                s.process_reads_4kib_per_sec = Some(100.0);
            }
            s.price(&Prices::default_table(), None);
            s
        };
        let combination = |workload: &str, summaries: Vec<Summary>| Combination {
            workload: workload.into(),
            data_factor: 2.0,
            pool_share: None,
            device_iops: None,
            summaries,
        };
        let done = vec![
            combination(
                "tpcc",
                vec![counted("flashtree", true), counted("rocksdb", true)],
            ),
            combination(
                "lookup",
                vec![counted("flashtree", true), counted("rocksdb", false)],
            ),
        ];
        let text = summary_markdown(&args, &Prices::default_table(), &done);
        assert!(text.contains("| reads counted by |"), "{text}");
        assert!(
            text.contains(" | device counters of vda (254:0, whole device) |\n"),
            "{text}"
        );
        assert!(
            text.contains(
                " | flashtree: device counters of vda (254:0, whole device); rocksdb: process bytes ÷ 4096 |\n"
            ),
            "{text}"
        );
        assert!(text.contains("every process's I/O"), "{text}");
        let dir = tempfile::tempdir().unwrap();
        write_summary(dir.path(), &args, &Prices::default_table(), &done).unwrap();
        let json = std::fs::read_to_string(dir.path().join("summary.json")).unwrap();
        let lines: Vec<serde_json::Value> = json
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines[1]["cost"]["reads_source"], "device counters");
        assert_eq!(lines[1]["device"], "vda (254:0, whole device)");
        assert_eq!(lines[3]["cost"]["reads_source"], "process bytes ÷ 4096");
    }

    #[test]
    fn a_bad_price_table_stops_the_comparison_before_anything_runs() {
        let dir = tempfile::tempdir().unwrap();
        let results = dir.path().join("results");
        let prices = dir.path().join("prices.toml");
        for (text, expected) in [
            (Some("name = \"x\"\n"), "missing field"),
            (Some("name = "), "price table"),
            (None, "No such file"),
        ] {
            if let Some(text) = text {
                std::fs::write(&prices, text).unwrap();
            } else {
                let _ = std::fs::remove_file(&prices);
            }
            let args = Cli::parse_from([
                "compare".as_ref(),
                "--engines".as_ref(),
                "lmdb".as_ref(),
                "--prices".as_ref(),
                prices.as_os_str(),
                "--results".as_ref(),
                results.as_os_str(),
                "--dir".as_ref(),
                dir.path().join("data").as_os_str(),
            ])
            .args;
            let error =
                crate::compare::run_compare(&args, &crate::compare::Hooks::default()).unwrap_err();
            assert!(error.contains(expected), "{expected:?} not in {error:?}");
            assert!(error.contains("prices.toml"), "{error}");
            assert!(!results.exists(), "nothing runs");
        }
    }
}

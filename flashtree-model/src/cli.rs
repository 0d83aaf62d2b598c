//! `flashtree model …` subcommands: `measure`, `fit`, `predict`.

use std::io::Write;
use std::path::PathBuf;

use crate::fit::{fit_grid, format_table};
use crate::grid::{Grid, Op};
use crate::measure::{self, MeasureArgs};
use crate::model::DeviceModel;
use crate::plot;

/// The model subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ModelCommand {
    /// Measure the k × r grid of Ransom, Lim & Mitzenmacher §3.3 on a file and write grid.json.
    Measure(MeasureArgs),
    /// Fit the MQSSD cost functions to grid.json and write model.json and plots.
    Fit(FitArgs),
    /// Predict throughput from model.json.
    Predict(PredictArgs),
    /// Choose the smallest concurrency within 5% of the best candidate.
    Choose(ChooseArgs),
}

/// Arguments of `choose`.
#[derive(clap::Args, Debug)]
pub struct ChooseArgs {
    /// The model written by `fit`.
    #[arg(long, default_value = "model.json")]
    pub model: PathBuf,
    /// Share of page accesses that are random, in [0, 1].
    #[arg(long)]
    pub random_fraction: f64,
    /// Operation.
    #[arg(long, value_enum)]
    pub op: Op,
    /// Candidate concurrencies (requests in flight), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256")]
    pub candidates: Vec<u32>,
}

/// Arguments of `fit`.
#[derive(clap::Args, Debug)]
pub struct FitArgs {
    /// The grid written by `measure`.
    #[arg(long)]
    pub input: PathBuf,
    /// Where to write the model; plots go next to it.
    #[arg(long)]
    pub out: PathBuf,
    /// Print the fit summary as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Do not draw the PNG plots.
    #[arg(long)]
    pub no_plots: bool,
}

/// Arguments of `predict`.
#[derive(clap::Args, Debug)]
pub struct PredictArgs {
    /// The model written by `fit`.
    #[arg(long, default_value = "model.json")]
    pub model: PathBuf,
    /// Concurrency: requests in flight on the device.
    #[arg(long)]
    pub k: u32,
    /// Share of page accesses that are random, in [0, 1].
    #[arg(long)]
    pub random_fraction: f64,
    /// Operation.
    #[arg(long, value_enum)]
    pub op: Op,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs a model subcommand.
pub fn run(cmd: ModelCommand) -> Result<(), String> {
    match cmd {
        ModelCommand::Measure(args) => measure::run(&args).map_err(|e| e.to_string()),
        ModelCommand::Fit(args) => run_fit(&args),
        ModelCommand::Predict(args) => run_predict(&args),
        ModelCommand::Choose(args) => run_choose(&args),
    }
}

fn run_fit(args: &FitArgs) -> Result<(), String> {
    let grid = Grid::load(&args.input).map_err(|e| e.to_string())?;
    let outcome = fit_grid(&grid).map_err(|e| e.to_string())?;
    outcome.model.save(&args.out).map_err(|e| e.to_string())?;
    let mut plots = Vec::new();
    if !args.no_plots {
        match plot::draw_all(&outcome.model, &grid, &args.out) {
            Ok(paths) => plots = paths,
            // The model is saved; a missing font must not lose it.
            Err(error) => eprintln!("flashtree: warning: {error}"),
        }
    }
    if args.json {
        let mut value = serde_json::to_value(&outcome.summary).map_err(|e| e.to_string())?;
        value["model"] = serde_json::json!(args.out);
        value["plots"] = serde_json::json!(plots);
        let text = serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?;
        print_stdout(&(text + "\n"))
    } else {
        let mut text = format_table(&outcome.summary);
        text += &format!("model written to {}\n", args.out.display());
        for path in plots {
            text += &format!("plot written to {}\n", path.display());
        }
        print_stdout(&text)
    }
}

fn run_predict(args: &PredictArgs) -> Result<(), String> {
    let model = DeviceModel::load(&args.model).map_err(|e| e.to_string())?;
    let prediction = model
        .predict(args.op, args.k, args.random_fraction)
        .map_err(|e| e.to_string())?;
    if args.json {
        let mut value = serde_json::to_value(prediction).map_err(|e| e.to_string())?;
        value["op"] = serde_json::json!(args.op.name());
        value["random_fraction"] = serde_json::json!(args.random_fraction);
        let text = serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?;
        print_stdout(&(text + "\n"))
    } else {
        let clamp = if prediction.k_evaluated != prediction.k {
            format!(" (evaluated at measured k={})", prediction.k_evaluated)
        } else {
            String::new()
        };
        print_stdout(&format!(
            "{} k={} random_fraction={}: {:.1} MB/s ({:.3} µs/page; setup {:.3} µs, transfer {:.4} µs){}\n",
            args.op.name(),
            args.k,
            args.random_fraction,
            prediction.throughput_bytes_per_s / 1e6,
            prediction.us_per_page,
            prediction.setup_us,
            prediction.transfer_us,
            clamp
        ))
    }
}

fn run_choose(args: &ChooseArgs) -> Result<(), String> {
    let model = DeviceModel::load(&args.model).map_err(|e| e.to_string())?;
    let (k, reason) =
        crate::model::choose_concurrency(&model, args.op, args.random_fraction, &args.candidates)
            .map_err(|e| e.to_string())?;
    print_stdout(&format!("{k}\n{reason}\n"))
}

/// Writes to stdout; a closed pipe (`… | head`) is not an error.
fn print_stdout(text: &str) -> Result<(), String> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(format!("writing to stdout: {error}"))
        }
        _ => Ok(()),
    }
}

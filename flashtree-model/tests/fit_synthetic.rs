//! The fitting code recovers known parameters from data made from the model's
//! own equations, exactly without noise and closely with noise.

mod common;

use common::{synthetic_grid, truth, KS};
use flashtree_model::fit::fit_grid;
use flashtree_model::grid::Op;
use flashtree_model::model::DeviceModel;

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

/// Largest relative gap between fitted and true cost functions over k = 1..=128.
fn curve_gap(model: &DeviceModel, op: Op) -> f64 {
    let truth = truth();
    let (setup, transfer) = truth.costs(op);
    let costs = model.op(op).unwrap();
    (1..=128)
        .map(|k| k as f64)
        .map(|k| {
            rel(costs.setup_us.eval(k), setup.eval(k))
                .max(rel(costs.transfer_us.eval(k), transfer.eval(k)))
        })
        .fold(0.0, f64::max)
}

#[test]
fn recovers_parameters_without_noise() {
    let grid = synthetic_grid(&truth(), 0.0, 1);
    let outcome = fit_grid(&grid).unwrap();
    let truth = truth();
    for op in Op::ALL {
        let (setup, transfer) = truth.costs(op);
        let costs = outcome.model.op(op).unwrap();
        assert_eq!(costs.per_k.len(), KS.len());
        for row in &costs.per_k {
            let k = row.k as f64;
            assert!(rel(row.setup_us, setup.eval(k)) < 1e-9, "{op:?} {row:?}");
            assert!(
                rel(row.transfer_us, transfer.eval(k)) < 1e-9,
                "{op:?} {row:?}"
            );
            assert!(row.r2 > 0.999_999);
        }
        let gap = curve_gap(&outcome.model, op);
        assert!(gap < 1e-4, "{op:?}: fitted functions off by {gap}");
    }
    assert!(outcome.summary.heldout_median_rel_error < 1e-4);
    assert!(outcome.summary.insample_median_rel_error < 1e-4);
    assert!(outcome.summary.heldout_k_median_rel_error.unwrap() < 1e-3);
}

#[test]
fn recovers_quadratic_coefficients_without_noise() {
    // With d_n = 1 the representation is unique: the coefficients themselves
    // come back, not only the curve.
    let outcome = fit_grid(&synthetic_grid(&truth(), 0.0, 1)).unwrap();
    let truth = truth();
    let fitted = &outcome.model.read.as_ref().unwrap().setup_us;
    for (got, want) in fitted.num.iter().zip(&truth.read_setup.num) {
        assert!(
            (got - want).abs() < 1e-3 * want.abs().max(1.0),
            "num {fitted:?}"
        );
    }
    for (got, want) in fitted.den.iter().zip(&truth.read_setup.den) {
        assert!(
            (got - want).abs() < 1e-3 * want.abs().max(1.0),
            "den {fitted:?}"
        );
    }
}

#[test]
fn recovers_parameters_with_small_noise() {
    for seed in 0..5 {
        let grid = synthetic_grid(&truth(), 0.02, seed);
        let outcome = fit_grid(&grid).unwrap();
        for op in Op::ALL {
            let gap = curve_gap(&outcome.model, op);
            assert!(
                gap < 0.15,
                "seed {seed} {op:?}: fitted functions off by {gap}"
            );
        }
        let heldout = outcome.summary.heldout_median_rel_error;
        assert!(heldout < 0.03, "seed {seed}: held-out median {heldout}");
    }
}

#[test]
fn fitted_model_round_trips_through_json() {
    let outcome = fit_grid(&synthetic_grid(&truth(), 0.01, 7)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.json");
    outcome.model.save(&path).unwrap();
    let loaded = DeviceModel::load(&path).unwrap();
    assert_eq!(loaded, outcome.model);
}

#[test]
fn choose_concurrency_picks_smallest_near_best() {
    let outcome = fit_grid(&synthetic_grid(&truth(), 0.0, 1)).unwrap();
    let candidates = [1, 4, 16, 64, 256];
    let (k, reason) =
        flashtree_model::choose_concurrency(&outcome.model, Op::Read, 1.0, &candidates).unwrap();
    let predict = |k| {
        outcome
            .model
            .predict(Op::Read, k, 1.0)
            .unwrap()
            .throughput_bytes_per_s
    };
    let best = candidates.iter().map(|&c| predict(c)).fold(0.0, f64::max);
    assert!(predict(k) >= 0.95 * best, "{reason}");
    for &smaller in candidates.iter().filter(|&&c| c < k) {
        assert!(predict(smaller) < 0.95 * best, "{reason}");
    }
    assert!(reason.contains(&format!("k={k}")), "{reason}");
}

#[test]
fn cli_fit_writes_model_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let grid_path = dir.path().join("grid.json");
    let model_path = dir.path().join("model.json");
    synthetic_grid(&truth(), 0.01, 3).save(&grid_path).unwrap();
    let args = flashtree_model::cli::FitArgs {
        input: grid_path,
        out: model_path.clone(),
        json: true,
        no_plots: false,
    };
    flashtree_model::cli::run(flashtree_model::cli::ModelCommand::Fit(args)).unwrap();
    assert!(DeviceModel::load(&model_path).is_ok());
    for name in ["model_costs.png", "model_throughput.png"] {
        let bytes = std::fs::metadata(dir.path().join(name)).unwrap().len();
        assert!(bytes > 1000, "{name} has {bytes} bytes");
    }
    if let Ok(keep) = std::env::var("FLASHTREE_MODEL_KEEP_PLOTS") {
        for name in ["model_costs.png", "model_throughput.png", "grid.json"] {
            std::fs::copy(
                dir.path().join(name),
                std::path::Path::new(&keep).join(name),
            )
            .unwrap();
        }
    }
}

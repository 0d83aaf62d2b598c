//! `measure` end to end on a small file, with both drivers, then `fit`.

use flashtree_model::cli::{run, FitArgs, ModelCommand};
use flashtree_model::grid::{Grid, Op};
use flashtree_model::measure::MeasureArgs;

fn measure_args(dir: &std::path::Path, threads: bool) -> MeasureArgs {
    MeasureArgs {
        path: dir.join("grid.dat"),
        size: 8 << 20,
        out: dir.join("grid.json"),
        quick: true,
        threads,
        ks: Some(vec![1, 4]),
        fractions: Some(4),
        trial_time_s: Some(0.03),
        ops: None,
        request_kib: 64,
        refill: false,
        repeat: 1,
    }
}

#[test]
fn measures_and_fits_a_small_grid() {
    // Not /tmp: tmpfs refuses O_DIRECT.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for threads in [false, true] {
        let args = measure_args(dir.path(), threads);
        let out = args.out.clone();
        run(ModelCommand::Measure(args)).unwrap();
        let grid = Grid::load(&out).unwrap();
        assert_eq!(grid.points.len(), 2 * 2 * 4);
        assert_eq!(grid.points_of(Op::Write).count(), 8);
        assert!(grid.points.iter().all(|p| p.pages_total >= p.runs_total));
        let backend = if threads { "threads" } else { "io_uring" };
        assert_eq!(grid.device.as_ref().unwrap().backend, backend);
    }
    let fit = FitArgs {
        input: dir.path().join("grid.json"),
        out: dir.path().join("model.json"),
        json: true,
        no_plots: true,
    };
    run(ModelCommand::Fit(fit)).unwrap();
}

#[test]
fn refuses_bad_arguments() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut args = measure_args(dir.path(), false);
    args.ks = Some(vec![0]);
    assert!(run(ModelCommand::Measure(args))
        .unwrap_err()
        .contains("--ks"));
    let mut args = measure_args(dir.path(), false);
    args.request_kib = 3;
    assert!(run(ModelCommand::Measure(args))
        .unwrap_err()
        .contains("--request-kib"));
    let mut args = measure_args(dir.path(), false);
    args.path = dir.path().to_owned();
    assert!(run(ModelCommand::Measure(args))
        .unwrap_err()
        .contains("not a regular file"));
}

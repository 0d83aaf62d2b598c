//! Runs fio with the settings of an iobench point, on the same file(s), so
//! that flashtree's I/O path is compared with fio in one run.

use crate::iobench::{Pattern, PointResult, PointSpec};
use flashtree::io::BackendKind;
use std::path::PathBuf;
use std::process::Command;

/// Runs fio for `spec` and converts its JSON output to a [`PointResult`]
/// (backend named `fio-<engine>`). CPU seconds are fio's usr+sys.
pub fn run_fio(
    paths: &[PathBuf],
    size_bytes: u64,
    spec: &PointSpec,
    direct: bool,
) -> Result<PointResult, String> {
    let engine = match spec.backend {
        BackendKind::IoUring => "io_uring",
        BackendKind::Libaio => "libaio",
        BackendKind::Sync => "psync",
    };
    let rw = match spec.pattern {
        Pattern::RandRead => "randread",
        Pattern::RandWrite => "randwrite",
        Pattern::Read => "read",
        Pattern::Write => "write",
        Pattern::Mixed => "randrw",
    };
    let filename = paths
        .iter()
        .map(|p| p.display().to_string().replace(':', "\\\\:"))
        .collect::<Vec<_>>()
        .join(":");
    let mut cmd = Command::new("fio");
    cmd.args([
        "--name=flashtree-vs-fio",
        "--output-format=json",
        "--time_based",
        "--group_reporting",
        "--norandommap",
        "--randrepeat=0",
        "--thread",
    ])
    .arg(format!("--filename={filename}"))
    .arg(format!("--size={}", size_bytes / paths.len() as u64))
    .arg(format!("--ioengine={engine}"))
    .arg(format!("--direct={}", u8::from(direct)))
    .arg(format!("--rw={rw}"))
    .arg(format!("--rwmixread={}", spec.read_pct))
    .arg(format!("--bs={}", spec.block_bytes))
    .arg(format!(
        "--iodepth={}",
        if spec.backend == BackendKind::Sync {
            1
        } else {
            spec.depth
        }
    ))
    .arg(format!("--numjobs={}", spec.threads))
    .arg(format!("--runtime={}", spec.seconds.ceil() as u64));
    let output = cmd
        .output()
        .map_err(|e| format!("running fio: {e} (install it: apt-get install fio)"))?;
    if !output.status.success() {
        return Err(format!(
            "fio failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    parse_fio_json(&String::from_utf8_lossy(&output.stdout), spec, engine)
}

fn parse_fio_json(text: &str, spec: &PointSpec, engine: &str) -> Result<PointResult, String> {
    // fio may print warnings before the JSON document.
    let start = text.find('{').ok_or("fio printed no JSON")?;
    let doc: serde_json::Value =
        serde_json::from_str(&text[start..]).map_err(|e| format!("fio JSON: {e}"))?;
    let job = &doc["jobs"][0];
    let runtime_s = job["job_runtime"].as_f64().unwrap_or(0.0) / 1000.0 / f64::from(spec.threads);
    let read_ios = job["read"]["total_ios"].as_f64().unwrap_or(0.0);
    let write_ios = job["write"]["total_ios"].as_f64().unwrap_or(0.0);
    let ios = read_ios + write_ios;
    let side = if read_ios >= write_ios {
        &job["read"]
    } else {
        &job["write"]
    };
    let pct = |q: &str| side["clat_ns"]["percentile"][q].as_f64().unwrap_or(0.0) / 1000.0;
    let slat_us = side["slat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1000.0;
    let cpu_s = (job["usr_cpu"].as_f64().unwrap_or(0.0) + job["sys_cpu"].as_f64().unwrap_or(0.0))
        / 100.0
        * runtime_s
        * f64::from(spec.threads);
    let seconds = if runtime_s > 0.0 {
        runtime_s
    } else {
        spec.seconds
    };
    let iops = ios / seconds;
    Ok(PointResult {
        backend: format!("fio-{engine}"),
        pattern: spec.pattern.name().to_string(),
        read_pct: spec.read_pct,
        block: spec.block_bytes,
        depth: spec.depth,
        batch: spec.batch,
        threads: spec.threads,
        iops,
        mib_s: iops * f64::from(spec.block_bytes) / (1 << 20) as f64,
        lat_us_p50: pct("50.000000"),
        lat_us_p99: pct("99.000000"),
        lat_us_p999: pct("99.900000"),
        submit_lat_us_p50: slat_us,
        submit_lat_us_p99: slat_us,
        complete_lat_us_p50: pct("50.000000"),
        complete_lat_us_p99: pct("99.000000"),
        cpu_s,
        cpu_us_per_io: if ios > 0.0 { cpu_s * 1e6 / ios } else { 0.0 },
        seconds,
        ios: ios as u64,
        notes: vec!["fio: clat percentiles; submission is fio's mean slat".into()],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fio_json_output() {
        let text = r#"note: something
{"jobs":[{"job_runtime":10000,"usr_cpu":10.0,"sys_cpu":30.0,
 "read":{"total_ios":800000,"slat_ns":{"mean":2000.0},"clat_ns":{"percentile":{"50.000000":1500000,"99.000000":5000000,"99.900000":7000000}}},
 "write":{"total_ios":0}}]}"#;
        let spec = PointSpec {
            backend: BackendKind::IoUring,
            pattern: Pattern::RandRead,
            read_pct: 100,
            block_bytes: 4096,
            depth: 128,
            batch: 4,
            threads: 1,
            seconds: 10.0,
        };
        let r = parse_fio_json(text, &spec, "io_uring").unwrap();
        assert_eq!(r.iops, 80000.0);
        assert_eq!(r.lat_us_p50, 1500.0);
        assert!((r.cpu_s - 4.0).abs() < 1e-9);
        assert!((r.cpu_us_per_io - 5.0).abs() < 1e-9);
        assert!(parse_fio_json("no json", &spec, "io_uring").is_err());
    }
}

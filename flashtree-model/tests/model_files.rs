//! Malformed model and grid files give clear errors, never panics.

mod common;

use common::{synthetic_grid, truth};
use flashtree_model::fit::fit_grid;
use flashtree_model::grid::{Grid, Op};
use flashtree_model::model::DeviceModel;
use flashtree_model::{choose_concurrency, ModelError};
use serde_json::{json, Value};

fn good_model_json() -> Value {
    let outcome = fit_grid(&synthetic_grid(&truth(), 0.0, 1)).unwrap();
    serde_json::to_value(&outcome.model).unwrap()
}

fn load_error(value: &Value) -> String {
    DeviceModel::from_json(&value.to_string())
        .unwrap_err()
        .to_string()
}

#[test]
fn good_model_loads() {
    assert!(DeviceModel::from_json(&good_model_json().to_string()).is_ok());
}

#[test]
fn bad_json_is_reported_with_position() {
    let error = DeviceModel::from_json("{\"version\": 1, ").unwrap_err();
    assert!(matches!(error, ModelError::Json { .. }), "{error}");
    assert!(error.to_string().contains("line 1"), "{error}");
    let error = DeviceModel::from_json("").unwrap_err();
    assert!(matches!(error, ModelError::Json { .. }), "{error}");
}

#[test]
fn missing_fields_are_named() {
    for field in ["page_bytes", "k_measured_max"] {
        let mut value = good_model_json();
        value.as_object_mut().unwrap().remove(field);
        let error = load_error(&value);
        assert!(error.contains(field), "{field}: {error}");
    }
    let mut value = good_model_json();
    value["read"].as_object_mut().unwrap().remove("setup_us");
    assert!(load_error(&value).contains("setup_us"));
    let mut value = good_model_json();
    value.as_object_mut().unwrap().remove("version");
    assert!(load_error(&value).contains("version"));
}

#[test]
fn wrong_version_says_what_to_do() {
    let mut value = good_model_json();
    value["version"] = json!(99);
    let error = load_error(&value);
    assert!(
        error.contains("version 99") && error.contains("model fit"),
        "{error}"
    );
    value["version"] = json!("1");
    assert!(load_error(&value).contains("version"));
}

#[test]
fn negative_and_non_finite_values_are_rejected() {
    let mut value = good_model_json();
    value["read"]["per_k"][0]["setup_us"] = json!(-1.0);
    assert!(load_error(&value).contains("read.per_k[0]"));

    // A numerator that goes negative makes negative costs.
    let mut value = good_model_json();
    value["write"]["setup_us"]["num"] = json!([-5.0, -1.0, -1.0]);
    assert!(
        load_error(&value).contains("write.setup_us"),
        "{}",
        load_error(&value)
    );

    // A zero denominator is a pole: infinite cost.
    let mut value = good_model_json();
    value["read"]["transfer_us"]["den"] = json!([0.0, 0.0, 0.0]);
    assert!(load_error(&value).contains("read.transfer_us"));

    // JSON has no NaN; overflowing numbers are refused by the parser.
    let text =
        good_model_json()
            .to_string()
            .replacen("\"page_bytes\":4096", "\"page_bytes\":NaN", 1);
    assert!(DeviceModel::from_json(&text).is_err());
    let mut value = good_model_json();
    value["read"]["setup_us"]["num"][0] = json!(1e308);
    value["read"]["setup_us"]["num"][1] = json!(1e308);
    assert!(load_error(&value).contains("read.setup_us"));

    let mut value = good_model_json();
    value["page_bytes"] = json!(-4096);
    assert!(load_error(&value).contains("page_bytes"));
    let mut value = good_model_json();
    value["page_bytes"] = json!(0);
    assert!(load_error(&value).contains("page_bytes"));
}

#[test]
fn malformed_shapes_are_rejected() {
    let mut value = good_model_json();
    value["read"]["setup_us"]["num"] = json!([]);
    value["read"]["setup_us"]["den"] = json!([]);
    assert!(load_error(&value).contains("read.setup_us"));
    let mut value = good_model_json();
    value["read"]["setup_us"]["den"] = json!([1.0]);
    assert!(load_error(&value).contains("read.setup_us"));
    let mut value = good_model_json();
    value["k_measured_min"] = json!(200);
    assert!(load_error(&value).contains("k_measured"));
    let mut value = good_model_json();
    value["read"] = Value::Null;
    value["write"] = Value::Null;
    assert!(load_error(&value).contains("neither"));
}

#[test]
fn missing_file_names_the_path() {
    let error = DeviceModel::load(std::path::Path::new("/nonexistent/model.json")).unwrap_err();
    assert!(
        error.to_string().contains("/nonexistent/model.json"),
        "{error}"
    );
}

#[test]
fn bad_queries_are_errors() {
    let model = DeviceModel::from_json(&good_model_json().to_string()).unwrap();
    assert!(model.predict(Op::Read, 0, 0.5).is_err());
    assert!(model.predict(Op::Read, 4, 1.5).is_err());
    assert!(model.predict(Op::Read, 4, f64::NAN).is_err());
    assert!(model.predict(Op::Read, 4, -0.1).is_err());
    assert!(choose_concurrency(&model, Op::Read, 0.5, &[]).is_err());
    assert!(choose_concurrency(&model, Op::Read, 0.5, &[0, 4]).is_err());
    let mut value = good_model_json();
    value["write"] = Value::Null;
    let read_only = DeviceModel::from_json(&value.to_string()).unwrap();
    let error = read_only.predict(Op::Write, 4, 0.5).unwrap_err();
    assert!(error.to_string().contains("no write costs"), "{error}");
}

#[test]
fn predictions_above_measured_k_are_clamped() {
    let model = DeviceModel::from_json(&good_model_json().to_string()).unwrap();
    let at_max = model.predict(Op::Read, 128, 1.0).unwrap();
    let above = model.predict(Op::Read, 1024, 1.0).unwrap();
    assert_eq!(above.k_evaluated, 128);
    assert_eq!(above.throughput_bytes_per_s, at_max.throughput_bytes_per_s);
}

#[test]
fn malformed_grids_are_rejected() {
    let grid = synthetic_grid(&truth(), 0.0, 1);
    let mut value = serde_json::to_value(&grid).unwrap();
    value["points"][3]["elapsed_s"] = json!(-1.0);
    let error = serde_json::from_value::<Grid>(value)
        .unwrap()
        .validate()
        .unwrap_err();
    assert!(error.to_string().contains("points[3].elapsed_s"), "{error}");

    let mut value = serde_json::to_value(&grid).unwrap();
    value["points"][0]["runs_total"] = json!(0);
    let error = serde_json::from_value::<Grid>(value)
        .unwrap()
        .validate()
        .unwrap_err();
    assert!(
        error.to_string().contains("points[0].runs_total"),
        "{error}"
    );

    let mut value = serde_json::to_value(&grid).unwrap();
    value["version"] = json!(2);
    let error = serde_json::from_value::<Grid>(value)
        .unwrap()
        .validate()
        .unwrap_err();
    assert!(error.to_string().contains("model measure"), "{error}");

    let empty = Grid {
        points: Vec::new(),
        ..grid.clone()
    };
    assert!(fit_grid(&empty).is_err());

    // One fraction per k cannot be fitted: an error, not a panic.
    let mut single = grid;
    single
        .points
        .retain(|p| p.random_fraction_target == Some(1.0));
    let error = fit_grid(&single).unwrap_err();
    assert!(matches!(error, ModelError::NotEnoughData(_)), "{error}");
}

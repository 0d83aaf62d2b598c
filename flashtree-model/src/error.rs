//! The error type of the crate: one enum that says what went wrong and,
//! where it can, what the user can do about it.

use std::path::PathBuf;

/// Everything that can go wrong while measuring, fitting or predicting.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A file is not valid JSON or does not match the schema.
    #[error("{path}: not a valid {what} file: {}{source}", field_prefix(.field))]
    Json {
        /// The file concerned.
        path: PathBuf,
        /// `"grid"` or `"model"`.
        what: &'static str,
        /// Where in the document, e.g. `read.per_k[0].k` (`.` for the root).
        field: String,
        /// The parser's error, with line and column.
        source: serde_json::Error,
    },
    /// A file has a schema version this build does not understand.
    #[error("{what} file has version {found}, this build reads version {expected}; re-run `flashtree model {redo}`")]
    Version {
        /// `"grid"` or `"model"`.
        what: &'static str,
        /// The version in the file.
        found: u32,
        /// The version this build writes and reads.
        expected: u32,
        /// The subcommand that makes a fresh file.
        redo: &'static str,
    },
    /// A value is out of its allowed range (negative, NaN, zero where
    /// positive is required, ...).
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// Where the value sits, e.g. `points[3].elapsed_s`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The grid does not hold enough points to fit the model.
    #[error("not enough data: {0}")]
    NotEnoughData(String),
    /// The model has no cost functions for the requested operation.
    #[error("the model has no {0} costs; measure and fit them first")]
    MissingOp(&'static str),
    /// A numerical step failed (singular system, fit that diverged).
    #[error("numerical failure: {0}")]
    Numerical(String),
    /// Drawing a plot failed.
    #[error("plot {path}: {reason}")]
    Plot {
        /// The image file.
        path: PathBuf,
        /// What the drawing library said.
        reason: String,
    },
    /// Measuring the device failed.
    #[error("measurement failed: {0}")]
    Measure(String),
}

/// `"at read.per_k[0]: "`, or nothing for the document root.
fn field_prefix(field: &str) -> String {
    match field {
        "" | "." | "?" => String::new(),
        _ => format!("at {field}: "),
    }
}

impl ModelError {
    /// Shorthand for [`ModelError::Invalid`].
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ModelError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, ModelError>;

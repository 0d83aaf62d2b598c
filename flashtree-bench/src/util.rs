//! Small helpers shared by the benchmark commands: size parsing, usage
//! errors, progress bars.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// Prefix of error messages that are the user's fault; `main` exits with 2.
pub const USAGE_ERROR_PREFIX: &str = "invalid argument: ";

/// An error message for bad input (exit code 2).
pub fn usage_error(message: impl std::fmt::Display) -> String {
    format!("{USAGE_ERROR_PREFIX}{message}")
}

/// Parses "4096", "4KiB", "4k", "128MiB", "8GiB", "1.5GiB" into bytes
/// (the same parser as `flashtree bench compare`).
pub fn parse_size_bytes(text: &str) -> Result<u64, String> {
    flashtree_peers::sys::parse_bytes(text)
}

/// Parses a comma-separated list with `parse_one`.
pub fn parse_list<T>(
    text: &str,
    parse_one: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let items: Result<Vec<T>, String> = text
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| parse_one(s.trim()))
        .collect();
    let items = items?;
    if items.is_empty() {
        return Err(format!("empty list '{text}'"));
    }
    Ok(items)
}

/// A progress bar on a terminal (stderr), hidden otherwise.
pub fn progress_bar(length: u64, message: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(length);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>12} [{bar:40}] {percent:>3}% {elapsed}/{eta} {per_sec}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_message(message.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_size_bytes("64KiB").unwrap(), 65536);
        assert_eq!(parse_size_bytes("128MiB").unwrap(), 128 << 20);
        assert_eq!(parse_size_bytes("8GiB").unwrap(), 8 << 30);
        assert_eq!(parse_size_bytes("1.5g").unwrap(), 3 << 29);
        assert!(parse_size_bytes("12XB").is_err());
        assert!(parse_size_bytes("abc").is_err());
        assert_eq!(
            parse_list("1,4,16", |s| s.parse::<u32>().map_err(|e| e.to_string())).unwrap(),
            vec![1, 4, 16]
        );
        assert!(parse_list("", |s| s.parse::<u32>().map_err(|e| e.to_string())).is_err());
    }
}

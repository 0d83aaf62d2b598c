//! Generates include/flashtree.h from the crate's source with cbindgen.
//! The header is committed: it is rewritten only when its text changes,
//! so a build leaves the work tree clean.

use std::path::Path;

fn main() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-changed=build.rs");

    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("flashtree-c/cbindgen.toml");
    let lib_rs = crate_dir.join("src/lib.rs");
    let overview = std::fs::read_to_string(&lib_rs).expect("flashtree-c/src/lib.rs");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_header(header_comment(&overview))
        .with_src(&lib_rs)
        .generate()
        .expect("cbindgen could not generate include/flashtree.h");
    let mut text = Vec::new();
    bindings.write(&mut text);

    let header = crate_dir.join("include/flashtree.h");
    if std::fs::read(&header).ok().as_deref() == Some(text.as_slice()) {
        return;
    }
    // Written whole and renamed into place, so a reader (or a concurrent
    // build) never sees half a header.
    let tmp = header.with_extension(format!("h.tmp{}", std::process::id()));
    std::fs::create_dir_all(header.parent().unwrap()).expect("flashtree-c/include");
    std::fs::write(&tmp, &text).expect("writing the header");
    std::fs::rename(&tmp, &header).expect("renaming the header into place");
}

/// The `//!` lines at the top of lib.rs as a C comment.
fn header_comment(lib_rs: &str) -> String {
    let mut out = String::from("/*\n");
    for line in lib_rs.lines().take_while(|l| l.starts_with("//!")) {
        let text = line.trim_start_matches("//!").trim_start_matches(' ');
        // Markdown code spans read as plain text in C.
        let text = text.replace('`', "");
        if text.is_empty() {
            out.push_str(" *\n");
        } else {
            out.push_str(" * ");
            out.push_str(&text);
            out.push('\n');
        }
    }
    out.push_str(" */");
    out
}

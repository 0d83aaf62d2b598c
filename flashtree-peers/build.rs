//! Compiles the WiredTiger C shim and links the Debian system libraries.
//! Missing headers fail here with the Debian package to install.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=csrc/wt_shim.c");
    require_header("/usr/include/wiredtiger.h", "libwiredtiger-dev");
    require_header("/usr/include/lmdb.h", "liblmdb-dev");
    require_header("/usr/include/rocksdb/c.h", "librocksdb-dev");
    cc::Build::new()
        .file("csrc/wt_shim.c")
        .opt_level(2)
        .warnings(true)
        .compile("wt_shim");
    println!("cargo:rustc-link-lib=dylib=wiredtiger");
    println!("cargo:rustc-link-lib=dylib=lmdb");
}

fn require_header(path: &str, debian_package: &str) {
    if !Path::new(path).exists() {
        panic!(
            "{path} not found: install the Debian package {debian_package} \
             (apt-get install {debian_package})"
        );
    }
}

//! The committed header must equal a fresh cbindgen generation (docs/abi.md, "The header").
//! `MCORE_UPDATE_HEADER=1 cargo test --test header_drift` (scripts/gen-header.sh) rewrites it.

use std::path::PathBuf;

fn generate() -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml");
    config.after_includes = Some(format!(
        "\n#define MCORE_VERSION_MAJOR {}\n#define MCORE_VERSION_MINOR {}\n#define MCORE_VERSION_PATCH {}\n#define MCORE_VERSION_STRING \"{}\"",
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_PATCH"),
        env!("CARGO_PKG_VERSION"),
    ));
    let mut out = Vec::new();
    // Only src/ffi is the C ABI: parse that module tree, not the whole crate.
    cbindgen::Builder::new()
        .with_src(root.join("src/ffi/mod.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen generation")
        .write(&mut out);
    String::from_utf8(out).expect("utf-8 header")
}

#[test]
fn committed_header_matches_fresh_generation() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include/mcore_init.h");
    let fresh = generate();
    if std::env::var_os("MCORE_UPDATE_HEADER").is_some() {
        std::fs::write(&path, &fresh).expect("write header");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/mcore_init.h is stale: run scripts/gen-header.sh and commit the result"
    );
}

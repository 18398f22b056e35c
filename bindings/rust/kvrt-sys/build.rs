//! Finds the kvrt library: `KVRT_LIB_DIR` (a folder holding libkvrt) when set,
//! otherwise pkg-config's `kvrt.pc`. Fails with an explanation when neither
//! finds it.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for var in [
        "KVRT_LIB_DIR",
        "KVRT_INCLUDE_DIR",
        "KVRT_STATIC",
        "PKG_CONFIG_PATH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    // docs.rs builds documentation without the native library.
    if env::var_os("DOCS_RS").is_some() {
        return;
    }

    if let Some(dir) = env::var_os("KVRT_LIB_DIR") {
        let dir = PathBuf::from(dir);
        if !dir.is_dir() {
            panic!(
                "\n\nkvrt-sys: KVRT_LIB_DIR={} is not a folder.\n\
                 Set it to the folder that holds libkvrt.so (e.g. <prefix>/lib).\n\n",
                dir.display()
            );
        }
        println!("cargo:rustc-link-search=native={}", dir.display());
        let kind = if env::var_os("KVRT_STATIC").is_some() {
            "static"
        } else {
            "dylib"
        };
        println!("cargo:rustc-link-lib={kind}=kvrt");
        // Passed on to dependents' build scripts as DEP_KVRT_LIB_DIR.
        println!("cargo:lib_dir={}", dir.display());
        if let Some(include) = env::var_os("KVRT_INCLUDE_DIR") {
            println!("cargo:include={}", PathBuf::from(include).display());
        }
        return;
    }

    match pkg_config::Config::new().atleast_version("0.2").probe("kvrt") {
        Ok(lib) => {
            if let Some(dir) = lib.link_paths.first() {
                println!("cargo:lib_dir={}", dir.display());
            }
            if let Some(dir) = lib.include_paths.first() {
                println!("cargo:include={}", dir.display());
            }
        }
        Err(err) => panic!(
            "\n\nkvrt-sys: cannot find the kvrt library.\n\
             Either install kvrt where pkg-config finds its kvrt.pc \
             (e.g. `cmake --install build --prefix <prefix>` and \
             PKG_CONFIG_PATH=<prefix>/lib/pkgconfig),\n\
             or set KVRT_LIB_DIR to the folder holding libkvrt.so \
             (and KVRT_INCLUDE_DIR to its include folder if dependents need the headers).\n\
             pkg-config said: {err}\n\n"
        ),
    }
}

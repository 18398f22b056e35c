//! Lets the kvrt-llm binary find libkvrt where it was linked from (an rpath
//! to the folder kvrt-sys found it in), so that `build/bin/kvrt-llm` runs
//! without LD_LIBRARY_PATH.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_KVRT_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_KVRT_LIB_DIR") {
        println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{dir}");
    }
}

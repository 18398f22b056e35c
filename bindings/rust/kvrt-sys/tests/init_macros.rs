//! Checks every `*_INIT` constant of this crate against the C header's macro:
//! a C program compiled with the `cc` crate's compiler prints the macros'
//! bytes (static objects, so padding is zero), and each is read back as the
//! Rust struct and compared field by field (through `Debug`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

fn include_dir() -> PathBuf {
    match std::env::var_os("KVRT_INCLUDE_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../include"),
    }
}

fn c_values() -> HashMap<String, Vec<u8>> {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = tmp.join("kvrt_init_macros");
    let target = std::env::consts::ARCH.to_string() + "-unknown-linux-gnu";
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .target(&target)
        .host(&target)
        .opt_level(0)
        .out_dir(&tmp)
        .get_compiler();
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/init_macros.c");
    let status = compiler
        .to_command()
        .arg(format!("-I{}", include_dir().display()))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("cannot run the C compiler");
    assert!(status.success(), "compiling {} failed", src.display());
    let out = Command::new(&exe).output().expect("cannot run the C program");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .map(|line| {
            let (name, hex) = line.split_once(' ').unwrap();
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (name.to_string(), bytes)
        })
        .collect()
}

fn check<T: std::fmt::Debug>(values: &HashMap<String, Vec<u8>>, name: &str, rust: T) {
    let bytes = values
        .get(name)
        .unwrap_or_else(|| panic!("{name} missing from the C output"));
    assert_eq!(bytes.len(), std::mem::size_of::<T>(), "{name}: size differs");
    // SAFETY: the structs are plain C data (integers, floats, null pointers and
    // an Option of a function pointer), for which the bytes of a valid C value
    // are a valid Rust value.
    let c: T = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) };
    assert_eq!(
        format!("{c:?}"),
        format!("{rust:?}"),
        "{name} differs from the C macro"
    );
}

#[test]
fn init_constants_match_c_macros() {
    let values = c_values();
    check(&values, "KVRT_DEVICE_INFO_INIT", kvrt_sys::KVRT_DEVICE_INFO_INIT);
    check(
        &values,
        "KVRT_CONTEXT_DESC_INIT",
        kvrt_sys::KVRT_CONTEXT_DESC_INIT,
    );
    check(
        &values,
        "KVRT_PIPELINE_CACHE_DESC_INIT",
        kvrt_sys::KVRT_PIPELINE_CACHE_DESC_INIT,
    );
    check(
        &values,
        "KVRT_CONTEXT_STATS_INIT",
        kvrt_sys::KVRT_CONTEXT_STATS_INIT,
    );
    check(&values, "KVRT_BUFFER_DESC_INIT", kvrt_sys::KVRT_BUFFER_DESC_INIT);
    check(&values, "KVRT_STREAM_DESC_INIT", kvrt_sys::KVRT_STREAM_DESC_INIT);
    check(&values, "KVRT_TIMING_INIT", kvrt_sys::KVRT_TIMING_INIT);
    check(&values, "KVRT_ROPE_DESC_INIT", kvrt_sys::KVRT_ROPE_DESC_INIT);
    check(&values, "KVRT_CACHE_DESC_INIT", kvrt_sys::KVRT_CACHE_DESC_INIT);
    check(
        &values,
        "KVRT_WINDOW_LAYOUT_DESC_INIT",
        kvrt_sys::KVRT_WINDOW_LAYOUT_DESC_INIT,
    );
    check(
        &values,
        "KVRT_STATIC_LAYOUT_DESC_INIT",
        kvrt_sys::KVRT_STATIC_LAYOUT_DESC_INIT,
    );
    check(
        &values,
        "KVRT_STATIC_SCALES_DESC_INIT",
        kvrt_sys::KVRT_STATIC_SCALES_DESC_INIT,
    );
    check(
        &values,
        "KVRT_CACHE_ESTIMATE_INIT",
        kvrt_sys::KVRT_CACHE_ESTIMATE_INIT,
    );
    check(&values, "KVRT_BATCH_INIT", kvrt_sys::KVRT_BATCH_INIT);
    check(&values, "KVRT_BATCH_TREE_INIT", kvrt_sys::KVRT_BATCH_TREE_INIT);
    check(&values, "KVRT_TENSOR_REF_INIT", kvrt_sys::KVRT_TENSOR_REF_INIT);
    check(&values, "KVRT_OUTPUT_REF_INIT", kvrt_sys::KVRT_OUTPUT_REF_INIT);
    check(&values, "KVRT_CACHE_INFO_INIT", kvrt_sys::KVRT_CACHE_INFO_INIT);
    check(
        &values,
        "KVRT_ATTENTION_PARAMS_INIT",
        kvrt_sys::KVRT_ATTENTION_PARAMS_INIT,
    );
    check(
        &values,
        "KVRT_STATIC_WINDOW_INIT",
        kvrt_sys::KVRT_STATIC_WINDOW_INIT,
    );
    check(
        &values,
        "KVRT_STATIC_STATS_INIT",
        kvrt_sys::KVRT_STATIC_STATS_INIT,
    );
    check(
        &values,
        "KVRT_STATIC_MASK_DESC_INIT",
        kvrt_sys::KVRT_STATIC_MASK_DESC_INIT,
    );
    check(
        &values,
        "KVRT_STATIC_STYLE_DESC_INIT",
        kvrt_sys::KVRT_STATIC_STYLE_DESC_INIT,
    );
    check(
        &values,
        "KVRT_EXPORTED_MEMORY_INIT",
        kvrt_sys::KVRT_EXPORTED_MEMORY_INIT,
    );
    check(
        &values,
        "KVRT_PAGED_LAYOUT_DESC_INIT",
        kvrt_sys::KVRT_PAGED_LAYOUT_DESC_INIT,
    );
    check(&values, "KVRT_PAGED_STATS_INIT", kvrt_sys::KVRT_PAGED_STATS_INIT);
    check(&values, "KVRT_MEMORY_INIT_INIT", kvrt_sys::KVRT_MEMORY_INIT_INIT);
    check(&values, "KVRT_MEMORY_DESC_INIT", kvrt_sys::KVRT_MEMORY_DESC_INIT);
    check(
        &values,
        "KVRT_MEMORY_BATCH_INIT",
        kvrt_sys::KVRT_MEMORY_BATCH_INIT,
    );
    check(
        &values,
        "KVRT_MEMORY_ESTIMATE_INIT",
        kvrt_sys::KVRT_MEMORY_ESTIMATE_INIT,
    );
    assert_eq!(values.len(), 30);
}

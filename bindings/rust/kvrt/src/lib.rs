//! Safe Rust API of [kvrt](https://github.com/kvrt/kvrt): a Vulkan compute
//! runtime that owns an LLM's key/value cache on the GPU and runs its
//! kernels (store, attention, RoPE shifts, compaction, static windows for
//! NPU graphs, paged block tables with prefix sharing, state save and load,
//! host swap of sequences, and an experimental fixed-capacity memory).
//!
//! # Objects and ownership
//!
//! A [`Context`] (one Vulkan device) creates [`Buffer`]s, [`Stream`]s,
//! [`Cache`]s and [`Memory`](experimental::Memory)s. Each object owns its C
//! handle and destroys it on drop, and holds a shared reference to its
//! context: the context is destroyed after the last of them. Objects that
//! borrow others — a [`StaticWindow`] borrows its cache, a [`Recording`]
//! its stream and the caches it records work for — cannot outlive them:
//!
//! ```compile_fail
//! # fn main() -> kvrt::Result<()> {
//! let ctx = kvrt::Context::new()?;
//! let mut desc = kvrt::CacheDesc::new(1, 1, 1, 8, 0);
//! desc.layout = kvrt::Layout::Static;
//! desc.static_layout = Some(kvrt::StaticLayoutDesc::new(8));
//! let cache = ctx.create_cache(&desc)?;
//! let window = cache.static_window(0, 0, 0, kvrt::KvArray::K)?;
//! drop(cache); // error: `cache` is borrowed by `window`
//! println!("{}", window.offset);
//! # Ok(()) }
//! ```
//!
//! # State and host swap
//!
//! [`Cache::state_save`] and [`Cache::state_load`] turn the cells of a whole
//! cache or of one sequence into bytes and back (a checked, versioned
//! format; loads are all or nothing), [`Cache::state_save_file`] and
//! [`Cache::state_load_file`] do the same with files written atomically,
//! and [`Cache::seq_swap_out`] / [`Cache::seq_swap_in`] (and their `_file`
//! forms) move a sequence out to the host and back.
//!
//! # Descriptors and enums grow
//!
//! The C structs and enums behind this crate's descriptors, results and
//! enums gain fields and values in minor releases. So every one of them is
//! `#[non_exhaustive]`: build a descriptor with its `new` or [`Default`] and
//! set the fields you need (`let mut p = AttentionParams::default();
//! p.scale = 0.1;`), and give a `match` on an enum a `_` arm. A later kvrt
//! then adds a field or a value without breaking your code.
//!
//! # Threads
//!
//! `Send` and `Sync` follow kvrt.h's "Threading" rules: [`Context`] and
//! [`Buffer`] are `Send + Sync` (their calls are the header's "Safe" ones);
//! [`Stream`], [`Cache`] and [`Memory`](experimental::Memory) are `Send`
//! only (used by one thread at a time); a [`Recording`] is neither, as it
//! ties its stream to the caches it records for.
//!
//! ```compile_fail
//! fn needs_sync<T: Sync>() {}
//! needs_sync::<kvrt::Cache>(); // error: a cache is used by one thread at a time
//! ```
//!
//! # Example
//!
//! ```no_run
//! use kvrt::{Batch, CacheDesc, Context, Layers, OutputRef, TensorRef};
//!
//! let ctx = Context::new()?;
//! // One layer, 2 query heads sharing 1 KV head of 8 values, 64 cells.
//! let mut cache = ctx.create_cache(&CacheDesc::new(1, 2, 1, 8, 64))?;
//! let positions = [0, 1, 2];
//! let batch = Batch::for_seq(0, &positions);
//! let k = vec![0.25f32; 3 * 8];
//! let v = vec![1.0f32; 3 * 8];
//! cache.store(&batch, Layers::One(0), &TensorRef::host_f32(&k), &TensorRef::host_f32(&v))?;
//!
//! let q = vec![0.5f32; 2 * 8];
//! let mut out = vec![0f32; 2 * 8];
//! let query = Batch::for_seq(0, &positions[2..]);
//! cache.attention(0, &query, &TensorRef::host_f32(&q), &mut OutputRef::host_f32(&mut out), &Default::default())?;
//! assert!((out[0] - 1.0).abs() < 1e-3);
//! # Ok::<(), kvrt::Error>(())
//! ```
//!
//! # Linking
//!
//! The `kvrt-sys` crate links `libkvrt`, found through pkg-config or
//! `KVRT_LIB_DIR`; see its README.
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod buffer;
mod cache;
mod context;
mod error;
mod memory;
mod paged;
mod state;
mod stream;
mod tensor;
mod types;

pub use kvrt_sys as sys;

#[cfg(unix)]
pub use buffer::ExportedMemory;
pub use buffer::{AsBuffer, Buffer, CacheBuffer, MemoryHandleType};
pub use cache::{
    AttentionParams, Cache, CacheDesc, CacheEstimate, CacheInfo, GraphMask, Layout, Reevaluation, RopeDesc,
    RopeMode, StaticLayoutDesc, StaticScales, StaticStats, StaticStyle, StaticWindow, WindowLayoutDesc,
};
pub use context::{enumerate_devices, Context, ContextBuilder, ContextStats, DeviceInfo, DeviceType};
pub use error::{Error, Result};
pub use paged::{Admitted, PagedLayoutDesc, PagedStats};
pub use stream::{Recording, Stream, StreamDesc, Timing};
pub use tensor::{Batch, OutputRef, Strides, TensorRef};
pub use types::{ElementType, KvArray, Layers, LogLevel, Plain};

/// The fixed-capacity memory ("MV/MK" memory).
///
/// **Experimental**: kvrt.h marks this section as one that may change in any
/// minor release; this module follows it and may change with it.
pub mod experimental {
    pub use crate::memory::{Memory, MemoryBatch, MemoryDesc, MemoryEstimate, MemoryInit};
}

/// The version of the loaded library, packed as `major << 22 | minor << 12 |
/// patch` (`kvrt_version`).
pub fn version() -> u32 {
    // SAFETY: Safe from any thread.
    unsafe { sys::kvrt_version() }
}

/// The version of the loaded library as "MAJOR.MINOR.PATCH" (`kvrt_version_string`).
pub fn version_string() -> &'static str {
    // SAFETY: Safe; static storage.
    let p = unsafe { sys::kvrt_version_string() };
    if p.is_null() {
        return "";
    }
    // SAFETY: a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap_or("")
}

/// The library's short name of a result code, e.g. "KVRT_ERROR_TIMEOUT"
/// (the part of `kvrt_result_string` before its colon).
pub fn result_name(code: i32) -> String {
    // SAFETY: Safe; never NULL, static storage.
    let p = unsafe { sys::kvrt_result_string(code) };
    if p.is_null() {
        return format!("kvrt result {code}");
    }
    // SAFETY: a static NUL-terminated string.
    let s = unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy();
    s.split(':').next().unwrap_or_default().trim().to_string()
}

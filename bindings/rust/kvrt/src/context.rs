//! Devices and contexts.

use std::ffi::{c_void, CStr};
use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use kvrt_sys as sys;

use crate::error::{check, Error, Result};
use crate::types::{cstring, fixed_str, LogLevel};

/// The kind of a device (`kvrt_device_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeviceType {
    /// Another kind, or unknown.
    Other,
    /// A GPU sharing memory with the CPU.
    IntegratedGpu,
    /// A separate GPU.
    DiscreteGpu,
    /// A virtualized GPU.
    VirtualGpu,
    /// A CPU implementation such as lavapipe.
    Cpu,
}

impl DeviceType {
    fn from_raw(raw: sys::kvrt_device_type) -> Self {
        match raw {
            sys::KVRT_DEVICE_TYPE_INTEGRATED_GPU => DeviceType::IntegratedGpu,
            sys::KVRT_DEVICE_TYPE_DISCRETE_GPU => DeviceType::DiscreteGpu,
            sys::KVRT_DEVICE_TYPE_VIRTUAL_GPU => DeviceType::VirtualGpu,
            sys::KVRT_DEVICE_TYPE_CPU => DeviceType::Cpu,
            _ => DeviceType::Other,
        }
    }
}

/// What a device is and can do (`kvrt_device_info`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DeviceInfo {
    /// Index in [`enumerate_devices`] order.
    pub index: u32,
    /// The kind of device.
    pub device_type: DeviceType,
    /// The device name, e.g. "llvmpipe (LLVM 15.0.6, 256 bits)".
    pub name: String,
    /// The driver's name; "" if unknown.
    pub driver_name: String,
    /// The driver's version text; "" if unknown.
    pub driver_info: String,
    /// PCI vendor id.
    pub vendor_id: u32,
    /// Device id.
    pub device_id: u32,
    /// Vulkan version (VK_MAKE_API_VERSION packing).
    pub api_version: u32,
    /// Driver version.
    pub driver_version: u32,
    /// `KVRT_DEVICE_FEATURE_*` bits (see [`DeviceInfo::has_feature`]).
    pub features: u32,
    /// `KVRT_SUBGROUP_OP_*` bits of the compute stage.
    pub subgroup_ops: u32,
    /// Subgroup size.
    pub subgroup_size: u32,
    /// Shared memory per workgroup, bytes.
    pub max_shared_memory_bytes: u32,
    /// Invocations per workgroup.
    pub max_workgroup_invocations: u32,
    /// Push constant bytes.
    pub max_push_constants_bytes: u32,
    /// Largest storage-buffer binding, bytes.
    pub max_storage_buffer_range: u64,
    /// Largest single allocation, bytes.
    pub max_memory_allocation_size: u64,
    /// Size of the largest device-local heap, bytes.
    pub device_local_bytes: u64,
    /// Nanoseconds per timestamp tick.
    pub timestamp_period_ns: f32,
}

impl DeviceInfo {
    fn from_raw(r: &sys::kvrt_device_info) -> Self {
        DeviceInfo {
            index: r.index,
            device_type: DeviceType::from_raw(r.device_type),
            name: fixed_str(&r.name),
            driver_name: fixed_str(&r.driver_name),
            driver_info: fixed_str(&r.driver_info),
            vendor_id: r.vendor_id,
            device_id: r.device_id,
            api_version: r.api_version,
            driver_version: r.driver_version,
            features: r.features,
            subgroup_ops: r.subgroup_ops,
            subgroup_size: r.subgroup_size,
            max_shared_memory_bytes: r.max_shared_memory_bytes,
            max_workgroup_invocations: r.max_workgroup_invocations,
            max_push_constants_bytes: r.max_push_constants_bytes,
            max_storage_buffer_range: r.max_storage_buffer_range,
            max_memory_allocation_size: r.max_memory_allocation_size,
            device_local_bytes: r.device_local_bytes,
            timestamp_period_ns: r.timestamp_period_ns,
        }
    }

    /// Whether `feature` (a `kvrt_sys::KVRT_DEVICE_FEATURE_*` bit) is set.
    pub fn has_feature(&self, feature: u32) -> bool {
        self.features & feature == feature
    }
}

/// Lists the Vulkan devices kvrt can use (`kvrt_enumerate_devices`).
///
/// ```no_run
/// for d in kvrt::enumerate_devices()? {
///     println!("{}: {}", d.index, d.name);
/// }
/// # Ok::<(), kvrt::Error>(())
/// ```
pub fn enumerate_devices() -> Result<Vec<DeviceInfo>> {
    loop {
        let mut count = 0u32;
        // SAFETY: NULL infos queries the count into a valid u32.
        check(unsafe { sys::kvrt_enumerate_devices(ptr::null_mut(), &mut count) })?;
        let mut infos = vec![sys::KVRT_DEVICE_INFO_INIT; count as usize];
        let mut filled = count;
        // SAFETY: `infos` has `filled` entries, each with `type` set.
        let r = unsafe { sys::kvrt_enumerate_devices(infos.as_mut_ptr(), &mut filled) };
        if r == sys::KVRT_ERROR_INVALID_ARGUMENT && filled == count {
            continue; // a device appeared between the two calls
        }
        check(r)?;
        infos.truncate(filled as usize);
        return Ok(infos.iter().map(DeviceInfo::from_raw).collect());
    }
}

/// Counters of a context (`kvrt_context_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ContextStats {
    /// Validation-layer errors seen so far.
    pub validation_errors: u64,
    /// Validation-layer warnings seen so far.
    pub validation_warnings: u64,
    /// Device memory held by kvrt now, bytes.
    pub device_bytes: u64,
    /// Most device memory held at once, bytes.
    pub peak_device_bytes: u64,
    /// Queue submissions made so far.
    pub submissions: u64,
}

type LogFn = dyn Fn(LogLevel, &str) + Send + Sync + 'static;

/// Receives the library's log messages: `user_data` is the `Box<LogFn>` the
/// context holds. No panic crosses into C: it is caught and dropped.
unsafe extern "C" fn log_trampoline(
    user_data: *mut c_void,
    level: sys::kvrt_log_level,
    message: *const c_char,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if user_data.is_null() || message.is_null() {
            return;
        }
        // SAFETY: user_data is the pointer to the Box<LogFn> the context owns,
        // alive until after kvrt_context_destroy returns; the message is valid
        // during the call.
        let f = unsafe { &*(user_data as *const Box<LogFn>) };
        let text = unsafe { CStr::from_ptr(message) }.to_string_lossy();
        f(LogLevel::from_raw(level), &text);
    }));
}

/// Options of a new context (`kvrt_context_desc`); [`Default`] gives the
/// values of `KVRT_CONTEXT_DESC_INIT`.
///
/// ```no_run
/// let ctx = kvrt::ContextBuilder::new()
///     .validation(true)
///     .log_callback(kvrt::LogLevel::Warn, |level, msg| eprintln!("kvrt {level:?}: {msg}"))
///     .build()?;
/// # Ok::<(), kvrt::Error>(())
/// ```
#[derive(Default)]
pub struct ContextBuilder {
    flags: u32,
    device: Option<String>,
    log: Option<Box<LogFn>>,
    log_level: LogLevel,
    wait_timeout_ns: u64,
    max_binding_bytes: u64,
    pipeline_cache: Option<Vec<u8>>,
}

impl std::fmt::Debug for ContextBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextBuilder")
            .field("flags", &self.flags)
            .field("device", &self.device)
            .field("log", &self.log.is_some())
            .field("log_level", &self.log_level)
            .field("wait_timeout_ns", &self.wait_timeout_ns)
            .field("max_binding_bytes", &self.max_binding_bytes)
            .field("pipeline_cache", &self.pipeline_cache.as_ref().map(Vec::len))
            .finish()
    }
}

impl ContextBuilder {
    /// The defaults (`KVRT_CONTEXT_DESC_INIT`).
    pub fn new() -> Self {
        let init = sys::KVRT_CONTEXT_DESC_INIT;
        ContextBuilder {
            flags: init.flags,
            device: None,
            log: None,
            log_level: LogLevel::from_raw(init.log_level),
            wait_timeout_ns: init.wait_timeout_ns,
            max_binding_bytes: init.max_binding_bytes,
            pipeline_cache: None,
        }
    }

    fn flag(mut self, bit: u32, on: bool) -> Self {
        if on {
            self.flags |= bit;
        } else {
            self.flags &= !bit;
        }
        self
    }

    /// Enables the Khronos validation layer (`KVRT_CONTEXT_VALIDATION`; also
    /// on when the environment has `KVRT_VALIDATION=1`).
    pub fn validation(self, on: bool) -> Self {
        self.flag(sys::KVRT_CONTEXT_VALIDATION, on)
    }

    /// Never maps device memory (`KVRT_CONTEXT_FORCE_STAGING`).
    pub fn force_staging(self, on: bool) -> Self {
        self.flag(sys::KVRT_CONTEXT_FORCE_STAGING, on)
    }

    /// Uses the portable fallback kernels (`KVRT_CONTEXT_PORTABLE_KERNELS`).
    pub fn portable_kernels(self, on: bool) -> Self {
        self.flag(sys::KVRT_CONTEXT_PORTABLE_KERNELS, on)
    }

    /// Forces the subgroup-shuffle kernels, also on CPU drivers
    /// (`KVRT_CONTEXT_SHUFFLE_KERNELS`): building fails with
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a device without
    /// them, and with both this and [`portable_kernels`](Self::portable_kernels).
    /// `KVRT_KERNELS=portable|shuffle|tiled|auto` in the environment chooses
    /// only when none of these options is set.
    pub fn shuffle_kernels(self, on: bool) -> Self {
        self.flag(sys::KVRT_CONTEXT_SHUFFLE_KERNELS, on)
    }

    /// Runs every attention call with the kernel that loads K/V tiles into
    /// shared memory once per workgroup of query rows
    /// (`KVRT_CONTEXT_TILED_KERNELS`); building fails with it and
    /// [`portable_kernels`](Self::portable_kernels) or
    /// [`shuffle_kernels`](Self::shuffle_kernels).
    pub fn tiled_kernels(self, on: bool) -> Self {
        self.flag(sys::KVRT_CONTEXT_TILED_KERNELS, on)
    }

    /// Picks the device: a decimal index or a case-insensitive substring of
    /// its name. It stands whatever `KVRT_DEVICE` says; without it (or with
    /// ""), `KVRT_DEVICE` in the environment may choose.
    pub fn device(mut self, device: impl Into<String>) -> Self {
        self.device = Some(device.into());
        self
    }

    /// Receives log messages at `level` and above. The callback runs on any
    /// thread that calls into the context (and the driver's threads), also
    /// on several at once, sometimes with kvrt's own locks held: it must not
    /// call into kvrt (that could deadlock). A panic in it is caught and
    /// dropped.
    pub fn log_callback<F>(mut self, level: LogLevel, callback: F) -> Self
    where
        F: Fn(LogLevel, &str) + Send + Sync + 'static,
    {
        self.log = Some(Box::new(callback));
        self.log_level = level;
        self
    }

    /// Limit of the waits the library does on its own; zero means 60 s.
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout_ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        self
    }

    /// Largest storage-buffer binding kvrt uses; 0 = the device's limit.
    pub fn max_binding_bytes(mut self, bytes: u64) -> Self {
        self.max_binding_bytes = bytes;
        self
    }

    /// Pipeline-cache data from [`Context::pipeline_cache`] of an earlier
    /// context (`kvrt_pipeline_cache_desc`).
    pub fn pipeline_cache(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.pipeline_cache = Some(data.into());
        self
    }

    /// Creates the context (`kvrt_context_create`).
    pub fn build(self) -> Result<Context> {
        let device = self.device.as_deref().map(cstring).transpose()?;
        let log = self.log.map(Box::new);
        let mut pc = sys::KVRT_PIPELINE_CACHE_DESC_INIT;
        let mut desc = sys::KVRT_CONTEXT_DESC_INIT;
        if let Some(data) = &self.pipeline_cache {
            pc.data = data.as_ptr().cast();
            pc.size = data.len() as u64;
            desc.next = (&pc as *const sys::kvrt_pipeline_cache_desc).cast();
        }
        desc.flags = self.flags;
        desc.device = device.as_ref().map_or(ptr::null(), |d| d.as_ptr());
        if let Some(log) = &log {
            desc.log_callback = Some(log_trampoline);
            desc.log_user_data = (&**log as *const Box<LogFn>).cast_mut().cast();
        }
        desc.log_level = self.log_level.raw();
        desc.wait_timeout_ns = self.wait_timeout_ns;
        desc.max_binding_bytes = self.max_binding_bytes;
        let mut raw = ptr::null_mut();
        // SAFETY: desc and its chain live through the call; the log closure
        // lives in the returned context until after kvrt_context_destroy.
        check(unsafe { sys::kvrt_context_create(&desc, &mut raw) })?;
        Ok(Context {
            inner: Arc::new(ContextInner { raw, _log: log }),
        })
    }
}

/// Owner of a `kvrt_context`: destroyed when the [`Context`] and every
/// object created from it are gone.
pub(crate) struct ContextInner {
    pub(crate) raw: sys::kvrt_context,
    /// The log closure; dropped after the context (fields drop after `drop`).
    _log: Option<Box<Box<LogFn>>>,
}

// SAFETY: kvrt.h "Threading": objects are externally synchronized per handle
// and not tied to a thread, so the context may be destroyed on any thread.
unsafe impl Send for ContextInner {}
// SAFETY: kvrt.h "Threading": "The context handle: the functions that create
// objects from it or read it are Safe, with one another and with calls on its
// objects" (every method of Context is one of them), and
// "kvrt_context_destroy needs every other call on the context and on its
// objects to have returned", which holds when the last Arc is dropped: every
// object holds one. The log closure is Send + Sync.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: no other reference exists (last Arc), so no call on the
        // context or its objects runs; destroy never fails or panics.
        unsafe { sys::kvrt_context_destroy(self.raw) };
    }
}

/// A kvrt context: a Vulkan device with one compute queue, and the parent of
/// every buffer, stream, cache and memory.
///
/// Cloning is cheap and shares the context. Every object created from it
/// keeps it alive, so the context is destroyed only after all of them.
/// `Context` is `Send` and `Sync`: the calls it offers are the header's
/// "Safe" ones.
///
/// ```no_run
/// let ctx = kvrt::Context::new()?;
/// println!("{}", ctx.device_info()?.name);
/// # Ok::<(), kvrt::Error>(())
/// ```
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("raw", &self.inner.raw).finish()
    }
}

impl Context {
    /// A context on the default device with default options.
    pub fn new() -> Result<Self> {
        ContextBuilder::new().build()
    }

    /// Options for a new context.
    pub fn builder() -> ContextBuilder {
        ContextBuilder::new()
    }

    /// The raw handle, for calls through `kvrt_sys`. It stays valid while
    /// this context lives.
    pub fn as_raw(&self) -> sys::kvrt_context {
        self.inner.raw
    }

    /// Describes the context's device (`kvrt_context_get_device_info`).
    pub fn device_info(&self) -> Result<DeviceInfo> {
        let mut info = sys::KVRT_DEVICE_INFO_INIT;
        // SAFETY: Safe; `info` has its type set.
        check(unsafe { sys::kvrt_context_get_device_info(self.inner.raw, &mut info) })?;
        Ok(DeviceInfo::from_raw(&info))
    }

    /// Reads the context's counters (`kvrt_context_get_stats`).
    pub fn stats(&self) -> Result<ContextStats> {
        let mut s = sys::KVRT_CONTEXT_STATS_INIT;
        // SAFETY: Safe; `s` has its type set.
        check(unsafe { sys::kvrt_context_get_stats(self.inner.raw, &mut s) })?;
        Ok(ContextStats {
            validation_errors: s.validation_errors,
            validation_warnings: s.validation_warnings,
            device_bytes: s.device_bytes,
            peak_device_bytes: s.peak_device_bytes,
            submissions: s.submissions,
        })
    }

    /// Everything the device compiled so far, to hand to
    /// [`ContextBuilder::pipeline_cache`] at the next start
    /// (`kvrt_context_get_pipeline_cache`).
    pub fn pipeline_cache(&self) -> Result<Vec<u8>> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut size = 0u64;
            // SAFETY: Safe; NULL data queries the size.
            check(unsafe {
                sys::kvrt_context_get_pipeline_cache(self.inner.raw, ptr::null_mut(), &mut size)
            })?;
            let len = usize::try_from(size).map_err(|_| Error::invalid("pipeline cache too large"))?;
            let mut data = vec![0u8; len];
            let mut written = size;
            // SAFETY: `data` holds `written` bytes.
            let r = unsafe {
                sys::kvrt_context_get_pipeline_cache(self.inner.raw, data.as_mut_ptr().cast(), &mut written)
            };
            if r == sys::KVRT_ERROR_INVALID_ARGUMENT && tries < 8 {
                continue; // other threads compiled kernels meanwhile
            }
            check(r)?;
            data.truncate(written as usize);
            return Ok(data);
        }
    }

    /// What kvrt picked for this device: one `name value` line per choice
    /// (attention kernel variant, workgroups, lane groups, tiles, splits,
    /// the device profile in force), as `kvrt_context_get_tuning` gives it.
    pub fn tuning(&self) -> Result<String> {
        let mut size = 0u64;
        // SAFETY: Safe; NULL text queries the size.
        check(unsafe { sys::kvrt_context_get_tuning(self.inner.raw, ptr::null_mut(), &mut size) })?;
        let len = usize::try_from(size).map_err(|_| Error::invalid("tuning text too large"))?;
        let mut text = vec![0u8; len];
        // SAFETY: `text` holds `size` bytes.
        check(unsafe { sys::kvrt_context_get_tuning(self.inner.raw, text.as_mut_ptr().cast(), &mut size) })?;
        text.truncate(len.saturating_sub(1)); // the NUL
        String::from_utf8(text).map_err(|_| Error::invalid("tuning text is not UTF-8"))
    }
}

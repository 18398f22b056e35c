//! Element types, enums and small shared helpers.

use std::ffi::{CStr, CString};

use kvrt_sys as sys;

use crate::error::{check, Error, Result};

/// An element type: of a cache's stored K and V, of data given to kvrt, of
/// results, and of the fixed memory's state (`kvrt_type`).
///
/// ```
/// use kvrt::ElementType;
/// assert_eq!(ElementType::Q8_0.name(), "q8_0");
/// assert_eq!(ElementType::Q8_0.block_size(), 32);
/// assert_eq!(ElementType::Q8_0.block_bytes(), 34);
/// assert_eq!(ElementType::Q8_0.row_bytes(64), Some(68));
/// assert_eq!(ElementType::from_name("F16").unwrap(), ElementType::F16);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ElementType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16 (given to this crate as `u16` bit patterns).
    F16,
    /// Blocks of 32 values with an f16 scale and 32 int8 codes (GGML's Q8_0).
    Q8_0,
    /// Blocks of 32 values with an f16 scale and 4-bit codes (GGML's Q4_0).
    Q4_0,
    /// Static-scale unsigned 8-bit codes.
    U8Static,
    /// Static-scale unsigned 16-bit codes.
    U16Static,
}

impl ElementType {
    /// The `kvrt_type` value.
    pub fn raw(self) -> sys::kvrt_type {
        match self {
            ElementType::F32 => sys::KVRT_TYPE_F32,
            ElementType::F16 => sys::KVRT_TYPE_F16,
            ElementType::Q8_0 => sys::KVRT_TYPE_Q8_0,
            ElementType::Q4_0 => sys::KVRT_TYPE_Q4_0,
            ElementType::U8Static => sys::KVRT_TYPE_U8_STATIC,
            ElementType::U16Static => sys::KVRT_TYPE_U16_STATIC,
        }
    }

    /// The type of a `kvrt_type` value; `None` for undefined or unknown values.
    pub fn from_raw(raw: sys::kvrt_type) -> Option<Self> {
        Some(match raw {
            sys::KVRT_TYPE_F32 => ElementType::F32,
            sys::KVRT_TYPE_F16 => ElementType::F16,
            sys::KVRT_TYPE_Q8_0 => ElementType::Q8_0,
            sys::KVRT_TYPE_Q4_0 => ElementType::Q4_0,
            sys::KVRT_TYPE_U8_STATIC => ElementType::U8Static,
            sys::KVRT_TYPE_U16_STATIC => ElementType::U16Static,
            _ => return None,
        })
    }

    /// The lowercase name the library gives the type (`kvrt_type_name`).
    pub fn name(self) -> &'static str {
        // SAFETY: kvrt_type_name is Safe and returns static storage or NULL.
        let p = unsafe { sys::kvrt_type_name(self.raw()) };
        if p.is_null() {
            return "";
        }
        // SAFETY: a non-NULL result is a static NUL-terminated ASCII string.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("")
    }

    /// The type named `name`, case-insensitive (`kvrt_type_from_name`).
    pub fn from_name(name: &str) -> Result<Self> {
        let c = cstring(name)?;
        let mut raw = sys::KVRT_TYPE_UNDEFINED;
        // SAFETY: both pointers are valid for the call.
        check(unsafe { sys::kvrt_type_from_name(c.as_ptr(), &mut raw) })?;
        ElementType::from_raw(raw)
            .ok_or_else(|| Error::invalid(format!("unknown type value {raw} for \"{name}\"")))
    }

    /// Values per block: 1 for F32, F16 and the static-scale types, 32 for Q8_0 and Q4_0.
    pub fn block_size(self) -> u32 {
        // SAFETY: Safe, pure function.
        unsafe { sys::kvrt_type_block_size(self.raw()) }
    }

    /// Bytes per block (`kvrt_type_block_bytes`).
    pub fn block_bytes(self) -> u32 {
        // SAFETY: Safe, pure function.
        unsafe { sys::kvrt_type_block_bytes(self.raw()) }
    }

    /// Bytes of a row of `n` values, or `None` when `n` is not a multiple of
    /// the block size.
    pub fn row_bytes(self, n: u32) -> Option<u64> {
        let bs = self.block_size();
        if bs == 0 || n % bs != 0 {
            return None;
        }
        Some(u64::from(n / bs) * u64::from(self.block_bytes()))
    }
}

impl std::str::FromStr for ElementType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        ElementType::from_name(s)
    }
}

impl std::fmt::Display for ElementType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The level of a log message, or the lowest level delivered (`kvrt_log_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[non_exhaustive]
pub enum LogLevel {
    /// As a threshold: the library's default, [`LogLevel::Warn`].
    #[default]
    Default,
    /// Debugging detail.
    Debug,
    /// Information.
    Info,
    /// Warnings.
    Warn,
    /// Errors.
    Error,
    /// As a threshold: deliver nothing.
    None,
}

impl LogLevel {
    pub(crate) fn raw(self) -> sys::kvrt_log_level {
        match self {
            LogLevel::Default => sys::KVRT_LOG_LEVEL_DEFAULT,
            LogLevel::Debug => sys::KVRT_LOG_LEVEL_DEBUG,
            LogLevel::Info => sys::KVRT_LOG_LEVEL_INFO,
            LogLevel::Warn => sys::KVRT_LOG_LEVEL_WARN,
            LogLevel::Error => sys::KVRT_LOG_LEVEL_ERROR,
            LogLevel::None => sys::KVRT_LOG_LEVEL_NONE,
        }
    }

    pub(crate) fn from_raw(raw: sys::kvrt_log_level) -> Self {
        match raw {
            sys::KVRT_LOG_LEVEL_DEBUG => LogLevel::Debug,
            sys::KVRT_LOG_LEVEL_INFO => LogLevel::Info,
            sys::KVRT_LOG_LEVEL_WARN => LogLevel::Warn,
            sys::KVRT_LOG_LEVEL_ERROR => LogLevel::Error,
            sys::KVRT_LOG_LEVEL_NONE => LogLevel::None,
            _ => LogLevel::Default,
        }
    }
}

/// Which array of a cache (`kvrt_kv_array`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvArray {
    /// The keys.
    K,
    /// The values.
    V,
}

impl KvArray {
    pub(crate) fn raw(self) -> sys::kvrt_kv_array {
        match self {
            KvArray::K => sys::KVRT_KV_ARRAY_K,
            KvArray::V => sys::KVRT_KV_ARRAY_V,
        }
    }
}

/// The layers a call covers: one layer, or all of them (the C API's `-1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layers {
    /// Every layer; the data then holds one block per layer, `layer_stride` apart.
    All,
    /// One layer.
    One(u32),
}

impl Layers {
    pub(crate) fn raw(self) -> Result<i32> {
        match self {
            Layers::All => Ok(-1),
            Layers::One(l) => i32::try_from(l).map_err(|_| Error::invalid(format!("layer {l} out of range"))),
        }
    }

    /// How many layers of data the call reads, for a model of `n_layers`.
    pub(crate) fn count(self, n_layers: u32) -> u32 {
        match self {
            Layers::All => n_layers,
            Layers::One(_) => 1,
        }
    }
}

impl From<u32> for Layers {
    fn from(layer: u32) -> Self {
        Layers::One(layer)
    }
}

/// Plain numeric element types whose slices can be handed to kvrt as bytes.
///
/// Implemented for `u8`, `i8`, `u16`, `i16`, `u32`, `i32`, `f32`, `u64`,
/// `i64` and `f64`: types with no padding and no invalid bit patterns.
pub trait Plain: Copy + sealed::Sealed + 'static {}

mod sealed {
    pub trait Sealed {}
}

macro_rules! plain {
    ($($t:ty),*) => { $(impl sealed::Sealed for $t {} impl Plain for $t {})* };
}
plain!(u8, i8, u16, i16, u32, i32, f32, u64, i64, f64);

/// The bytes of a slice of plain values.
pub(crate) fn as_bytes<T: Plain>(data: &[T]) -> &[u8] {
    // SAFETY: T is a primitive number type with no padding; every byte of the
    // slice is initialized and the length is its size in bytes.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

/// The bytes of a mutable slice of plain values.
pub(crate) fn as_bytes_mut<T: Plain>(data: &mut [T]) -> &mut [u8] {
    // SAFETY: as in as_bytes; every bit pattern is a valid T, so writing any
    // bytes keeps the slice valid.
    unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

/// A C string of `s`, or InvalidArgument when it holds a NUL byte.
pub(crate) fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::invalid(format!("string {s:?} holds a NUL byte")))
}

/// The optional label as a C string.
pub(crate) fn opt_cstring(s: Option<&str>) -> Result<Option<CString>> {
    s.map(cstring).transpose()
}

pub(crate) fn opt_ptr(s: &Option<CString>) -> *const std::os::raw::c_char {
    s.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())
}

/// A `u32` of a length, or InvalidArgument when it does not fit.
pub(crate) fn len_u32(n: usize, what: &str) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::invalid(format!("{what}: {n} entries is too many")))
}

/// A C `char` array as a String.
pub(crate) fn fixed_str(chars: &[std::os::raw::c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

//! The error type of every fallible call.

use std::ffi::CStr;
use std::fmt;

use kvrt_sys as sys;

/// A failed kvrt call: one variant per `kvrt_result` error code, each carrying
/// the detail message the library gave for it (`kvrt_last_error_message()`,
/// read right after the failing call on the same thread).
///
/// Errors found by this crate before calling the library (a slice too short
/// for the geometry, a string with a NUL byte) are
/// [`Error::InvalidArgument`], as the library would report them.
///
/// ```
/// let err = kvrt::ElementType::from_name("q9_9").unwrap_err();
/// assert!(matches!(err, kvrt::Error::InvalidArgument(_)));
/// assert_eq!(err.code(), -1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// `KVRT_ERROR_INVALID_ARGUMENT`: an argument is out of range or inconsistent.
    InvalidArgument(String),
    /// `KVRT_ERROR_INVALID_HANDLE`: a handle is destroyed or of another kind.
    InvalidHandle(String),
    /// `KVRT_ERROR_OUT_OF_HOST_MEMORY`: a host allocation failed.
    OutOfHostMemory(String),
    /// `KVRT_ERROR_OUT_OF_DEVICE_MEMORY`: a device allocation failed.
    OutOfDeviceMemory(String),
    /// `KVRT_ERROR_DEVICE_LOST`: the device was lost; drop the context.
    DeviceLost(String),
    /// `KVRT_ERROR_TIMEOUT`: a wait ran past its timeout; the work may still complete.
    Timeout(String),
    /// `KVRT_ERROR_CACHE_FULL`: the cache has no room; nothing was changed.
    CacheFull(String),
    /// `KVRT_ERROR_UNSUPPORTED`: the device, driver or build lacks something.
    Unsupported(String),
    /// `KVRT_ERROR_CORRUPT_STATE`: saved state is malformed.
    CorruptState(String),
    /// `KVRT_ERROR_IO`: a file could not be read or written.
    Io(String),
    /// `KVRT_ERROR_INVALID_STATE`: the object's state does not allow the call.
    InvalidState(String),
    /// `KVRT_ERROR_INTERNAL`: an unexpected internal failure.
    Internal(String),
    /// A result code this crate does not know (from a newer library).
    Unknown {
        /// The raw `kvrt_result` value.
        code: i32,
        /// The detail message.
        message: String,
    },
}

impl Error {
    /// Builds the error of result `code` with `message`.
    pub fn from_code(code: i32, message: impl Into<String>) -> Self {
        let m = message.into();
        match code {
            sys::KVRT_ERROR_INVALID_ARGUMENT => Error::InvalidArgument(m),
            sys::KVRT_ERROR_INVALID_HANDLE => Error::InvalidHandle(m),
            sys::KVRT_ERROR_OUT_OF_HOST_MEMORY => Error::OutOfHostMemory(m),
            sys::KVRT_ERROR_OUT_OF_DEVICE_MEMORY => Error::OutOfDeviceMemory(m),
            sys::KVRT_ERROR_DEVICE_LOST => Error::DeviceLost(m),
            sys::KVRT_ERROR_TIMEOUT => Error::Timeout(m),
            sys::KVRT_ERROR_CACHE_FULL => Error::CacheFull(m),
            sys::KVRT_ERROR_UNSUPPORTED => Error::Unsupported(m),
            sys::KVRT_ERROR_CORRUPT_STATE => Error::CorruptState(m),
            sys::KVRT_ERROR_IO => Error::Io(m),
            sys::KVRT_ERROR_INVALID_STATE => Error::InvalidState(m),
            sys::KVRT_ERROR_INTERNAL => Error::Internal(m),
            code => Error::Unknown { code, message: m },
        }
    }

    /// The `kvrt_result` value of the error (negative).
    pub fn code(&self) -> i32 {
        match self {
            Error::InvalidArgument(_) => sys::KVRT_ERROR_INVALID_ARGUMENT,
            Error::InvalidHandle(_) => sys::KVRT_ERROR_INVALID_HANDLE,
            Error::OutOfHostMemory(_) => sys::KVRT_ERROR_OUT_OF_HOST_MEMORY,
            Error::OutOfDeviceMemory(_) => sys::KVRT_ERROR_OUT_OF_DEVICE_MEMORY,
            Error::DeviceLost(_) => sys::KVRT_ERROR_DEVICE_LOST,
            Error::Timeout(_) => sys::KVRT_ERROR_TIMEOUT,
            Error::CacheFull(_) => sys::KVRT_ERROR_CACHE_FULL,
            Error::Unsupported(_) => sys::KVRT_ERROR_UNSUPPORTED,
            Error::CorruptState(_) => sys::KVRT_ERROR_CORRUPT_STATE,
            Error::Io(_) => sys::KVRT_ERROR_IO,
            Error::InvalidState(_) => sys::KVRT_ERROR_INVALID_STATE,
            Error::Internal(_) => sys::KVRT_ERROR_INTERNAL,
            Error::Unknown { code, .. } => *code,
        }
    }

    /// The detail message: what was wrong.
    pub fn message(&self) -> &str {
        match self {
            Error::InvalidArgument(m)
            | Error::InvalidHandle(m)
            | Error::OutOfHostMemory(m)
            | Error::OutOfDeviceMemory(m)
            | Error::DeviceLost(m)
            | Error::Timeout(m)
            | Error::CacheFull(m)
            | Error::Unsupported(m)
            | Error::CorruptState(m)
            | Error::Io(m)
            | Error::InvalidState(m)
            | Error::Internal(m) => m,
            Error::Unknown { message, .. } => message,
        }
    }

    /// The error of a call that just returned `code`, with the calling
    /// thread's `kvrt_last_error_message()`.
    pub(crate) fn last(code: sys::kvrt_result) -> Self {
        // SAFETY: kvrt_last_error_message is Safe from any thread and returns
        // a NUL-terminated string valid until the next kvrt call on this
        // thread; it is copied at once.
        let msg = unsafe {
            let p = sys::kvrt_last_error_message();
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Error::from_code(code, msg)
    }

    /// An invalid argument found by this crate before calling the library.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidArgument(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = crate::result_name(self.code());
        if self.message().is_empty() {
            f.write_str(&name)
        } else {
            write!(f, "{name}: {}", self.message())
        }
    }
}

impl std::error::Error for Error {}

/// The result of a kvrt call.
pub type Result<T> = std::result::Result<T, Error>;

/// Turns a `kvrt_result` into `Ok(())` or the error with its message.
pub(crate) fn check(code: sys::kvrt_result) -> Result<()> {
    if code == sys::KVRT_SUCCESS {
        Ok(())
    } else {
        Err(Error::last(code))
    }
}

//! Saving and loading a cache's state, to memory or to a file, and host swap
//! of sequences (`kvrt_state.h`).

use std::ffi::CString;
use std::path::Path;
use std::ptr;

use kvrt_sys as sys;

use crate::cache::Cache;
use crate::error::{check, Error, Result};

/// The C sequence argument of a state call: `None` (the whole cache) is -1.
/// A negative sequence is refused here, so that it cannot stand for the
/// whole cache by mistake.
fn state_seq(seq: Option<i32>) -> Result<i32> {
    match seq {
        None => Ok(-1),
        Some(s) if s < 0 => Err(Error::invalid(format!(
            "sequence {s} is negative (None selects the whole cache)"
        ))),
        Some(s) => Ok(s),
    }
}

/// A C string of `path`: its bytes on Unix, its UTF-8 text elsewhere.
/// InvalidArgument when it holds a NUL byte (or, off Unix, is not UTF-8).
fn path_cstring(path: &Path) -> Result<CString> {
    #[cfg(unix)]
    let bytes = {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    };
    #[cfg(not(unix))]
    let bytes = path
        .to_str()
        .ok_or_else(|| Error::invalid(format!("path {} is not valid UTF-8", path.display())))?
        .as_bytes()
        .to_vec();
    CString::new(bytes).map_err(|_| Error::invalid(format!("path {:?} holds a NUL byte", path)))
}

/// A zeroed byte vector of `size` bytes, or OutOfHostMemory when the host
/// cannot hold it.
fn byte_vec(size: u64) -> Result<Vec<u8>> {
    let too_big = || Error::OutOfHostMemory(format!("a state of {size} bytes does not fit host memory"));
    let n = usize::try_from(size).map_err(|_| too_big())?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| too_big())?;
    v.resize(n, 0);
    Ok(v)
}

/// Calls a save function of `kvrt_state.h` (`kvrt_cache_state_save` or
/// `kvrt_cache_seq_swap_out`) twice: for the size, then into a vector of
/// that size.
fn save_with(
    cache: &mut Cache,
    seq: i32,
    f: unsafe extern "C" fn(sys::kvrt_cache, i32, *mut std::ffi::c_void, *mut u64) -> sys::kvrt_result,
) -> Result<Vec<u8>> {
    let mut size = 0u64;
    // SAFETY: Unsafe on the cache (&mut); with NULL data only `size` is
    // written.
    check(unsafe { f(cache.as_raw(), seq, ptr::null_mut(), &mut size) })?;
    let mut data = byte_vec(size)?;
    // SAFETY: Unsafe on the cache (&mut); `data` holds `size` bytes, the
    // most the call writes.
    check(unsafe { f(cache.as_raw(), seq, data.as_mut_ptr().cast(), &mut size) })?;
    data.truncate(usize::try_from(size).unwrap_or(usize::MAX));
    Ok(data)
}

/// State and host swap (`kvrt_state.h`).
///
/// A state is the cells of a whole cache, or of one sequence, as bytes: a
/// versioned, little-endian format with a checksum (docs/state-format.md of
/// the library's source distribution). Saving applies pending RoPE shifts
/// first. Loading is strict (malformed bytes fail with
/// [`Error::CorruptState`], a newer format version with
/// [`Error::Unsupported`]) and all or nothing: a failed load leaves the
/// cache as it was. A state loads into a cache of the same layers, KV heads,
/// head dims and RoPE mode (deferred or not), whatever its K/V types, layout
/// and capacity; rows of another type are converted as [`Cache::store`]
/// quantizes f32 values.
///
/// Every call here fails with [`Error::Unsupported`] on a cache with a
/// window group ([`CacheDesc::window_layout`](crate::CacheDesc::window_layout)).
///
/// A `seq` of `None` selects the whole cache (-1 in C); a negative
/// `Some(seq)` is refused with [`Error::InvalidArgument`] before calling
/// the library.
///
/// ```no_run
/// # fn main() -> kvrt::Result<()> {
/// use kvrt::{Batch, CacheDesc, Layers, TensorRef};
/// let ctx = kvrt::Context::new()?;
/// let desc = CacheDesc::new(1, 1, 1, 8, 64);
/// let mut cache = ctx.create_cache(&desc)?;
/// let positions = [0, 1, 2];
/// let rows = vec![0.5f32; 3 * 8];
/// let (k, v) = (TensorRef::host_f32(&rows), TensorRef::host_f32(&rows));
/// cache.store(&Batch::for_seq(0, &positions), Layers::One(0), &k, &v)?;
///
/// // Sequence 0 as bytes, loaded into sequence 1 of another cache.
/// let state = cache.state_save(Some(0))?;
/// let mut other = ctx.create_cache(&desc)?;
/// other.state_load(Some(1), &state)?;
/// assert_eq!(other.seq_pos_max(1)?, Some(2));
///
/// // Host swap: sequence 0 leaves the cache and comes back.
/// let swapped = cache.seq_swap_out(0)?;
/// assert_eq!(cache.seq_pos_max(0)?, None);
/// cache.seq_swap_in(0, &swapped)?;
/// assert_eq!(cache.seq_pos_max(0)?, Some(2));
/// # Ok(()) }
/// ```
impl Cache {
    /// The size in bytes of the state of `seq`, or of the whole cache with
    /// `None` (`kvrt_cache_state_save` with NULL data). Changes nothing.
    ///
    /// Fails with [`Error::InvalidArgument`] for a sequence out of range.
    pub fn state_size(&self, seq: Option<i32>) -> Result<u64> {
        let seq = state_seq(seq)?;
        let mut size = 0u64;
        // SAFETY: Unsafe on the cache (not Sync); with NULL data the call
        // writes only `size` and changes nothing.
        check(unsafe { sys::kvrt_cache_state_save(self.as_raw(), seq, ptr::null_mut(), &mut size) })?;
        Ok(size)
    }

    /// Saves the state of `seq`, or of the whole cache with `None`, and
    /// returns its bytes (`kvrt_cache_state_save`). Applies pending shifts
    /// first ([`Cache::apply_shifts`]); synchronous.
    ///
    /// Fails with [`Error::InvalidArgument`] for a sequence out of range;
    /// [`Error::OutOfHostMemory`] when the host cannot hold the state; and
    /// the device errors of [`Cache::read_raw`].
    pub fn state_save(&mut self, seq: Option<i32>) -> Result<Vec<u8>> {
        let seq = state_seq(seq)?;
        save_with(self, seq, sys::kvrt_cache_state_save)
    }

    /// Loads a state saved by [`Cache::state_save`] or
    /// [`Cache::seq_swap_out`] (`kvrt_cache_state_load`), synchronously and
    /// all or nothing.
    ///
    /// With `None`, `data` must be a whole-cache state, which replaces every
    /// cell of the cache (into the saved cells when the cache has them, else
    /// the lowest cells in the saved order). With `Some(seq)`, it must be a
    /// sequence state, which replaces the tokens of `seq`, whatever sequence
    /// it was saved from (into the saved cells when they are all free, else
    /// into the lowest cells that were free before the call, and only when
    /// those are too few also into the sequence's own). Pending shifts of
    /// the cells that stay are kept. The paged layout appends each loaded
    /// sequence in rising position order into blocks of its own, never
    /// registered for prefix sharing; a whole-cache load clears the registry
    /// and keeps the state's sharing of whole blocks between sequences.
    ///
    /// Fails with [`Error::InvalidArgument`] for a sequence out of range, a
    /// sequence state with `None` or a whole-cache state with `Some`, a
    /// state of another geometry or RoPE mode, or sequence ids the cache
    /// does not have; [`Error::CorruptState`] for malformed bytes (truncated
    /// or trailing bytes, a bad magic, unknown fields, a checksum mismatch);
    /// [`Error::Unsupported`] for a newer format version;
    /// [`Error::CacheFull`] when the cells do not fit; and the device errors
    /// of [`Cache::store`].
    pub fn state_load(&mut self, seq: Option<i32>, data: &[u8]) -> Result<()> {
        let seq = state_seq(seq)?;
        // SAFETY: Unsafe on the cache (&mut); `data` holds data.len() bytes.
        check(unsafe {
            sys::kvrt_cache_state_load(self.as_raw(), seq, data.as_ptr().cast(), data.len() as u64)
        })
    }

    /// Saves the state of `seq`, or of the whole cache with `None`, into the
    /// file `path` (`kvrt_cache_state_save_file`), atomically: the bytes go
    /// to a temporary file beside it, flushed to the disk and renamed over
    /// `path`, so a crash or a failure leaves either the old file or the new
    /// one (a failure removes the temporary file). On Unix the path's bytes
    /// are passed as they are; elsewhere it must be UTF-8.
    ///
    /// Fails as [`Cache::state_save`] does; with [`Error::InvalidArgument`]
    /// for an empty path, or one holding a NUL byte (found before calling
    /// the library); and with [`Error::Io`] when the file cannot be
    /// written.
    pub fn state_save_file(&mut self, seq: Option<i32>, path: impl AsRef<Path>) -> Result<()> {
        let seq = state_seq(seq)?;
        let path = path_cstring(path.as_ref())?;
        // SAFETY: Unsafe on the cache (&mut); `path` is NUL-terminated and
        // lives through the call.
        check(unsafe { sys::kvrt_cache_state_save_file(self.as_raw(), seq, path.as_ptr()) })
    }

    /// Loads the state in the file `path` as [`Cache::state_load`] loads
    /// bytes (`kvrt_cache_state_load_file`).
    ///
    /// Fails as [`Cache::state_load`] does; with [`Error::InvalidArgument`]
    /// for an empty path, or one holding a NUL byte (found before calling
    /// the library); and with [`Error::Io`] when the file cannot be read (it
    /// is missing or not a regular file).
    pub fn state_load_file(&mut self, seq: Option<i32>, path: impl AsRef<Path>) -> Result<()> {
        let seq = state_seq(seq)?;
        let path = path_cstring(path.as_ref())?;
        // SAFETY: Unsafe on the cache (&mut); `path` is NUL-terminated and
        // lives through the call.
        check(unsafe { sys::kvrt_cache_state_load_file(self.as_raw(), seq, path.as_ptr()) })
    }

    /// Moves sequence `seq` out of the cache into host memory
    /// (`kvrt_cache_seq_swap_out`): saves it as a sequence state
    /// ([`Cache::state_save`]), then removes it ([`Cache::seq_rm`] of all
    /// its positions), and returns the state.
    ///
    /// The cell and paged layouts allocate their rows up front, so swapping
    /// out returns no device memory: it frees the sequence's cells (or
    /// blocks) for other sequences. [`Cache::seq_swap_in`] brings it back;
    /// in the cell layout, when its cells are still free it returns to them
    /// and attention gives the same outputs, bit for bit, as before the
    /// swap; the paged layout appends it into blocks the pool chooses (the
    /// same rows, attended in another cell order).
    ///
    /// Fails as [`Cache::state_save`] does, and with
    /// [`Error::InvalidArgument`] for a negative `seq`; on failure the
    /// sequence stays in the cache.
    pub fn seq_swap_out(&mut self, seq: i32) -> Result<Vec<u8>> {
        save_with(self, seq, sys::kvrt_cache_seq_swap_out)
    }

    /// [`Cache::seq_swap_out`] into the file `path`, written atomically as
    /// [`Cache::state_save_file`] writes (`kvrt_cache_seq_swap_out_file`).
    ///
    /// Fails as both do; on failure the sequence stays in the cache.
    pub fn seq_swap_out_file(&mut self, seq: i32, path: impl AsRef<Path>) -> Result<()> {
        let path = path_cstring(path.as_ref())?;
        // SAFETY: Unsafe on the cache (&mut); `path` is NUL-terminated and
        // lives through the call.
        check(unsafe { sys::kvrt_cache_seq_swap_out_file(self.as_raw(), seq, path.as_ptr()) })
    }

    /// Brings a swapped-out sequence back into sequence `seq`, which must
    /// hold no token (`kvrt_cache_seq_swap_in`): [`Cache::state_load`] of
    /// `Some(seq)` otherwise.
    ///
    /// Fails as [`Cache::state_load`] does, and with
    /// [`Error::InvalidArgument`] for a negative `seq` or a sequence that
    /// holds tokens.
    pub fn seq_swap_in(&mut self, seq: i32, data: &[u8]) -> Result<()> {
        // SAFETY: Unsafe on the cache (&mut); `data` holds data.len() bytes.
        check(unsafe {
            sys::kvrt_cache_seq_swap_in(self.as_raw(), seq, data.as_ptr().cast(), data.len() as u64)
        })
    }

    /// [`Cache::seq_swap_in`] from the file `path`
    /// (`kvrt_cache_seq_swap_in_file`).
    ///
    /// Fails as it and [`Cache::state_load_file`] do.
    pub fn seq_swap_in_file(&mut self, seq: i32, path: impl AsRef<Path>) -> Result<()> {
        let path = path_cstring(path.as_ref())?;
        // SAFETY: Unsafe on the cache (&mut); `path` is NUL-terminated and
        // lives through the call.
        check(unsafe { sys::kvrt_cache_seq_swap_in_file(self.as_raw(), seq, path.as_ptr()) })
    }
}

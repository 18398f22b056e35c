//! Device buffers.

use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;

use kvrt_sys as sys;

use crate::context::{Context, ContextInner};
use crate::error::{check, Error, Result};
use crate::types::{as_bytes, as_bytes_mut, opt_cstring, opt_ptr, Plain};

/// Something that names a kvrt buffer: a [`Buffer`] or a [`CacheBuffer`].
///
/// Sealed: only this crate implements it.
pub trait AsBuffer: crate::buffer::private::Sealed {
    /// The raw handle, valid while `self` is borrowed.
    fn raw_buffer(&self) -> sys::kvrt_buffer;
}

pub(crate) mod private {
    pub trait Sealed {}
}

/// Device memory of any size, zeroed at creation (`kvrt_buffer`).
///
/// `Buffer` is `Send` and `Sync`: uploads, downloads and use as an operand
/// may run on any number of threads at once (the order in which they touch
/// its bytes is the application's to arrange, as in Vulkan). It keeps its
/// context alive.
///
/// ```no_run
/// let ctx = kvrt::Context::new()?;
/// let buf = ctx.create_buffer(16)?;
/// buf.upload(0, &[1.0f32, 2.0, 3.0, 4.0])?;
/// let mut back = [0f32; 4];
/// buf.download(0, &mut back)?;
/// assert_eq!(back, [1.0, 2.0, 3.0, 4.0]);
/// # Ok::<(), kvrt::Error>(())
/// ```
pub struct Buffer {
    raw: sys::kvrt_buffer,
    size: u64,
    _ctx: Arc<ContextInner>,
}

// SAFETY: kvrt.h "Threading": objects of one context may be used on
// different threads, and a destroy function needs only the object it
// destroys; Drop owns the buffer.
unsafe impl Send for Buffer {}
// SAFETY: kvrt.h "Threading": "Buffers are only read by kvrt's calls, except
// kvrt_buffer_destroy: any number of threads may pass the same buffer to
// other calls at once"; kvrt_buffer_upload, _download and _get_size are
// "Safe, except against kvrt_buffer_destroy", which only Drop (with sole
// ownership) calls.
unsafe impl Sync for Buffer {}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("raw", &self.raw)
            .field("size", &self.size)
            .finish()
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: sole owner; memory used by submitted work is released by
        // kvrt once that work completes.
        unsafe { sys::kvrt_buffer_destroy(self.raw) };
    }
}

impl private::Sealed for Buffer {}
impl AsBuffer for Buffer {
    fn raw_buffer(&self) -> sys::kvrt_buffer {
        self.raw
    }
}

impl Context {
    /// Creates a zeroed buffer of `size` bytes (`kvrt_buffer_create`).
    pub fn create_buffer(&self, size: u64) -> Result<Buffer> {
        self.create_buffer_labeled(size, None)
    }

    /// Creates a zeroed buffer with a debug name for Vulkan tools.
    pub fn create_buffer_labeled(&self, size: u64, label: Option<&str>) -> Result<Buffer> {
        self.create_buffer_with(size, label, 0)
    }

    /// Creates a zeroed buffer whose memory can be exported as a file
    /// descriptor ([`Buffer::export_memory`]; `KVRT_BUFFER_EXPORTABLE`).
    /// [`Error::Unsupported`] where the device cannot export memory.
    pub fn create_exportable_buffer(&self, size: u64) -> Result<Buffer> {
        self.create_buffer_with(size, None, sys::KVRT_BUFFER_EXPORTABLE)
    }

    fn create_buffer_with(&self, size: u64, label: Option<&str>, flags: sys::kvrt_flags) -> Result<Buffer> {
        let label = opt_cstring(label)?;
        let mut desc = sys::KVRT_BUFFER_DESC_INIT;
        desc.size = size;
        desc.flags = flags;
        desc.label = opt_ptr(&label);
        let mut raw = ptr::null_mut();
        // SAFETY: Safe on the context; desc lives through the call.
        check(unsafe { sys::kvrt_buffer_create(self.inner.raw, &desc, &mut raw) })?;
        Ok(Buffer {
            raw,
            size,
            _ctx: self.inner.clone(),
        })
    }
}

fn check_range(size: u64, offset: u64, len: usize) -> Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::invalid(format!(
            "range [{offset}, {offset} + {len}) is outside the buffer of {size} bytes"
        ))),
    }
}

impl Buffer {
    /// The raw handle, valid while this buffer lives.
    pub fn as_raw(&self) -> sys::kvrt_buffer {
        self.raw
    }

    /// The size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Copies `data` into the buffer at byte `offset`, after submitted work
    /// that uses the buffer (`kvrt_buffer_upload`).
    pub fn upload<T: Plain>(&self, offset: u64, data: &[T]) -> Result<()> {
        let bytes = as_bytes(data);
        check_range(self.size, offset, bytes.len())?;
        // SAFETY: Safe except against destroy (excluded by the borrow); the
        // slice holds `len` bytes.
        check(unsafe { sys::kvrt_buffer_upload(self.raw, offset, bytes.as_ptr().cast(), bytes.len() as u64) })
    }

    /// Copies bytes of the buffer at `offset` into `out`, after submitted
    /// work that uses the buffer (`kvrt_buffer_download`).
    pub fn download<T: Plain>(&self, offset: u64, out: &mut [T]) -> Result<()> {
        download_raw(self.raw, self.size, offset, as_bytes_mut(out))
    }

    /// Exports the memory holding byte `offset` as a file descriptor, so that
    /// another process or processor maps the same bytes
    /// (`kvrt_buffer_export_memory`). The buffer must have been created with
    /// [`Context::create_exportable_buffer`].
    #[cfg(unix)]
    pub fn export_memory(&self, offset: u64, handle_type: MemoryHandleType) -> Result<ExportedMemory> {
        export_memory_raw(self.raw, offset, handle_type)
    }

    /// Downloads `count` values from `offset` into a new vector.
    pub fn download_vec<T: Plain + Default>(&self, offset: u64, count: usize) -> Result<Vec<T>> {
        let mut v = vec![T::default(); count];
        self.download(offset, &mut v)?;
        Ok(v)
    }
}

/// How exported memory is handed over (`kvrt_memory_handle_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemoryHandleType {
    /// A file descriptor of Vulkan's opaque type, imported by another Vulkan
    /// instance on a device with the same device and driver UUIDs
    /// (`KVRT_MEMORY_HANDLE_OPAQUE_FD`).
    OpaqueFd,
    /// A Linux dma-buf, mapped by other processors and drivers such as a DSP
    /// (`KVRT_MEMORY_HANDLE_DMA_BUF`; devices with
    /// VK_EXT_external_memory_dma_buf).
    DmaBuf,
}

/// The memory of an exported buffer (`kvrt_exported_memory`): the
/// allocation holding the byte asked for.
#[cfg(unix)]
#[derive(Debug)]
#[non_exhaustive]
pub struct ExportedMemory {
    /// The allocation's file descriptor, closed when dropped.
    pub fd: std::os::fd::OwnedFd,
    /// The allocation's memory type index (an opaque-fd import uses it).
    pub memory_type_index: u32,
    /// The allocation's size in bytes.
    pub memory_size: u64,
    /// The byte asked for is at this offset in the allocation ...
    pub offset: u64,
    /// ... and this many bytes of the buffer follow it there.
    pub contiguous_bytes: u64,
    /// The exporting device's UUID.
    pub device_uuid: [u8; 16],
    /// The exporting driver's UUID.
    pub driver_uuid: [u8; 16],
}

#[cfg(unix)]
fn export_memory_raw(
    raw: sys::kvrt_buffer,
    offset: u64,
    handle_type: MemoryHandleType,
) -> Result<ExportedMemory> {
    use std::os::fd::FromRawFd;
    let mut e = sys::KVRT_EXPORTED_MEMORY_INIT;
    let t = match handle_type {
        MemoryHandleType::OpaqueFd => sys::KVRT_MEMORY_HANDLE_OPAQUE_FD,
        MemoryHandleType::DmaBuf => sys::KVRT_MEMORY_HANDLE_DMA_BUF,
    };
    // SAFETY: Safe except against destroy (excluded by the caller's borrow);
    // `e` lives through the call.
    check(unsafe { sys::kvrt_buffer_export_memory(raw, offset, t, &mut e) })?;
    Ok(ExportedMemory {
        // SAFETY: on success `fd` is a new descriptor that the caller owns.
        fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(e.fd) },
        memory_type_index: e.memory_type_index,
        memory_size: e.memory_size,
        offset: e.offset,
        contiguous_bytes: e.contiguous_bytes,
        device_uuid: e.device_uuid,
        driver_uuid: e.driver_uuid,
    })
}

fn download_raw(raw: sys::kvrt_buffer, size: u64, offset: u64, bytes: &mut [u8]) -> Result<()> {
    check_range(size, offset, bytes.len())?;
    // SAFETY: Safe except against destroy (excluded by the caller's borrow);
    // the slice holds `len` writable bytes.
    check(unsafe { sys::kvrt_buffer_download(raw, offset, bytes.as_mut_ptr().cast(), bytes.len() as u64) })
}

/// A buffer owned by a cache: the buffer of a static window
/// ([`StaticWindow`](crate::StaticWindow)). It borrows the cache, so it
/// cannot outlive it or be used while the cache changes.
#[derive(Debug, Clone, Copy)]
pub struct CacheBuffer<'c> {
    pub(crate) raw: sys::kvrt_buffer,
    pub(crate) size: u64,
    pub(crate) _cache: PhantomData<&'c crate::Cache>,
}

impl private::Sealed for CacheBuffer<'_> {}
impl AsBuffer for CacheBuffer<'_> {
    fn raw_buffer(&self) -> sys::kvrt_buffer {
        self.raw
    }
}

impl CacheBuffer<'_> {
    /// The raw handle, valid while the cache lives.
    pub fn as_raw(&self) -> sys::kvrt_buffer {
        self.raw
    }

    /// The size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Copies bytes of the buffer at `offset` into `out` (`kvrt_buffer_download`).
    pub fn download<T: Plain>(&self, offset: u64, out: &mut [T]) -> Result<()> {
        download_raw(self.raw, self.size, offset, as_bytes_mut(out))
    }

    /// Exports the memory holding byte `offset` (a window's offset) as a
    /// file descriptor (`kvrt_buffer_export_memory`); the cache must have
    /// been created with [`CacheDesc::exportable`](crate::CacheDesc::exportable).
    #[cfg(unix)]
    pub fn export_memory(&self, offset: u64, handle_type: MemoryHandleType) -> Result<ExportedMemory> {
        export_memory_raw(self.raw, offset, handle_type)
    }
}

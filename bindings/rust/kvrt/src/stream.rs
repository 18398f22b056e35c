//! Streams: recording, submitting and waiting for GPU work.

use std::ffi::{CStr, CString};
use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use kvrt_sys as sys;

use crate::buffer::AsBuffer;
use crate::context::{Context, ContextInner};
use crate::error::{check, Result};
use crate::types::{opt_cstring, opt_ptr};

/// Options of a new stream (`kvrt_stream_desc`); [`Default`] gives
/// `KVRT_STREAM_DESC_INIT`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamDesc {
    /// Record GPU timestamps around every operation (`KVRT_STREAM_TIMESTAMPS`),
    /// read with [`Stream::timings`].
    pub timestamps: bool,
    /// Operations timed per submission; 0 = 256.
    pub max_timings: u32,
    /// Debug name for Vulkan tools.
    pub label: Option<String>,
}

/// The GPU time of one recorded operation (`kvrt_timing`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timing {
    /// Names the operation, e.g. "fill".
    pub label: String,
    /// Nanoseconds between the operation's start and end stamps.
    pub ns: u64,
}

/// A stream (`kvrt_stream`): records operations with [`Stream::begin`],
/// submits them with [`Recording::submit`] and waits with [`Stream::wait`].
///
/// `Stream` is `Send` but not `Sync`: a stream is used by one thread at a
/// time. It keeps its context alive.
///
/// ```no_run
/// let ctx = kvrt::Context::new()?;
/// let buf = ctx.create_buffer(64)?;
/// let mut stream = ctx.create_stream(&kvrt::StreamDesc::default())?;
/// let mut rec = stream.begin()?;
/// rec.fill(&buf, 0, 64, 7)?;
/// rec.submit()?;
/// stream.wait(std::time::Duration::from_secs(10))?;
/// # Ok::<(), kvrt::Error>(())
/// ```
pub struct Stream {
    raw: sys::kvrt_stream,
    flags: u32,
    max_timings: u32,
    label: Option<CString>,
    ctx: Arc<ContextInner>,
}

// SAFETY: kvrt.h "Threading": objects are externally synchronized per handle
// and "objects of one context may be used on different threads". A stream
// moves only without an open recording (a Recording borrows it mutably), so
// no cache or memory is tied to it when it changes threads.
unsafe impl Send for Stream {}
// Not Sync: every stream function is "Thread-safety: Unsafe (on the stream)".

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("raw", &self.raw).finish()
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: sole owner and no open recording (a Recording borrows the
        // stream and drops its recording itself); submitted work finishes on
        // its own.
        unsafe { sys::kvrt_stream_destroy(self.raw) };
    }
}

fn create_raw(
    ctx: sys::kvrt_context,
    flags: u32,
    max_timings: u32,
    label: &Option<CString>,
) -> Result<sys::kvrt_stream> {
    let mut desc = sys::KVRT_STREAM_DESC_INIT;
    desc.flags = flags;
    desc.max_timings = max_timings;
    desc.label = opt_ptr(label);
    let mut raw = ptr::null_mut();
    // SAFETY: Safe on the context; desc lives through the call.
    check(unsafe { sys::kvrt_stream_create(ctx, &desc, &mut raw) })?;
    Ok(raw)
}

impl Context {
    /// Creates a stream (`kvrt_stream_create`).
    pub fn create_stream(&self, desc: &StreamDesc) -> Result<Stream> {
        let flags = if desc.timestamps {
            sys::KVRT_STREAM_TIMESTAMPS
        } else {
            0
        };
        let label = opt_cstring(desc.label.as_deref())?;
        let raw = create_raw(self.inner.raw, flags, desc.max_timings, &label)?;
        Ok(Stream {
            raw,
            flags,
            max_timings: desc.max_timings,
            label,
            ctx: self.inner.clone(),
        })
    }
}

impl Stream {
    /// The raw handle, valid while this stream lives.
    pub fn as_raw(&self) -> sys::kvrt_stream {
        self.raw
    }

    /// Starts recording (`kvrt_stream_begin`). The returned [`Recording`]
    /// borrows the stream and every cache and memory it records work for
    /// until it is submitted; dropping it unsubmitted drops the recording
    /// and rolls back what it changed.
    pub fn begin(&mut self) -> Result<Recording<'_>> {
        // SAFETY: Unsafe on the stream: `&mut self` is exclusive.
        check(unsafe { sys::kvrt_stream_begin(self.raw) })?;
        Ok(Recording {
            stream: self,
            submitted: false,
            _uses: PhantomData,
        })
    }

    /// Waits up to `timeout` for the last submission (`kvrt_stream_wait`);
    /// [`Error::Timeout`](crate::Error::Timeout) when it has not completed.
    /// A zero timeout polls.
    pub fn wait(&mut self, timeout: Duration) -> Result<()> {
        let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: Unsafe on the stream: `&mut self` is exclusive.
        check(unsafe { sys::kvrt_stream_wait(self.raw, ns) })
    }

    /// After a successful wait on a stream with timestamps, the time of each
    /// operation of the last submission, in recording order
    /// (`kvrt_stream_get_timings`).
    pub fn timings(&mut self) -> Result<Vec<Timing>> {
        let mut count = 0u32;
        // SAFETY: Unsafe on the stream: `&mut self` is exclusive.
        check(unsafe { sys::kvrt_stream_get_timings(self.raw, ptr::null_mut(), &mut count) })?;
        let mut t = vec![sys::KVRT_TIMING_INIT; count as usize];
        // SAFETY: `t` has `count` entries with their type set.
        check(unsafe { sys::kvrt_stream_get_timings(self.raw, t.as_mut_ptr(), &mut count) })?;
        t.truncate(count as usize);
        Ok(t.iter()
            .map(|t| Timing {
                label: if t.label.is_null() {
                    String::new()
                } else {
                    // SAFETY: a static NUL-terminated string.
                    unsafe { CStr::from_ptr(t.label) }.to_string_lossy().into_owned()
                },
                ns: t.ns,
            })
            .collect())
    }
}

/// An open recording of a [`Stream`]: the commands recorded into it run when
/// it is [submitted](Recording::submit).
///
/// It borrows every cache and memory it records work for until it is
/// submitted or dropped, so they cannot be used elsewhere meanwhile (kvrt.h:
/// "A stream's open recording ties the stream to the caches and memories it
/// recorded work for"). Dropping it without submitting drops the recording:
/// the stream is destroyed, which rolls back the metadata changes, and
/// created again with the same options.
///
/// Host outputs are refused in recordings (they need a synchronous call).
pub struct Recording<'r> {
    pub(crate) stream: &'r mut Stream,
    submitted: bool,
    // Holds the recorded caches' shared borrows: also makes a Recording
    // neither Send nor Sync (Cache is not Sync).
    _uses: PhantomData<&'r crate::Cache>,
}

impl std::fmt::Debug for Recording<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("stream", &self.stream.raw)
            .finish()
    }
}

impl Recording<'_> {
    pub(crate) fn raw(&self) -> sys::kvrt_stream {
        self.stream.raw
    }

    /// Records a kernel that writes the 32-bit `value` over `size` bytes of
    /// `buffer` from `offset` (`kvrt_cmd_fill`; multiples of 4).
    pub fn fill<B: AsBuffer + ?Sized>(
        &mut self,
        buffer: &B,
        offset: u64,
        size: u64,
        value: u32,
    ) -> Result<()> {
        // SAFETY: Unsafe on the stream (exclusively borrowed); buffers may be
        // shared with other calls.
        check(unsafe { sys::kvrt_cmd_fill(self.stream.raw, buffer.raw_buffer(), offset, size, value) })
    }

    /// Records a kernel that copies `size` bytes from `src` at `src_offset`
    /// to `dst` at `dst_offset` (`kvrt_cmd_copy`; multiples of 4).
    pub fn copy<S: AsBuffer + ?Sized, D: AsBuffer + ?Sized>(
        &mut self,
        src: &S,
        src_offset: u64,
        dst: &D,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        // SAFETY: as in fill.
        check(unsafe {
            sys::kvrt_cmd_copy(
                self.stream.raw,
                src.raw_buffer(),
                src_offset,
                dst.raw_buffer(),
                dst_offset,
                size,
            )
        })
    }

    /// Ends recording and submits (`kvrt_stream_submit`). On failure the
    /// library has dropped the recording and rolled it back; the stream is
    /// idle again either way.
    pub fn submit(mut self) -> Result<()> {
        self.submitted = true;
        // SAFETY: Unsafe on the stream and the caches and memories of the
        // recording: all are borrowed by `self`.
        check(unsafe { sys::kvrt_stream_submit(self.stream.raw) })
    }
}

impl Drop for Recording<'_> {
    fn drop(&mut self) {
        if self.submitted {
            return;
        }
        let s = &mut *self.stream;
        // SAFETY: destroying the stream drops the open recording and rolls
        // back its metadata; the caches and memories it uses are borrowed by
        // this Recording, so no other call on them runs.
        unsafe { sys::kvrt_stream_destroy(s.raw) };
        // A stream that cannot be created again stays NULL: later calls on it
        // fail with KVRT_ERROR_INVALID_HANDLE.
        s.raw = create_raw(s.ctx.raw, s.flags, s.max_timings, &s.label).unwrap_or(ptr::null_mut());
    }
}

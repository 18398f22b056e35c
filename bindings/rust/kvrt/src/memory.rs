//! The fixed-capacity memory (`kvrt_memory`).
//!
//! **Experimental**: this part of the C API may change in any minor release,
//! and so may this module.

use std::mem;
use std::ptr;
use std::sync::Arc;

use kvrt_sys as sys;

use crate::buffer::Buffer;
use crate::cache::no_host_output as check_no_host_output;
use crate::context::{Context, ContextInner};
use crate::error::{check, Error, Result};
use crate::stream::Recording;
use crate::tensor::{OutputRef, TensorRef};
use crate::types::{as_bytes, opt_cstring, opt_ptr, ElementType, Layers, Plain};

/// Where a memory's initial MK or MV values come from (`kvrt_memory_init`):
/// n_layers × n_heads blocks of n_slots rows of key_dim (MK) or value_dim
/// (MV) values, row-major.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub enum MemoryInit<'a> {
    /// All zero.
    #[default]
    Zero,
    /// Host data of `element_type` (F32 or F16), copied during creation.
    Host {
        /// The bytes (checked against the geometry).
        data: &'a [u8],
        /// F32 or F16.
        element_type: ElementType,
    },
    /// A buffer of the same context at `offset`.
    Buffer {
        /// The buffer.
        buffer: &'a Buffer,
        /// Bytes into it; a multiple of 4.
        offset: u64,
        /// F32 or F16.
        element_type: ElementType,
    },
    /// Pseudo-random values in [-1, 1) (see the header's SplitMix64 formula).
    Seed(u64),
}

impl<'a> MemoryInit<'a> {
    /// F32 host values.
    pub fn host_f32(data: &'a [f32]) -> Self {
        Self::host(data, ElementType::F32)
    }

    /// Host values of `element_type` given as a slice of plain values.
    pub fn host<T: Plain>(data: &'a [T], element_type: ElementType) -> Self {
        MemoryInit::Host {
            data: as_bytes(data),
            element_type,
        }
    }

    fn raw(&self, values: u64) -> Result<sys::kvrt_memory_init> {
        let mut r = sys::KVRT_MEMORY_INIT_INIT;
        match *self {
            MemoryInit::Zero => r.source = sys::KVRT_MEMORY_SOURCE_ZERO,
            MemoryInit::Host { data, element_type } => {
                let size = match element_type {
                    ElementType::F32 => 4,
                    ElementType::F16 => 2,
                    t => {
                        return Err(Error::invalid(format!(
                            "memory init: {t} data; F32 or F16 expected"
                        )))
                    }
                };
                let need = values
                    .checked_mul(size)
                    .ok_or_else(|| Error::invalid("memory init: size overflows"))?;
                if (data.len() as u64) < need {
                    return Err(Error::invalid(format!(
                        "memory init: host data holds {} bytes, {need} needed",
                        data.len()
                    )));
                }
                r.source = sys::KVRT_MEMORY_SOURCE_HOST;
                r.host = data.as_ptr().cast();
                r.element_type = element_type.raw();
            }
            MemoryInit::Buffer {
                buffer,
                offset,
                element_type,
            } => {
                r.source = sys::KVRT_MEMORY_SOURCE_BUFFER;
                r.buffer = buffer.as_raw();
                r.offset = offset;
                r.element_type = element_type.raw();
            }
            MemoryInit::Seed(seed) => {
                r.source = sys::KVRT_MEMORY_SOURCE_SEED;
                r.seed = seed;
            }
        }
        Ok(r)
    }
}

/// The descriptor of a memory (`kvrt_memory_desc`); [`Default`] gives
/// `KVRT_MEMORY_DESC_INIT` (F32 state). **Experimental.**
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct MemoryDesc<'a> {
    /// Layers.
    pub n_layers: u32,
    /// Heads.
    pub n_heads: u32,
    /// M: key and value vectors per layer and head.
    pub n_slots: u32,
    /// E: size of MK rows, wq and q.
    pub key_dim: u32,
    /// D: size of MV rows, wv and outputs; 0 = key_dim.
    pub value_dim: u32,
    /// Sequence ids are 0..max_seqs-1; 0 = 1.
    pub max_seqs: u32,
    /// Precision of MV: F32 or F16; `None` = F32.
    pub state_type: Option<ElementType>,
    /// Tokens per chunk, 1..512; 0 = 512.
    pub chunk_tokens: u32,
    /// MK.
    pub keys: MemoryInit<'a>,
    /// The initial MV.
    pub values: MemoryInit<'a>,
    /// Debug name.
    pub label: Option<String>,
}

/// Sizes of a memory (`kvrt_memory_estimate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryEstimate {
    /// Device memory the memory allocates.
    pub device_bytes: u64,
    /// Device bytes of one sequence's state over all layers.
    pub state_bytes_per_seq: u64,
    /// The largest binding assumed.
    pub max_binding_bytes: u64,
}

impl MemoryDesc<'_> {
    fn value_dim(&self) -> u32 {
        if self.value_dim == 0 {
            self.key_dim
        } else {
            self.value_dim
        }
    }

    fn with_raw<R>(&self, f: impl FnOnce(&sys::kvrt_memory_desc) -> R) -> Result<R> {
        let blocks = u64::from(self.n_layers) * u64::from(self.n_heads) * u64::from(self.n_slots);
        let keys = self.keys.raw(blocks * u64::from(self.key_dim))?;
        let values = self.values.raw(blocks * u64::from(self.value_dim()))?;
        let label = opt_cstring(self.label.as_deref())?;
        let mut d = sys::KVRT_MEMORY_DESC_INIT;
        d.n_layers = self.n_layers;
        d.n_heads = self.n_heads;
        d.n_slots = self.n_slots;
        d.key_dim = self.key_dim;
        d.value_dim = self.value_dim;
        d.max_seqs = self.max_seqs;
        if let Some(t) = self.state_type {
            d.state_type = t.raw();
        }
        d.chunk_tokens = self.chunk_tokens;
        d.keys = &keys;
        d.values = &values;
        d.label = opt_ptr(&label);
        Ok(f(&d))
    }

    fn estimate_in(&self, ctx: sys::kvrt_context) -> Result<MemoryEstimate> {
        let mut e = sys::KVRT_MEMORY_ESTIMATE_INIT;
        // SAFETY: Safe; all structs live through the call.
        check(self.with_raw(|d| unsafe { sys::kvrt_memory_estimate_size(ctx, d, &mut e) })?)?;
        Ok(MemoryEstimate {
            device_bytes: e.device_bytes,
            state_bytes_per_seq: e.state_bytes_per_seq,
            max_binding_bytes: e.max_binding_bytes,
        })
    }

    /// The sizes without a context (`kvrt_memory_estimate_size`).
    pub fn estimate(&self) -> Result<MemoryEstimate> {
        self.estimate_in(ptr::null_mut())
    }
}

/// A batch for [`Memory::update`], [`Memory::read`] and
/// [`Memory::update_read`] (`kvrt_memory_batch`). **Experimental.**
#[derive(Debug)]
#[non_exhaustive]
pub struct MemoryBatch<'a> {
    /// Tokens.
    pub n_tokens: u32,
    /// The sequence of each token (n_tokens ids); `None`: all in sequence 0.
    pub seq_ids: Option<&'a [i32]>,
    /// One layer or all.
    pub layers: Layers,
    /// Update keys: n_heads rows of key_dim per token.
    pub wq: Option<TensorRef<'a>>,
    /// Update values: n_heads rows of value_dim per token.
    pub wv: Option<TensorRef<'a>>,
    /// Read queries: n_heads rows of key_dim per token.
    pub q: Option<TensorRef<'a>>,
    /// Read outputs: n_heads rows of value_dim per token.
    pub out: Option<OutputRef<'a>>,
    /// Read scale; 0 = 1/sqrt(key_dim).
    pub scale: f32,
}

impl<'a> MemoryBatch<'a> {
    /// An empty batch of `n_tokens` tokens of sequence 0 in `layers`.
    pub fn new(n_tokens: u32, layers: Layers) -> Self {
        MemoryBatch {
            n_tokens,
            seq_ids: None,
            layers,
            wq: None,
            wv: None,
            q: None,
            out: None,
            scale: 0.0,
        }
    }
}

/// A fixed-capacity memory (`kvrt_memory`). **Experimental.**
///
/// `Memory` is `Send` but not `Sync` (kvrt.h: "Caches and memories are used
/// by one thread at a time"). Recorded calls borrow it mutably until the
/// recording is submitted, which keeps the header's rule "Record the work on
/// one memory into one stream at a time".
pub struct Memory {
    raw: sys::kvrt_memory,
    n_layers: u32,
    n_heads: u32,
    n_slots: u32,
    key_dim: u32,
    value_dim: u32,
    _ctx: Arc<ContextInner>,
}

// SAFETY: kvrt.h "Threading": "Caches and memories are used by one thread at
// a time" (any thread); "A destroy function needs only the object it
// destroys". Not Sync: every memory call is "Unsafe (on the memory)".
unsafe impl Send for Memory {}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory").field("raw", &self.raw).finish()
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: sole owner; no Recording borrows it.
        unsafe { sys::kvrt_memory_destroy(self.raw) };
    }
}

impl Context {
    /// Creates a memory, every sequence in the initial state
    /// (`kvrt_memory_create`). **Experimental.**
    pub fn create_memory(&self, desc: &MemoryDesc) -> Result<Memory> {
        let mut raw = ptr::null_mut();
        // SAFETY: Safe on the context; structs and host data live through the call.
        check(desc.with_raw(|d| unsafe { sys::kvrt_memory_create(self.inner.raw, d, &mut raw) })?)?;
        Ok(Memory {
            raw,
            n_layers: desc.n_layers,
            n_heads: desc.n_heads,
            n_slots: desc.n_slots,
            key_dim: desc.key_dim,
            value_dim: desc.value_dim(),
            _ctx: self.inner.clone(),
        })
    }

    /// The sizes of a memory on this device (`kvrt_memory_estimate_size`).
    pub fn estimate_memory(&self, desc: &MemoryDesc) -> Result<MemoryEstimate> {
        desc.estimate_in(self.inner.raw)
    }
}

type MemFn = unsafe extern "C" fn(
    sys::kvrt_memory,
    sys::kvrt_stream,
    *const sys::kvrt_memory_batch,
) -> sys::kvrt_result;

impl Memory {
    /// The raw handle, valid while this memory lives.
    pub fn as_raw(&self) -> sys::kvrt_memory {
        self.raw
    }

    fn run(
        &self,
        stream: sys::kvrt_stream,
        batch: &mut MemoryBatch,
        update: bool,
        read: bool,
        f: MemFn,
    ) -> Result<()> {
        let n = batch.n_tokens;
        let nl = batch.layers.count(self.n_layers);
        if let Some(ids) = batch.seq_ids {
            if ids.len() != n as usize {
                return Err(Error::invalid(format!(
                    "seq_ids has {} entries for {n} tokens",
                    ids.len()
                )));
            }
        }
        let (kd, vd, h) = (self.key_dim, self.value_dim, self.n_heads);
        let wq = if update {
            batch
                .wq
                .map(|t| t.check("wq", nl, n, h, kd).map(|_| t.raw()))
                .transpose()?
        } else {
            None
        };
        let wv = if update {
            batch
                .wv
                .map(|t| t.check("wv", nl, n, h, vd).map(|_| t.raw()))
                .transpose()?
        } else {
            None
        };
        let q = if read {
            batch
                .q
                .map(|t| t.check("q", nl, n, h, kd).map(|_| t.raw()))
                .transpose()?
        } else {
            None
        };
        let out = match (&mut batch.out, read) {
            (Some(o), true) => {
                o.check("out", nl, n, h, vd)?;
                if !stream.is_null() {
                    check_no_host_output(o)?;
                }
                Some(o.raw())
            }
            _ => None,
        };
        let p = |t: &Option<sys::kvrt_tensor_ref>| t.as_ref().map_or(ptr::null(), |t| t as *const _);
        let mut b = sys::KVRT_MEMORY_BATCH_INIT;
        b.n_tokens = n;
        b.seq_ids = batch.seq_ids.map_or(ptr::null(), |s| s.as_ptr());
        b.layer = batch.layers.raw()?;
        b.wq = p(&wq);
        b.wv = p(&wv);
        b.q = p(&q);
        b.out = out.as_ref().map_or(ptr::null(), |o| o as *const _);
        b.scale = batch.scale;
        // SAFETY: the memory is held exclusively (&mut or a recording's
        // mutable borrow) with the stream; host data was checked.
        check(unsafe { f(self.raw, stream, &b) })
    }

    /// Updates the batch's sequences with `wq` and `wv`, synchronously
    /// (`kvrt_memory_update`).
    pub fn update(&mut self, batch: &mut MemoryBatch) -> Result<()> {
        self.run(ptr::null_mut(), batch, true, false, sys::kvrt_memory_update)
    }

    /// Reads the state with `q` into `out`, synchronously (`kvrt_memory_read`).
    pub fn read(&mut self, batch: &mut MemoryBatch) -> Result<()> {
        self.run(ptr::null_mut(), batch, false, true, sys::kvrt_memory_read)
    }

    /// Updates and reads token by token, synchronously (`kvrt_memory_update_read`).
    pub fn update_read(&mut self, batch: &mut MemoryBatch) -> Result<()> {
        self.run(ptr::null_mut(), batch, true, true, sys::kvrt_memory_update_read)
    }

    /// Returns sequence `seq` (every sequence for seq < 0) to the initial
    /// state (`kvrt_memory_seq_rm`).
    pub fn seq_rm(&mut self, seq: i32) -> Result<()> {
        // SAFETY: Unsafe on the memory (&mut); NULL stream.
        check(unsafe { sys::kvrt_memory_seq_rm(self.raw, ptr::null_mut(), seq) })
    }

    /// Makes `dst` a copy of the state of `src` (`kvrt_memory_seq_cp`).
    pub fn seq_cp(&mut self, src: i32, dst: i32) -> Result<()> {
        // SAFETY: Unsafe on the memory (&mut); NULL stream.
        check(unsafe { sys::kvrt_memory_seq_cp(self.raw, ptr::null_mut(), src, dst) })
    }

    /// The state MV of `seq` at `layer` as f32: n_heads × n_slots ×
    /// value_dim values (`kvrt_memory_get_state`).
    pub fn state(&self, seq: i32, layer: u32) -> Result<Vec<f32>> {
        let n = u64::from(self.n_heads) * u64::from(self.n_slots) * u64::from(self.value_dim);
        let n = usize::try_from(n).map_err(|_| Error::invalid("state too large"))?;
        let mut out = vec![0f32; n];
        let layer = Layers::One(layer).raw()?;
        let bytes = mem::size_of_val(out.as_slice()) as u64;
        // SAFETY: Unsafe on the memory (not Sync); `out` is passed with its
        // size in bytes, which the library checks before writing.
        check(unsafe { sys::kvrt_memory_get_state(self.raw, seq, layer, out.as_mut_ptr(), bytes) })?;
        Ok(out)
    }
}

impl<'r> Recording<'r> {
    /// Records [`Memory::update`]; the memory stays borrowed until submission.
    pub fn memory_update(&mut self, memory: &'r mut Memory, batch: &mut MemoryBatch) -> Result<()> {
        memory.run(self.raw(), batch, true, false, sys::kvrt_memory_update)
    }

    /// Records [`Memory::read`]; `out` must be a buffer.
    pub fn memory_read(&mut self, memory: &'r mut Memory, batch: &mut MemoryBatch) -> Result<()> {
        memory.run(self.raw(), batch, false, true, sys::kvrt_memory_read)
    }

    /// Records [`Memory::update_read`]; `out` must be a buffer.
    pub fn memory_update_read(&mut self, memory: &'r mut Memory, batch: &mut MemoryBatch) -> Result<()> {
        memory.run(self.raw(), batch, true, true, sys::kvrt_memory_update_read)
    }

    /// Records [`Memory::seq_rm`].
    pub fn memory_seq_rm(&mut self, memory: &'r mut Memory, seq: i32) -> Result<()> {
        // SAFETY: memory and stream held exclusively.
        check(unsafe { sys::kvrt_memory_seq_rm(memory.raw, self.raw(), seq) })
    }

    /// Records [`Memory::seq_cp`].
    pub fn memory_seq_cp(&mut self, memory: &'r mut Memory, src: i32, dst: i32) -> Result<()> {
        // SAFETY: memory and stream held exclusively.
        check(unsafe { sys::kvrt_memory_seq_cp(memory.raw, self.raw(), src, dst) })
    }
}

//! Batches of tokens and references to the data kvrt reads and writes.

use std::borrow::Cow;
use std::marker::PhantomData;

use kvrt_sys as sys;

use crate::buffer::AsBuffer;
use crate::error::{Error, Result};
use crate::types::{as_bytes, as_bytes_mut, len_u32, ElementType, Plain};

/// A batch of tokens (`kvrt_batch`): token `i` has position `positions[i]`
/// and belongs to one or more sequences.
///
/// ```
/// let positions = [0, 1, 2];
/// let batch = kvrt::Batch::for_seq(0, &positions);
/// assert_eq!(batch.len(), 3);
/// // Two tokens; the first in sequences 0 and 1, the second in sequence 1.
/// let shared = kvrt::Batch::with_seq_id_counts(&[0, 1], &[2, 1], &[0, 1, 1]).unwrap();
/// assert_eq!(shared.len(), 2);
/// assert!(kvrt::Batch::new(&[0, 1], &[0]).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct Batch<'a> {
    positions: &'a [i32],
    seq_id_counts: Option<&'a [u32]>,
    seq_ids: Cow<'a, [i32]>,
    parents: Option<&'a [i32]>,
    cells: Option<&'a [u32]>,
}

impl<'a> Batch<'a> {
    /// One sequence per token: token `i` is in sequence `seq_ids[i]`. Fails
    /// when the slices differ in length.
    pub fn new(positions: &'a [i32], seq_ids: &'a [i32]) -> Result<Self> {
        if positions.len() != seq_ids.len() {
            return Err(Error::invalid(format!(
                "batch: {} positions but {} sequence ids",
                positions.len(),
                seq_ids.len()
            )));
        }
        len_u32(positions.len(), "batch")?;
        Ok(Batch {
            positions,
            seq_id_counts: None,
            seq_ids: Cow::Borrowed(seq_ids),
            parents: None,
            cells: None,
        })
    }

    /// Every token in sequence `seq`.
    pub fn for_seq(seq: i32, positions: &'a [i32]) -> Self {
        Batch {
            positions,
            seq_id_counts: None,
            seq_ids: Cow::Owned(vec![seq; positions.len()]),
            parents: None,
            cells: None,
        }
    }

    /// Token `i` belongs to the `seq_id_counts[i]` sequences listed next in
    /// `seq_ids` (flattened in token order). Fails when the lengths disagree.
    pub fn with_seq_id_counts(
        positions: &'a [i32],
        seq_id_counts: &'a [u32],
        seq_ids: &'a [i32],
    ) -> Result<Self> {
        if seq_id_counts.len() != positions.len() {
            return Err(Error::invalid(format!(
                "batch: {} positions but {} sequence counts",
                positions.len(),
                seq_id_counts.len()
            )));
        }
        let total: u64 = seq_id_counts.iter().map(|&c| u64::from(c)).sum();
        if total != seq_ids.len() as u64 {
            return Err(Error::invalid(format!(
                "batch: the sequence counts add up to {total} but {} sequence ids are given",
                seq_ids.len()
            )));
        }
        len_u32(positions.len(), "batch")?;
        Ok(Batch {
            positions,
            seq_id_counts: Some(seq_id_counts),
            seq_ids: Cow::Borrowed(seq_ids),
            parents: None,
            cells: None,
        })
    }

    /// Makes the batch a token tree (`kvrt_batch_tree`), the draft tokens
    /// of speculative decoding: token `i`'s parent is token `parents[i]`
    /// (earlier in the batch, same sequence, lower position) or -1. Siblings
    /// may share a position; each token attends to the cache and, of the
    /// tree, to its ancestors and itself only. kvrt checks the rules when the
    /// batch is used; this fails only when the lengths differ.
    ///
    /// ```
    /// // Two candidates for position 5, and a child of the second at 6.
    /// let positions = [5, 5, 6];
    /// let tree = kvrt::Batch::for_seq(0, &positions).with_parents(&[-1, -1, 1]).unwrap();
    /// assert_eq!(tree.parents(), Some(&[-1, -1, 1][..]));
    /// ```
    pub fn with_parents(mut self, parents: &'a [i32]) -> Result<Self> {
        if parents.len() != self.positions.len() {
            return Err(Error::invalid(format!(
                "batch: {} positions but {} parents",
                self.positions.len(),
                parents.len()
            )));
        }
        self.parents = Some(parents);
        Ok(self)
    }

    /// The cells that hold a tree's tokens (what [`crate::Cache::store`] or
    /// [`crate::Cache::place`] returned for it): needed to attend with the
    /// tree as queries and by [`crate::Cache::tree_accept`]. Fails when the
    /// batch is not a tree or the lengths differ.
    pub fn with_cells(mut self, cells: &'a [u32]) -> Result<Self> {
        if self.parents.is_none() {
            return Err(Error::invalid(
                "batch: cells belong to a token tree; call with_parents first",
            ));
        }
        if cells.len() != self.positions.len() {
            return Err(Error::invalid(format!(
                "batch: {} positions but {} cells",
                self.positions.len(),
                cells.len()
            )));
        }
        self.cells = Some(cells);
        Ok(self)
    }

    /// The parent of each token, when the batch is a token tree.
    pub fn parents(&self) -> Option<&[i32]> {
        self.parents
    }

    /// The number of tokens.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether the batch has no token.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// The positions of the tokens.
    pub fn positions(&self) -> &[i32] {
        self.positions
    }

    pub(crate) fn n_tokens(&self) -> u32 {
        self.positions.len() as u32
    }

    /// The C batch; a tree's `kvrt_batch_tree` is written to `tree` and
    /// chained, so `tree` must outlive every use of the result.
    pub(crate) fn raw(&self, tree: &mut sys::kvrt_batch_tree) -> sys::kvrt_batch {
        let mut b = sys::KVRT_BATCH_INIT;
        b.n_tokens = self.n_tokens();
        b.positions = self.positions.as_ptr();
        b.seq_id_counts = self.seq_id_counts.map_or(std::ptr::null(), |c| c.as_ptr());
        b.seq_ids = self.seq_ids.as_ptr();
        if let Some(parents) = self.parents {
            *tree = sys::KVRT_BATCH_TREE_INIT;
            tree.parents = parents.as_ptr();
            tree.cells = self.cells.map_or(std::ptr::null(), |c| c.as_ptr());
            b.next = (tree as *const sys::kvrt_batch_tree).cast();
        }
        b
    }
}

/// Strides of tensor and output data, in bytes; zero means packed (see
/// `kvrt_tensor_ref`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Strides {
    /// Bytes to the first value.
    pub offset: u64,
    /// Bytes between tokens; 0 = the heads of one token back to back.
    pub row: u64,
    /// Bytes between heads of one token; 0 = one head row.
    pub head: u64,
    /// Bytes between layers when a call covers all layers; 0 = packed.
    pub layer: u64,
}

impl Strides {
    /// The end of the last byte read or written for this geometry, following
    /// the header's rules for zero strides; `None` on overflow.
    pub(crate) fn extent(&self, layers: u32, tokens: u32, heads: u32, head_bytes: u64) -> Option<u64> {
        if layers == 0 || tokens == 0 || heads == 0 {
            return Some(0);
        }
        let hs = if self.head == 0 { head_bytes } else { self.head };
        let rs = if self.row == 0 {
            u64::from(heads).checked_mul(hs)?
        } else {
            self.row
        };
        let ls = if self.layer == 0 {
            u64::from(tokens)
                .checked_mul(rs)?
                .max(u64::from(heads).checked_mul(hs)?)
        } else {
            self.layer
        };
        let last = u64::from(layers - 1)
            .checked_mul(ls)?
            .checked_add(u64::from(tokens - 1).checked_mul(rs)?)?
            .checked_add(u64::from(heads - 1).checked_mul(hs)?)?;
        self.offset.checked_add(last)?.checked_add(head_bytes)
    }
}

#[derive(Debug, Clone, Copy)]
enum Source {
    Host(*const u8, usize),
    Buffer(sys::kvrt_buffer),
}

/// Data for kvrt to read (`kvrt_tensor_ref`): rows of values (F32, F16) or of
/// a cache's stored type, in host memory (copied during the call) or in a
/// buffer, with optional strides.
///
/// Host data is checked against the call's geometry before the library reads
/// it.
///
/// ```
/// let k = vec![0.5f32; 16];
/// let r = kvrt::TensorRef::host_f32(&k).with_row_stride(32);
/// assert_eq!(r.element_type(), kvrt::ElementType::F32);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TensorRef<'a> {
    source: Source,
    element_type: ElementType,
    strides: Strides,
    _data: PhantomData<&'a [u8]>,
}

/// The offset and stride setters shared by [`TensorRef`] and [`OutputRef`]
/// (both keep their layout in a `strides` field).
macro_rules! strided_setters {
    () => {
        /// Sets the byte offset of the first value.
        pub fn with_offset(mut self, offset: u64) -> Self {
            self.strides.offset = offset;
            self
        }

        /// Sets the bytes between tokens (0 = packed).
        pub fn with_row_stride(mut self, row_stride: u64) -> Self {
            self.strides.row = row_stride;
            self
        }

        /// Sets the bytes between heads of one token (0 = packed).
        pub fn with_head_stride(mut self, head_stride: u64) -> Self {
            self.strides.head = head_stride;
            self
        }

        /// Sets the bytes between layers (0 = packed).
        pub fn with_layer_stride(mut self, layer_stride: u64) -> Self {
            self.strides.layer = layer_stride;
            self
        }

        /// Sets offset and every stride at once.
        pub fn with_strides(mut self, strides: Strides) -> Self {
            self.strides = strides;
            self
        }
    };
}

impl<'a> TensorRef<'a> {
    /// F32 values in host memory.
    pub fn host_f32(data: &'a [f32]) -> Self {
        Self::host(data, ElementType::F32)
    }

    /// F16 values (IEEE binary16 bit patterns) in host memory.
    pub fn host_f16(data: &'a [u16]) -> Self {
        Self::host(data, ElementType::F16)
    }

    /// Host data of `element_type`: values (F32, F16) or rows of a cache's
    /// stored type (pre-quantized blocks, static-scale codes).
    pub fn host<T: Plain>(data: &'a [T], element_type: ElementType) -> Self {
        let bytes = as_bytes(data);
        TensorRef {
            source: Source::Host(bytes.as_ptr(), bytes.len()),
            element_type,
            strides: Strides::default(),
            _data: PhantomData,
        }
    }

    /// Data of `element_type` in a buffer (a [`Buffer`](crate::Buffer) or a
    /// cache-owned [`CacheBuffer`](crate::CacheBuffer)).
    pub fn buffer<B: AsBuffer + ?Sized>(buffer: &'a B, element_type: ElementType) -> Self {
        TensorRef {
            source: Source::Buffer(buffer.raw_buffer()),
            element_type,
            strides: Strides::default(),
            _data: PhantomData,
        }
    }

    strided_setters!();

    /// The element type.
    pub fn element_type(&self) -> ElementType {
        self.element_type
    }

    /// The offset and strides.
    pub fn strides(&self) -> Strides {
        self.strides
    }

    /// Checks host data against the geometry: `layers` blocks of `tokens`
    /// tokens of `heads` rows of `head_dim` values.
    pub(crate) fn check(
        &self,
        what: &str,
        layers: u32,
        tokens: u32,
        heads: u32,
        head_dim: u32,
    ) -> Result<()> {
        let Source::Host(_, len) = self.source else {
            return Ok(());
        };
        check_extent(
            what,
            self.element_type,
            &self.strides,
            len,
            layers,
            tokens,
            heads,
            head_dim,
        )
    }

    pub(crate) fn raw(&self) -> sys::kvrt_tensor_ref {
        let mut r = sys::KVRT_TENSOR_REF_INIT;
        match self.source {
            Source::Host(p, _) => r.host = p.cast(),
            Source::Buffer(b) => r.buffer = b,
        }
        r.element_type = self.element_type.raw();
        r.offset = self.strides.offset;
        r.row_stride = self.strides.row;
        r.head_stride = self.strides.head;
        r.layer_stride = self.strides.layer;
        r
    }
}

#[allow(clippy::too_many_arguments)]
fn check_extent(
    what: &str,
    element_type: ElementType,
    strides: &Strides,
    len: usize,
    layers: u32,
    tokens: u32,
    heads: u32,
    head_dim: u32,
) -> Result<()> {
    let head_bytes = element_type.row_bytes(head_dim).ok_or_else(|| {
        Error::invalid(format!(
            "{what}: head dim {head_dim} is not a whole number of {element_type} blocks"
        ))
    })?;
    let need = strides
        .extent(layers, tokens, heads, head_bytes)
        .ok_or_else(|| Error::invalid(format!("{what}: offset and strides overflow")))?;
    if (len as u64) < need {
        return Err(Error::invalid(format!(
            "{what}: host data holds {len} bytes but the call reaches byte {need}"
        )));
    }
    Ok(())
}

#[derive(Debug)]
enum Target {
    Host(*mut u8, usize),
    Buffer(sys::kvrt_buffer),
}

/// Where kvrt writes results (`kvrt_output_ref`): F32 or F16 rows in host
/// memory (only for synchronous calls) or in a buffer, with optional strides.
///
/// ```
/// let mut out = vec![0f32; 16];
/// let o = kvrt::OutputRef::host_f32(&mut out);
/// assert_eq!(o.element_type(), kvrt::ElementType::F32);
/// ```
#[derive(Debug)]
pub struct OutputRef<'a> {
    target: Target,
    element_type: ElementType,
    strides: Strides,
    _data: PhantomData<&'a mut [u8]>,
}

impl<'a> OutputRef<'a> {
    /// F32 results into host memory.
    pub fn host_f32(data: &'a mut [f32]) -> Self {
        Self::host(as_bytes_mut(data), ElementType::F32)
    }

    /// F16 results (bit patterns) into host memory.
    pub fn host_f16(data: &'a mut [u16]) -> Self {
        Self::host(as_bytes_mut(data), ElementType::F16)
    }

    fn host(bytes: &'a mut [u8], element_type: ElementType) -> Self {
        OutputRef {
            target: Target::Host(bytes.as_mut_ptr(), bytes.len()),
            element_type,
            strides: Strides::default(),
            _data: PhantomData,
        }
    }

    /// Results of `element_type` (F32 or F16) into a buffer.
    pub fn buffer<B: AsBuffer + ?Sized>(buffer: &'a B, element_type: ElementType) -> Self {
        OutputRef {
            target: Target::Buffer(buffer.raw_buffer()),
            element_type,
            strides: Strides::default(),
            _data: PhantomData,
        }
    }

    strided_setters!();

    /// The element type.
    pub fn element_type(&self) -> ElementType {
        self.element_type
    }

    pub(crate) fn is_host(&self) -> bool {
        matches!(self.target, Target::Host(..))
    }

    pub(crate) fn check(
        &self,
        what: &str,
        layers: u32,
        tokens: u32,
        heads: u32,
        head_dim: u32,
    ) -> Result<()> {
        if !matches!(self.element_type, ElementType::F32 | ElementType::F16) {
            return Err(Error::invalid(format!(
                "{what}: outputs are F32 or F16, not {}",
                self.element_type
            )));
        }
        let Target::Host(_, len) = self.target else {
            return Ok(());
        };
        check_extent(
            what,
            self.element_type,
            &self.strides,
            len,
            layers,
            tokens,
            heads,
            head_dim,
        )
    }

    pub(crate) fn raw(&mut self) -> sys::kvrt_output_ref {
        let mut r = sys::KVRT_OUTPUT_REF_INIT;
        match self.target {
            Target::Host(p, _) => r.host = p.cast(),
            Target::Buffer(b) => r.buffer = b,
        }
        r.element_type = self.element_type.raw();
        r.offset = self.strides.offset;
        r.row_stride = self.strides.row;
        r.head_stride = self.strides.head;
        r.layer_stride = self.strides.layer;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_extent() {
        let s = Strides::default();
        // 2 layers, 3 tokens, 2 heads of 8 f32.
        assert_eq!(s.extent(2, 3, 2, 32), Some(2 * 3 * 2 * 32));
        assert_eq!(s.extent(1, 0, 2, 32), Some(0));
    }

    #[test]
    fn head_major_extent() {
        // GGML's permuted layout: row stride one head row, head stride n_tokens of them.
        let s = Strides {
            offset: 4,
            row: 32,
            head: 3 * 32,
            layer: 0,
        };
        assert_eq!(s.extent(1, 3, 2, 32), Some(4 + 2 * 32 + 96 + 32));
    }

    #[test]
    fn overflow_is_none() {
        let s = Strides {
            offset: u64::MAX,
            ..Strides::default()
        };
        assert_eq!(s.extent(1, 1, 1, 4), None);
    }

    #[test]
    fn host_tensor_checked() {
        let data = [0f32; 15];
        let t = TensorRef::host_f32(&data);
        assert!(t.check("k", 1, 2, 1, 8).is_err());
        let data = [0f32; 16];
        let t = TensorRef::host_f32(&data);
        assert!(t.check("k", 1, 2, 1, 8).is_ok());
    }
}

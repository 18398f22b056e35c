//! The KV cache.

use std::marker::PhantomData;
use std::mem;
use std::ptr;
use std::sync::Arc;

use kvrt_sys as sys;

use crate::buffer::CacheBuffer;
use crate::context::{Context, ContextInner};
use crate::error::{check, Error, Result};
use crate::paged::PagedLayoutDesc;
use crate::stream::Recording;
use crate::tensor::{Batch, OutputRef, TensorRef};
use crate::types::{len_u32, opt_cstring, opt_ptr, ElementType, KvArray, Layers};

/// How a cache arranges its rows (`kvrt_layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Layout {
    /// The general layout: any cell holds any token of any sequences.
    #[default]
    Cells,
    /// The static padded layout of NPU/DSP engines; needs
    /// [`CacheDesc::static_layout`]. Tokens are appended per sequence in
    /// rising position order; [`Cache::seq_rm`] removes any range (dropping
    /// the oldest rows, or the newest while the window has room to move
    /// back, changes metadata only; otherwise it copies rows and waits for
    /// the device). [`Cache::seq_cp`], [`Cache::seq_add`],
    /// [`Cache::seq_div`] and [`Cache::context_shift`] fail with
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    Static,
    /// The paged layout (`kvrt_paged.h`): blocks of 16, 32 or 64 cells
    /// mapped by per-sequence block tables, with prefix sharing,
    /// copy-on-write forks and reuse of cached blocks; the block size comes
    /// from [`CacheDesc::paged_layout`] (16 without it). Tokens come in
    /// through [`Cache::paged_admit`], [`Cache::paged_append`],
    /// [`Cache::store`] or [`Cache::place`]; reads, writes and attention
    /// work as in the cell layout; a [`Cache::seq_add`] must cover a suffix
    /// of the sequence and waits for the device. State
    /// ([`Cache::state_save`], [`Cache::state_load`], host swap) and
    /// transfers ([`Cache::seq_transfer`]) work as in the cell layout: a
    /// loaded or transferred sequence is appended in position order into
    /// blocks of its own, and a whole-cache load keeps the state's sharing
    /// of whole blocks. [`Cache::discard_for_reevaluation`] removes the
    /// suffix from `n_keep` on; [`Cache::seq_div`] and
    /// [`Cache::context_shift`] fail with
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    Paged,
}

/// The RoPE mode (`kvrt_rope_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RopeMode {
    /// Pairs (2i, 2i+1).
    #[default]
    Normal,
    /// Pairs (i, i + n_rot/2).
    Neox,
}

/// The model's RoPE (`kvrt_rope_desc`); [`Default`] is `KVRT_ROPE_DESC_INIT`
/// and zero fields take the library's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct RopeDesc {
    /// Pairing of the rotated dimensions.
    pub mode: RopeMode,
    /// Rotated dimensions; 0 = head_dim_k.
    pub n_rot: u32,
    /// 0 = 10000.
    pub freq_base: f32,
    /// 0 = 1.
    pub freq_scale: f32,
    /// YaRN extrapolation mix; 0 = off.
    pub ext_factor: f32,
    /// YaRN magnitude; 0 = 1.
    pub attn_factor: f32,
    /// 0 = 32.
    pub beta_fast: f32,
    /// 0 = 1.
    pub beta_slow: f32,
    /// YaRN original context; 0 = none.
    pub n_ctx_orig: u32,
}

impl RopeDesc {
    /// RoPE of `mode` over the first `n_rot` dims of each head with base
    /// frequency `freq_base`; the YaRN fields at their defaults.
    pub fn new(mode: RopeMode, n_rot: u32, freq_base: f32) -> Self {
        Self {
            mode,
            n_rot,
            freq_base,
            ..Self::default()
        }
    }
}

/// How a static layout's windows take new rows (`kvrt_static_style`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StaticStyle {
    /// The window slides through a region of `ceil(R * (S-1))` rows,
    /// left-padded, new rows after it (`KVRT_STATIC_STYLE_SHIFT_POINTER`).
    #[default]
    ShiftPointer,
    /// The window is the whole region of S-1 rows and never moves: new rows
    /// go to a ring position, right-padded while it fills, the mask opening
    /// from the left (`KVRT_STATIC_STYLE_SMART_MASK`, the style of
    /// ExecuTorch's and Qualcomm's static runtimes). The reserve must be 0
    /// or 1.
    SmartMask,
}

/// The sizes and style of a static layout (`kvrt_static_layout_desc`, and a
/// chained `kvrt_static_style_desc` for [`StaticStyle::SmartMask`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct StaticLayoutDesc {
    /// S >= 2: the graph's sequence length; windows hold S-1 rows.
    pub seq_len: u32,
    /// R >= 1: rows reserved per window, as a multiple of S-1; 0 = 2 (1 in
    /// the smart-mask style).
    pub reserve: f64,
    /// How the windows take new rows.
    pub style: StaticStyle,
}

impl StaticLayoutDesc {
    /// Windows of `seq_len - 1` rows, with the default reserve (R = 2).
    pub fn new(seq_len: u32) -> Self {
        Self {
            seq_len,
            ..Self::default()
        }
    }

    /// Smart-mask windows: a ring of `seq_len - 1` rows that never moves.
    pub fn smart_mask(seq_len: u32) -> Self {
        Self {
            seq_len,
            style: StaticStyle::SmartMask,
            ..Self::default()
        }
    }
}

/// The windowed layers in a group of their own (`kvrt_window_layout_desc`),
/// given with [`CacheDesc::window_layout`] for a [`Layout::Cells`] or
/// [`Layout::Paged`] cache with [`CacheDesc::layer_windows`]: the layers with a window keep their
/// rows in a separate, smaller group of `cells` cells instead of one row per
/// cell of the cache, so their memory follows the window per sequence, not
/// the capacity (models that interleave local and global layers).
///
/// Cells keep their meaning: [`Cache::store`], [`Cache::place`] and
/// [`Cache::write`] return and take the cache's cells, and every sequence
/// operation applies to both groups. When a batch is placed, the group drops,
/// for each of its sequences, the rows no query at or after the batch's
/// lowest position of that sequence can see (position <= lowest - W, W the
/// largest window), except positions below `n_keep`. Afterwards:
/// - placing a token, or attending in a windowed layer, at a position whose
///   window reaches dropped rows fails with
///   [`Error::InvalidState`](crate::Error::InvalidState) and changes
///   nothing: after removing a sequence's tail from `p0` on, go on at `p0`
///   when `p0 >= seq_window_pos_min + W - 1` ([`Cache::seq_window_pos_min`]),
///   otherwise remove its positions from `n_keep` on and evaluate them again;
/// - reading a windowed layer's dropped rows ([`Cache::read`],
///   [`Cache::read_raw`]) fails with
///   [`Error::InvalidArgument`](crate::Error::InvalidArgument), and writing
///   them is skipped;
/// - attention with [`AttentionParams::n_keep`] above `n_keep` in a windowed
///   layer fails with [`Error::InvalidArgument`](crate::Error::InvalidArgument);
/// - a state ([`Cache::state_save`], [`Cache::seq_swap_out`] and their file
///   forms) keeps exactly the rows the group holds, and loads into a cache
///   with the same windowed layers and a window group (a state without a
///   group loads too, when the group has a cell for each of its cells);
///   transfers fail with [`Error::Unsupported`](crate::Error::Unsupported).
///
/// A store or place fails with [`Error::CacheFull`](crate::Error::CacheFull)
/// (nothing placed) when the group lacks a cell for each token: size it for
/// max_seqs × (W + n_keep) plus the largest batch. Creating or estimating
/// the cache fails with [`Error::InvalidArgument`](crate::Error::InvalidArgument)
/// when no layer has a window or `cells` exceeds the capacity, and with
/// [`Error::Unsupported`](crate::Error::Unsupported) for [`Layout::Static`].
///
/// In the paged layout the group follows the block tables: forks share its
/// rows, copy-on-write and shifts of shared blocks copy the rows it holds,
/// and [`Cache::paged_admit`] maps only the leading blocks whose windowed
/// rows the group still holds for the prompt's computed tokens (so its
/// `n_cached` may be smaller than without the group);
/// [`Cache::tree_accept`] fails with
/// [`Error::Unsupported`](crate::Error::Unsupported).
///
/// ```
/// use kvrt::{CacheDesc, WindowLayoutDesc};
/// let mut desc = CacheDesc::new(4, 4, 2, 64, 4096);
/// desc.layer_windows = Some(vec![0, 64, 0, 64]);
/// desc.max_seqs = 2;
/// let full = desc.estimate().unwrap();
/// desc.window_layout = Some(WindowLayoutDesc::new(0, 4));
/// assert!(desc.estimate().unwrap().device_bytes < full.device_bytes);
/// // A window group needs a windowed layer.
/// desc.layer_windows = None;
/// assert!(matches!(desc.estimate(), Err(kvrt::Error::InvalidArgument(_))));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct WindowLayoutDesc {
    /// Cells of the windowed group; 0 = min(capacity, max_seqs × (W +
    /// n_keep) + 512), W the largest window. At most the capacity.
    pub cells: u32,
    /// Positions below `n_keep` are never dropped (attention sinks).
    pub n_keep: u32,
}

impl WindowLayoutDesc {
    /// A group of `cells` cells for the windowed layers, keeping the first
    /// `n_keep` positions of every sequence (sinks).
    pub fn new(cells: u32, n_keep: u32) -> Self {
        Self { cells, n_keep }
    }

    /// The C struct, chained before `next`.
    pub(crate) fn raw(&self, next: *const std::ffi::c_void) -> sys::kvrt_window_layout_desc {
        sys::kvrt_window_layout_desc {
            next,
            cells: self.cells,
            n_keep: self.n_keep,
            ..sys::KVRT_WINDOW_LAYOUT_DESC_INIT
        }
    }
}

/// Scales of static-scale K/V types (`kvrt_static_scales_desc`): each
/// non-empty array has one entry (all layers) or n_layers entries.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct StaticScales {
    /// K scales, when type_k is static-scale.
    pub k_scales: Vec<f32>,
    /// K zero points, as many as `k_scales`.
    pub k_zero_points: Vec<i32>,
    /// V scales, when type_v is static-scale.
    pub v_scales: Vec<f32>,
    /// V zero points, as many as `v_scales`.
    pub v_zero_points: Vec<i32>,
}

/// The descriptor of a cache (`kvrt_cache_desc` and the structs chained on
/// it). [`Default`] gives `KVRT_CACHE_DESC_INIT` (F16 storage, cell layout).
///
/// ```
/// let desc = kvrt::CacheDesc::new(2, 4, 2, 64, 1024);
/// assert_eq!(desc.type_k, kvrt::ElementType::F16);
/// let est = desc.estimate().unwrap();
/// assert_eq!(est.bytes_per_token, 2 * 2 * (64 * 2 + 64 * 2));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CacheDesc {
    /// Layers.
    pub n_layers: u32,
    /// Query heads; a multiple of n_kv_heads.
    pub n_heads: u32,
    /// K/V heads.
    pub n_kv_heads: u32,
    /// K head dimension.
    pub head_dim_k: u32,
    /// V head dimension; 0 = head_dim_k.
    pub head_dim_v: u32,
    /// Cells (tokens); 0 with the static layout, a multiple of the block
    /// size with the paged layout.
    pub capacity: u32,
    /// Sequence ids are 0..max_seqs-1; 0 = 64 (1 with the static layout).
    pub max_seqs: u32,
    /// Stored type of K.
    pub type_k: ElementType,
    /// Stored type of V.
    pub type_v: ElementType,
    /// Layout.
    pub layout: Layout,
    /// Sliding window per layer (n_layers entries; 0 = full attention).
    pub layer_windows: Option<Vec<u32>>,
    /// Debug name.
    pub label: Option<String>,
    /// Deferred RoPE (`KVRT_CACHE_DEFERRED_ROPE`): K is stored unrotated.
    pub deferred_rope: bool,
    /// The K/V rows' memory can be exported as a file descriptor
    /// (`KVRT_CACHE_EXPORTABLE`; [`CacheBuffer::export_memory`](crate::CacheBuffer::export_memory)
    /// on a static window's buffer).
    pub exportable: bool,
    /// The model's RoPE, when not the default.
    pub rope: Option<RopeDesc>,
    /// The static layout's sizes (with [`Layout::Static`]).
    pub static_layout: Option<StaticLayoutDesc>,
    /// Scales of static-scale types.
    pub static_scales: Option<StaticScales>,
    /// The paged layout's block size (with [`Layout::Paged`]; without it,
    /// 16).
    pub paged_layout: Option<PagedLayoutDesc>,
    /// The windowed layers in a group of their own (with [`Layout::Cells`]
    /// and [`CacheDesc::layer_windows`]); see [`WindowLayoutDesc`].
    pub window_layout: Option<WindowLayoutDesc>,
}

impl Default for CacheDesc {
    fn default() -> Self {
        let i = sys::KVRT_CACHE_DESC_INIT;
        CacheDesc {
            n_layers: i.n_layers,
            n_heads: i.n_heads,
            n_kv_heads: i.n_kv_heads,
            head_dim_k: i.head_dim_k,
            head_dim_v: i.head_dim_v,
            capacity: i.capacity,
            max_seqs: i.max_seqs,
            type_k: ElementType::from_raw(i.type_k).unwrap_or(ElementType::F16),
            type_v: ElementType::from_raw(i.type_v).unwrap_or(ElementType::F16),
            layout: Layout::Cells,
            layer_windows: None,
            label: None,
            deferred_rope: i.flags & sys::KVRT_CACHE_DEFERRED_ROPE != 0,
            exportable: i.flags & sys::KVRT_CACHE_EXPORTABLE != 0,
            rope: None,
            static_layout: None,
            static_scales: None,
            paged_layout: None,
            window_layout: None,
        }
    }
}

/// Sizes of a cache before anything is allocated (`kvrt_cache_estimate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheEstimate {
    /// K and V bytes of one token over all layers.
    pub bytes_per_token: u64,
    /// Bytes of the stored rows.
    pub data_bytes: u64,
    /// Device memory the cache allocates.
    pub device_bytes: u64,
    /// The largest binding assumed.
    pub max_binding_bytes: u64,
}

impl CacheDesc {
    /// A cell-layout cache with F16 storage and equal K and V head dims.
    pub fn new(n_layers: u32, n_heads: u32, n_kv_heads: u32, head_dim: u32, capacity: u32) -> Self {
        CacheDesc {
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim_k: head_dim,
            capacity,
            ..Default::default()
        }
    }

    fn head_dim_v(&self) -> u32 {
        if self.head_dim_v == 0 {
            self.head_dim_k
        } else {
            self.head_dim_v
        }
    }

    /// Calls `f` with the C descriptor and its chain, all alive for the call.
    fn with_raw<R>(&self, f: impl FnOnce(&sys::kvrt_cache_desc) -> R) -> Result<R> {
        if let Some(w) = &self.layer_windows {
            if w.len() != self.n_layers as usize {
                return Err(Error::invalid(format!(
                    "layer_windows has {} entries for {} layers",
                    w.len(),
                    self.n_layers
                )));
            }
        }
        let label = opt_cstring(self.label.as_deref())?;
        let mut desc = sys::KVRT_CACHE_DESC_INIT;
        desc.n_layers = self.n_layers;
        desc.n_heads = self.n_heads;
        desc.n_kv_heads = self.n_kv_heads;
        desc.head_dim_k = self.head_dim_k;
        desc.head_dim_v = self.head_dim_v;
        desc.capacity = self.capacity;
        desc.max_seqs = self.max_seqs;
        desc.type_k = self.type_k.raw();
        desc.type_v = self.type_v.raw();
        desc.layout = match self.layout {
            Layout::Cells => sys::KVRT_LAYOUT_CELLS,
            Layout::Static => sys::KVRT_LAYOUT_STATIC,
            Layout::Paged => sys::KVRT_LAYOUT_PAGED,
        };
        desc.layer_windows = self.layer_windows.as_ref().map_or(ptr::null(), |w| w.as_ptr());
        desc.label = opt_ptr(&label);
        desc.flags = if self.deferred_rope {
            sys::KVRT_CACHE_DEFERRED_ROPE
        } else {
            0
        } | if self.exportable {
            sys::KVRT_CACHE_EXPORTABLE
        } else {
            0
        };

        let mut rope = sys::KVRT_ROPE_DESC_INIT;
        let mut layout = sys::KVRT_STATIC_LAYOUT_DESC_INIT;
        let mut style = sys::KVRT_STATIC_STYLE_DESC_INIT;
        let mut scales = sys::KVRT_STATIC_SCALES_DESC_INIT;
        let mut paged = PagedLayoutDesc::default().raw(ptr::null());
        let window: sys::kvrt_window_layout_desc;
        let mut next: *const std::ffi::c_void = ptr::null();
        if let Some(r) = &self.rope {
            rope.mode = match r.mode {
                RopeMode::Normal => sys::KVRT_ROPE_MODE_NORMAL,
                RopeMode::Neox => sys::KVRT_ROPE_MODE_NEOX,
            };
            rope.n_rot = r.n_rot;
            rope.freq_base = r.freq_base;
            rope.freq_scale = r.freq_scale;
            rope.ext_factor = r.ext_factor;
            rope.attn_factor = r.attn_factor;
            rope.beta_fast = r.beta_fast;
            rope.beta_slow = r.beta_slow;
            rope.n_ctx_orig = r.n_ctx_orig;
            rope.next = next;
            next = (&rope as *const sys::kvrt_rope_desc).cast();
        }
        if let Some(l) = &self.static_layout {
            if l.style == StaticStyle::SmartMask {
                style.style = sys::KVRT_STATIC_STYLE_SMART_MASK;
                style.next = next;
                next = (&style as *const sys::kvrt_static_style_desc).cast();
            }
            layout.seq_len = l.seq_len;
            layout.reserve = l.reserve;
            layout.next = next;
            next = (&layout as *const sys::kvrt_static_layout_desc).cast();
        }
        if let Some(s) = &self.static_scales {
            let count = if s.k_scales.is_empty() {
                s.v_scales.len()
            } else {
                s.k_scales.len()
            };
            for (name, len) in [
                ("k_scales", s.k_scales.len()),
                ("k_zero_points", s.k_zero_points.len()),
                ("v_scales", s.v_scales.len()),
                ("v_zero_points", s.v_zero_points.len()),
            ] {
                if len != 0 && len != count {
                    return Err(Error::invalid(format!(
                        "static scales: {name} has {len} entries, expected {count}"
                    )));
                }
            }
            if s.k_scales.len() != s.k_zero_points.len() || s.v_scales.len() != s.v_zero_points.len() {
                return Err(Error::invalid(
                    "static scales: scales and zero points differ in number",
                ));
            }
            scales.count = len_u32(count, "static scales")?;
            let p = |v: &Vec<f32>| if v.is_empty() { ptr::null() } else { v.as_ptr() };
            let z = |v: &Vec<i32>| if v.is_empty() { ptr::null() } else { v.as_ptr() };
            scales.k_scales = p(&s.k_scales);
            scales.k_zero_points = z(&s.k_zero_points);
            scales.v_scales = p(&s.v_scales);
            scales.v_zero_points = z(&s.v_zero_points);
            scales.next = next;
            next = (&scales as *const sys::kvrt_static_scales_desc).cast();
        }
        if let Some(p) = &self.paged_layout {
            paged.block_size = p.block_size;
            paged.next = next;
            next = (&paged as *const sys::kvrt_paged_layout_desc).cast();
        }
        if let Some(w) = &self.window_layout {
            window = w.raw(next);
            next = (&window as *const sys::kvrt_window_layout_desc).cast();
        }
        desc.next = next;
        Ok(f(&desc))
    }

    fn estimate_in(&self, ctx: sys::kvrt_context) -> Result<CacheEstimate> {
        let mut out = sys::KVRT_CACHE_ESTIMATE_INIT;
        // SAFETY: Safe; desc and out live through the call.
        let r = self.with_raw(|d| unsafe { sys::kvrt_cache_estimate_size(ctx, d, &mut out) })?;
        check(r)?;
        Ok(CacheEstimate {
            bytes_per_token: out.bytes_per_token,
            data_bytes: out.data_bytes,
            device_bytes: out.device_bytes,
            max_binding_bytes: out.max_binding_bytes,
        })
    }

    /// The sizes of this cache without a context (128 MiB bindings assumed;
    /// `kvrt_cache_estimate_size`).
    pub fn estimate(&self) -> Result<CacheEstimate> {
        self.estimate_in(ptr::null_mut())
    }
}

/// Occupancy of a cache (`kvrt_cache_info`).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct CacheInfo {
    /// Cells.
    pub capacity: u32,
    /// Cells in use.
    pub used: u32,
    /// Cells an attention pass reads.
    pub n_attend: u32,
    /// Cells whose K awaits a RoPE shift.
    pub pending_shifts: u32,
    /// Empty share of the cells below n_attend.
    pub fragmentation: f32,
    /// Device memory the cache holds.
    pub device_bytes: u64,
    /// K and V bytes of one token over all layers.
    pub bytes_per_token: u64,
    /// Stored bytes of one cell's K in one layer (all KV heads).
    pub k_row_bytes: u64,
    /// Stored bytes of one cell's V in one layer (all KV heads).
    pub v_row_bytes: u64,
}

/// Options of an attention call (`kvrt_attention_params`); [`Default`] is
/// `KVRT_ATTENTION_PARAMS_INIT`.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct AttentionParams {
    /// Let queries see later positions too (`KVRT_ATTENTION_NON_CAUSAL`).
    pub non_causal: bool,
    /// Logit scale; 0 = 1/sqrt(head_dim_k).
    pub scale: f32,
    /// Logit soft-capping; 0 = off.
    pub softcap: f32,
    /// ALiBi maximum bias; 0 = off.
    pub max_bias: f32,
    /// Cells with position < n_keep are visible whatever the window.
    pub n_keep: u32,
    /// Learned sink logit per query head (n_heads values).
    pub sinks: Option<Vec<f32>>,
}

/// What to evaluate again after [`Cache::discard_for_reevaluation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reevaluation {
    /// The first of the tokens to evaluate again, at its old position.
    pub src_pos: i32,
    /// Where to store them now.
    pub dst_pos: i32,
    /// How many.
    pub count: i32,
}

/// Where one static window lies (`kvrt_static_window`); borrows the cache.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct StaticWindow<'c> {
    /// The cache-owned buffer holding the window.
    pub buffer: CacheBuffer<'c>,
    /// Bytes to the window's first row.
    pub offset: u64,
    /// Bytes between rows.
    pub row_stride: u64,
    /// (S-1) * row_stride.
    pub bytes: u64,
    /// S-1.
    pub rows: u32,
    /// Valid rows: the window's last n_valid rows (shift pointer), or
    /// n_valid rows of the ring (smart mask).
    pub n_valid: u32,
    /// Position of the oldest valid row; -1 when empty.
    pub pos_first: i32,
    /// Position of the newest valid row; -1 when empty.
    pub pos_last: i32,
    /// The array's stored type.
    pub element_type: Option<ElementType>,
    /// Static-scale quantization scale; 0 otherwise.
    pub scale: f32,
    /// Static-scale zero point; 0 otherwise.
    pub zero_point: i32,
}

/// Counters of the static windows' movement (`kvrt_static_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StaticStats {
    /// Tokens appended.
    pub rows_appended: u64,
    /// Slides that copied rows.
    pub slides: u64,
    /// Rows copied per region.
    pub rows_moved: u64,
    /// Device bytes copied by slides.
    pub bytes_moved: u64,
}

/// The mask a static graph takes (`kvrt_static_mask_desc`, less its
/// format, which the method that writes it names).
///
/// A graph of `n_new` new rows per step binds the window's last
/// `S - n_new` rows as its past, at the window's offset plus
/// `(n_new - 1) * row_stride`; its mask is `n_new` rows of `S` entries: the
/// past (left-padded), then the step's own tokens, causal.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct GraphMask {
    /// New tokens per step: 1 for a decode graph, N for an AR-N graph
    /// (1..=S-1).
    pub n_new: u32,
    /// The masked entries' value for f32 and f16 masks when the graph keeps
    /// its scores finite (for example `-65535.0`): finite and below 0.
    /// `None`: -inf.
    pub masked_value: Option<f32>,
}

impl GraphMask {
    /// The mask of a graph of `n_new` new rows per step, masked entries -inf.
    pub fn new(n_new: u32) -> Self {
        Self {
            n_new,
            masked_value: None,
        }
    }
}

impl Default for GraphMask {
    fn default() -> Self {
        Self {
            n_new: 1,
            masked_value: None,
        }
    }
}

impl GraphMask {
    fn desc(&self, format: sys::kvrt_mask_format) -> sys::kvrt_static_mask_desc {
        sys::kvrt_static_mask_desc {
            format,
            flags: if self.masked_value.is_some() {
                sys::KVRT_MASK_FINITE
            } else {
                0
            },
            masked_value: self.masked_value.unwrap_or(0.0),
            n_new: self.n_new,
            ..sys::KVRT_STATIC_MASK_DESC_INIT
        }
    }
}

/// A KV cache (`kvrt_cache`): the keys and values of one model's layers for
/// up to `capacity` tokens shared by up to `max_seqs` sequences.
///
/// `Cache` is `Send` but not `Sync`: the header's "Caches and memories are
/// used by one thread at a time". Calls that change it take `&mut self`;
/// those recorded into a stream go through [`Recording`], which borrows the
/// cache until submission. It keeps its context alive.
pub struct Cache {
    raw: sys::kvrt_cache,
    n_layers: u32,
    n_heads: u32,
    n_kv_heads: u32,
    head_dim_k: u32,
    head_dim_v: u32,
    type_k: ElementType,
    type_v: ElementType,
    _ctx: Arc<ContextInner>,
}

// SAFETY: kvrt.h "Threading": "Caches and memories are used by one thread at
// a time" (not a particular thread), and "A destroy function needs only the
// object it destroys". Not Sync: every cache call is "Unsafe (on the cache)".
unsafe impl Send for Cache {}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").field("raw", &self.raw).finish()
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        // SAFETY: sole owner; no StaticWindow or Recording borrows it.
        unsafe { sys::kvrt_cache_destroy(self.raw) };
    }
}

impl Context {
    /// Creates an empty cache (`kvrt_cache_create`).
    pub fn create_cache(&self, desc: &CacheDesc) -> Result<Cache> {
        let mut raw = ptr::null_mut();
        // SAFETY: Safe on the context; the descriptor lives through the call.
        let r = desc.with_raw(|d| unsafe { sys::kvrt_cache_create(self.inner.raw, d, &mut raw) })?;
        check(r)?;
        Ok(Cache {
            raw,
            n_layers: desc.n_layers,
            n_heads: desc.n_heads,
            n_kv_heads: desc.n_kv_heads,
            head_dim_k: desc.head_dim_k,
            head_dim_v: desc.head_dim_v(),
            type_k: desc.type_k,
            type_v: desc.type_v,
            _ctx: self.inner.clone(),
        })
    }

    /// The sizes of a cache on this context's device (`kvrt_cache_estimate_size`).
    pub fn estimate_cache(&self, desc: &CacheDesc) -> Result<CacheEstimate> {
        desc.estimate_in(self.inner.raw)
    }
}

fn out_cell_vec(n: usize) -> Vec<u32> {
    vec![0u32; n]
}

impl Cache {
    /// The raw handle, valid while this cache lives.
    pub fn as_raw(&self) -> sys::kvrt_cache {
        self.raw
    }

    /// Layers.
    pub fn n_layers(&self) -> u32 {
        self.n_layers
    }
    /// Query heads.
    pub fn n_heads(&self) -> u32 {
        self.n_heads
    }
    /// K/V heads.
    pub fn n_kv_heads(&self) -> u32 {
        self.n_kv_heads
    }
    /// K head dimension.
    pub fn head_dim_k(&self) -> u32 {
        self.head_dim_k
    }
    /// V head dimension.
    pub fn head_dim_v(&self) -> u32 {
        self.head_dim_v
    }
    /// Stored type of K.
    pub fn type_k(&self) -> ElementType {
        self.type_k
    }
    /// Stored type of V.
    pub fn type_v(&self) -> ElementType {
        self.type_v
    }

    fn check_kv(&self, layers: Layers, n_tokens: u32, k: &TensorRef, v: &TensorRef) -> Result<()> {
        let nl = layers.count(self.n_layers);
        k.check("k", nl, n_tokens, self.n_kv_heads, self.head_dim_k)?;
        v.check("v", nl, n_tokens, self.n_kv_heads, self.head_dim_v)
    }

    /// Reads the occupancy (`kvrt_cache_get_info`).
    pub fn info(&self) -> Result<CacheInfo> {
        let mut i = sys::KVRT_CACHE_INFO_INIT;
        // SAFETY: Unsafe on the cache: Cache is not Sync.
        check(unsafe { sys::kvrt_cache_get_info(self.raw, &mut i) })?;
        Ok(CacheInfo {
            capacity: i.capacity,
            used: i.used,
            n_attend: i.n_attend,
            pending_shifts: i.pending_shifts,
            fragmentation: i.fragmentation,
            device_bytes: i.device_bytes,
            bytes_per_token: i.bytes_per_token,
            k_row_bytes: i.k_row_bytes,
            v_row_bytes: i.v_row_bytes,
        })
    }

    /// Places `batch` in free cells and writes its K and V, synchronously,
    /// all or nothing (`kvrt_cache_store`). Returns the cell of each token.
    pub fn store(&mut self, batch: &Batch, layers: Layers, k: &TensorRef, v: &TensorRef) -> Result<Vec<u32>> {
        store_raw(self, ptr::null_mut(), batch, layers, k, v)
    }

    /// Places `batch` without writing data (`kvrt_cache_place`); write each
    /// layer with [`Cache::write`] afterwards. Returns the cells.
    pub fn place(&mut self, batch: &Batch) -> Result<Vec<u32>> {
        let mut tree = sys::KVRT_BATCH_TREE_INIT;
        let b = batch.raw(&mut tree);
        let mut cells = out_cell_vec(batch.len());
        // SAFETY: Unsafe on the cache (&mut); batch slices and `cells`
        // (n_tokens entries) live through the call.
        check(unsafe { sys::kvrt_cache_place(self.raw, &b, cells.as_mut_ptr()) })?;
        Ok(cells)
    }

    /// Writes K and V rows of the tokens in `cells`, synchronously (`kvrt_cache_write`).
    pub fn write(&mut self, cells: &[u32], layers: Layers, k: &TensorRef, v: &TensorRef) -> Result<()> {
        write_raw(self, ptr::null_mut(), cells, layers, k, v)
    }

    /// Reads K and V of `cells` in `layer`, dequantized to f32
    /// (`kvrt_cache_read`): `k_out` needs cells × n_kv_heads × head_dim_k
    /// values and `v_out` cells × n_kv_heads × head_dim_v; a shorter slice
    /// is an [`Error::InvalidArgument`] and nothing is written. Values
    /// beyond those are left as they were.
    pub fn read(
        &self,
        layer: u32,
        cells: &[u32],
        k_out: Option<&mut [f32]>,
        v_out: Option<&mut [f32]>,
    ) -> Result<()> {
        let layer = Layers::One(layer).raw()?;
        let (kp, k_bytes) = k_out.map_or((ptr::null_mut(), 0), |k| {
            (k.as_mut_ptr(), mem::size_of_val(k) as u64)
        });
        let (vp, v_bytes) = v_out.map_or((ptr::null_mut(), 0), |v| {
            (v.as_mut_ptr(), mem::size_of_val(v) as u64)
        });
        // SAFETY: Unsafe on the cache (not Sync); each output is passed with
        // its size in bytes, which the library checks before writing.
        check(unsafe {
            sys::kvrt_cache_read(
                self.raw,
                layer,
                len_u32(cells.len(), "cells")?,
                cells.as_ptr(),
                kp,
                k_bytes,
                vp,
                v_bytes,
            )
        })
    }

    /// Reads the stored bytes of `cells` of one layer's K or V, bit for bit
    /// (`kvrt_cache_read_raw`); `out` needs cells × k_row_bytes (or
    /// v_row_bytes) of [`CacheInfo`].
    pub fn read_raw(&self, layer: u32, array: KvArray, cells: &[u32], out: &mut [u8]) -> Result<()> {
        let layer = Layers::One(layer).raw()?;
        // SAFETY: Unsafe on the cache (not Sync); the library checks
        // `out_bytes` against what it writes.
        check(unsafe {
            sys::kvrt_cache_read_raw(
                self.raw,
                layer,
                array.raw(),
                len_u32(cells.len(), "cells")?,
                cells.as_ptr(),
                out.as_mut_ptr().cast(),
                out.len() as u64,
            )
        })
    }

    /// Drops positions [p0, p1) of `seq` (seq < 0: of every sequence; a
    /// negative bound is unbounded) (`kvrt_cache_seq_rm`). Metadata only,
    /// but for a static-layout removal that must move rows: that one copies
    /// them and waits for the device (see [`Layout::Static`]).
    pub fn seq_rm(&mut self, seq: i32, p0: i32, p1: i32) -> Result<()> {
        // SAFETY: Unsafe on the cache (&mut).
        check(unsafe { sys::kvrt_cache_seq_rm(self.raw, seq, p0, p1) })
    }

    /// Makes `dst` share the cells of `src` in [p0, p1) (`kvrt_cache_seq_cp`).
    pub fn seq_cp(&mut self, src: i32, dst: i32, p0: i32, p1: i32) -> Result<()> {
        // SAFETY: Unsafe on the cache (&mut).
        check(unsafe { sys::kvrt_cache_seq_cp(self.raw, src, dst, p0, p1) })
    }

    /// Drops every sequence but `seq` (`kvrt_cache_seq_keep`).
    pub fn seq_keep(&mut self, seq: i32) -> Result<()> {
        // SAFETY: Unsafe on the cache (&mut).
        check(unsafe { sys::kvrt_cache_seq_keep(self.raw, seq) })
    }

    /// Adds `delta` to the positions of `seq` in [p0, p1) and records the K
    /// shift (`kvrt_cache_seq_add`).
    pub fn seq_add(&mut self, seq: i32, p0: i32, p1: i32, delta: i32) -> Result<()> {
        // SAFETY: Unsafe on the cache (&mut).
        check(unsafe { sys::kvrt_cache_seq_add(self.raw, seq, p0, p1, delta) })
    }

    /// Integer-divides the positions of `seq` in [p0, p1) by `d`
    /// (`kvrt_cache_seq_div`).
    pub fn seq_div(&mut self, seq: i32, p0: i32, p1: i32, d: i32) -> Result<()> {
        // SAFETY: Unsafe on the cache (&mut).
        check(unsafe { sys::kvrt_cache_seq_div(self.raw, seq, p0, p1, d) })
    }

    /// The smallest position of `seq`, `None` when it has none (`kvrt_cache_seq_pos_min`).
    pub fn seq_pos_min(&self, seq: i32) -> Result<Option<i32>> {
        let mut p = -1;
        // SAFETY: Unsafe on the cache (not Sync).
        check(unsafe { sys::kvrt_cache_seq_pos_min(self.raw, seq, &mut p) })?;
        Ok((p >= 0).then_some(p))
    }

    /// The largest position of `seq`, `None` when it has none (`kvrt_cache_seq_pos_max`).
    pub fn seq_pos_max(&self, seq: i32) -> Result<Option<i32>> {
        let mut p = -1;
        // SAFETY: Unsafe on the cache (not Sync).
        check(unsafe { sys::kvrt_cache_seq_pos_max(self.raw, seq, &mut p) })?;
        Ok((p >= 0).then_some(p))
    }

    /// The smallest position of `seq`, at or above the window group's
    /// `n_keep`, whose rows the windowed layers still hold; if none, the
    /// smallest they hold; `None` when they hold none
    /// (`kvrt_cache_seq_window_pos_min`). Without a window group
    /// ([`CacheDesc::window_layout`]) the same as [`Cache::seq_pos_min`].
    ///
    /// After removing a sequence's tail from `p0` on, the engine can go on at
    /// `p0` when `p0 >= seq_window_pos_min + W - 1` (W the largest window);
    /// see [`WindowLayoutDesc`].
    ///
    /// Fails with [`Error::InvalidArgument`] for a sequence id out of range.
    pub fn seq_window_pos_min(&self, seq: i32) -> Result<Option<i32>> {
        let mut p = -1;
        // SAFETY: Unsafe on the cache (not Sync).
        check(unsafe { sys::kvrt_cache_seq_window_pos_min(self.raw, seq, &mut p) })?;
        Ok((p >= 0).then_some(p))
    }

    /// Frees every cell (`kvrt_cache_clear`).
    pub fn clear(&mut self) -> Result<()> {
        // SAFETY: Unsafe on the cache (&mut).
        check(unsafe { sys::kvrt_cache_clear(self.raw) })
    }

    /// Ends the verification of a token tree (`kvrt_cache_tree_accept`):
    /// `tree` is the batch that stored it, with its cells
    /// ([`Batch::with_cells`]). Keeps each token of `leaves` (indices into
    /// the batch) and its ancestors, and drops every other token of the
    /// tree, all or nothing. An empty `leaves` drops the whole tree.
    pub fn tree_accept(&mut self, tree: &Batch, leaves: &[i32]) -> Result<()> {
        let n = len_u32(leaves.len(), "leaves")?;
        let mut t = sys::KVRT_BATCH_TREE_INIT;
        let b = tree.raw(&mut t);
        // SAFETY: Unsafe on the cache (&mut); the batch's slices, `t` and
        // `leaves` live through the call.
        check(unsafe { sys::kvrt_cache_tree_accept(self.raw, &b, n, leaves.as_ptr()) })
    }

    /// Moves up to `max_moves` cells (0 = no limit) into the lowest holes when
    /// the fragmentation exceeds `threshold`, synchronously; returns the
    /// cells moved (`kvrt_cache_compact`).
    pub fn compact(&mut self, threshold: f32, max_moves: u32) -> Result<u32> {
        compact_raw(self, ptr::null_mut(), threshold, max_moves)
    }

    /// Applies every pending RoPE shift now, synchronously (`kvrt_cache_apply_shifts`).
    pub fn apply_shifts(&mut self) -> Result<()> {
        // SAFETY: Unsafe on the cache (&mut); NULL stream.
        check(unsafe { sys::kvrt_cache_apply_shifts(self.raw, ptr::null_mut()) })
    }

    /// llama.cpp's context shift of a full sequence: keeps [0, n_keep),
    /// drops the next `n_discard` positions (0 = half) and moves the rest
    /// left. Returns the new largest position + 1 (`kvrt_cache_context_shift`).
    pub fn context_shift(&mut self, seq: i32, n_keep: i32, n_discard: i32) -> Result<i32> {
        let mut n_past = 0;
        // SAFETY: Unsafe on the cache (&mut).
        check(unsafe { sys::kvrt_cache_context_shift(self.raw, seq, n_keep, n_discard, &mut n_past) })?;
        Ok(n_past)
    }

    /// Keeps [0, n_keep), drops the rest, and says which dropped tokens to
    /// evaluate again (`kvrt_cache_discard_for_reevaluation`).
    pub fn discard_for_reevaluation(
        &mut self,
        seq: i32,
        n_keep: i32,
        n_discard: i32,
    ) -> Result<Reevaluation> {
        let (mut s, mut d, mut c) = (0, 0, 0);
        // SAFETY: Unsafe on the cache (&mut); out-pointers valid.
        check(unsafe {
            sys::kvrt_cache_discard_for_reevaluation(self.raw, seq, n_keep, n_discard, &mut s, &mut d, &mut c)
        })?;
        Ok(Reevaluation {
            src_pos: s,
            dst_pos: d,
            count: c,
        })
    }

    /// Attention of `queries` over the cells of `layer`, synchronously
    /// (`kvrt_cache_attention`). `q` holds n_heads rows of head_dim_k per
    /// token; `out` receives n_heads rows of head_dim_v.
    pub fn attention(
        &mut self,
        layer: u32,
        queries: &Batch,
        q: &TensorRef,
        out: &mut OutputRef,
        params: &AttentionParams,
    ) -> Result<()> {
        attention_raw(self, ptr::null_mut(), layer, queries, q, out, params)
    }

    /// The current window of `seq` for (`layer`, `kv_head`, `array`) of a
    /// static-layout cache (`kvrt_cache_static_get_window`). It borrows the
    /// cache: store again only after dropping it.
    pub fn static_window(
        &self,
        seq: i32,
        layer: u32,
        kv_head: u32,
        array: KvArray,
    ) -> Result<StaticWindow<'_>> {
        let mut w = sys::KVRT_STATIC_WINDOW_INIT;
        let layer = Layers::One(layer).raw()?;
        // SAFETY: Unsafe on the cache (not Sync).
        check(unsafe {
            sys::kvrt_cache_static_get_window(self.raw, seq, layer, kv_head, array.raw(), &mut w)
        })?;
        let mut size = 0u64;
        // SAFETY: the window's buffer is owned by the cache and live.
        check(unsafe { sys::kvrt_buffer_get_size(w.buffer, &mut size) })?;
        Ok(StaticWindow {
            buffer: CacheBuffer {
                raw: w.buffer,
                size,
                _cache: PhantomData,
            },
            offset: w.offset,
            row_stride: w.row_stride,
            bytes: w.bytes,
            rows: w.rows,
            n_valid: w.n_valid,
            pos_first: w.pos_first,
            pos_last: w.pos_last,
            element_type: ElementType::from_raw(w.element_type),
            scale: w.scale,
            zero_point: w.zero_point,
        })
    }

    /// The attention mask of `seq`'s next step as f32 (S entries: 0 for
    /// valid rows and the new token, -inf for padding) (`kvrt_cache_static_get_mask`).
    pub fn static_mask(&self, seq: i32, out: &mut [f32]) -> Result<()> {
        // SAFETY: Unsafe on the cache (not Sync); `out_bytes` bounds the write.
        check(unsafe {
            sys::kvrt_cache_static_get_mask(
                self.raw,
                seq,
                sys::KVRT_TYPE_F32,
                out.as_mut_ptr().cast(),
                std::mem::size_of_val(out) as u64,
            )
        })
    }

    /// The mask as F16 bit patterns (0x0000 and 0xFC00).
    pub fn static_mask_f16(&self, seq: i32, out: &mut [u16]) -> Result<()> {
        // SAFETY: as in static_mask.
        check(unsafe {
            sys::kvrt_cache_static_get_mask(
                self.raw,
                seq,
                sys::KVRT_TYPE_F16,
                out.as_mut_ptr().cast(),
                std::mem::size_of_val(out) as u64,
            )
        })
    }

    /// The mask of a static graph for `seq`'s next step, as f32 (0 attend,
    /// -inf or `mask.masked_value` masked): `mask.n_new * S` entries, or
    /// `mask.n_new * (S - 1 + mask.n_new)` in the smart-mask style
    /// (`kvrt_cache_static_get_graph_mask`, `KVRT_MASK_F32`).
    pub fn static_graph_mask(&self, seq: i32, mask: &GraphMask, out: &mut [f32]) -> Result<()> {
        self.graph_mask(
            seq,
            &mask.desc(sys::KVRT_MASK_F32),
            out.as_mut_ptr().cast(),
            std::mem::size_of_val(out),
        )
    }

    /// The same mask as f16 bit patterns (`KVRT_MASK_F16`: 0x0000 attend,
    /// 0xFC00 or the masked value rounded to half masked).
    pub fn static_graph_mask_f16(&self, seq: i32, mask: &GraphMask, out: &mut [u16]) -> Result<()> {
        self.graph_mask(
            seq,
            &mask.desc(sys::KVRT_MASK_F16),
            out.as_mut_ptr().cast(),
            std::mem::size_of_val(out),
        )
    }

    /// The mask of a graph of `n_new` new rows as uint16 (`KVRT_MASK_U16`:
    /// 65535 attend, 0 masked).
    pub fn static_graph_mask_u16(&self, seq: i32, n_new: u32, out: &mut [u16]) -> Result<()> {
        let mask = GraphMask {
            n_new,
            masked_value: None,
        };
        self.graph_mask(
            seq,
            &mask.desc(sys::KVRT_MASK_U16),
            out.as_mut_ptr().cast(),
            std::mem::size_of_val(out),
        )
    }

    fn graph_mask(
        &self,
        seq: i32,
        desc: &sys::kvrt_static_mask_desc,
        out: *mut std::ffi::c_void,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: Unsafe on the cache (not Sync); `bytes` is the size of the
        // slice `out` points to and bounds the write; `desc` lives for the call.
        check(unsafe { sys::kvrt_cache_static_get_graph_mask(self.raw, seq, desc, out, bytes as u64) })
    }

    /// Makes room for `n_rows` rows right after `seq`'s window, where a graph
    /// writes its tokens' rows in place; [`Cache::place`] then takes the
    /// accepted ones with no copy (`kvrt_cache_static_make_room`). Slides the
    /// window's valid rows to the region's start first where the region lacks
    /// the room (synchronous); ask for the windows after it.
    pub fn static_make_room(&mut self, seq: i32, n_rows: u32) -> Result<()> {
        // SAFETY: Unsafe on the cache (&mut).
        check(unsafe { sys::kvrt_cache_static_make_room(self.raw, seq, n_rows) })
    }

    /// The window counters of `seq`, or of every sequence with `None`
    /// (`kvrt_cache_static_get_stats`).
    pub fn static_stats(&self, seq: Option<i32>) -> Result<StaticStats> {
        let mut s = sys::KVRT_STATIC_STATS_INIT;
        // SAFETY: Unsafe on the cache (not Sync).
        check(unsafe { sys::kvrt_cache_static_get_stats(self.raw, seq.unwrap_or(-1), &mut s) })?;
        Ok(StaticStats {
            rows_appended: s.rows_appended,
            slides: s.slides,
            rows_moved: s.rows_moved,
            bytes_moved: s.bytes_moved,
        })
    }

    /// Copies sequence `src_seq` of this cache into the empty sequence
    /// `dst_seq` of `dst`, synchronously; returns the tokens copied
    /// (`kvrt_cache_seq_transfer`).
    pub fn seq_transfer(&mut self, src_seq: i32, dst: &mut Cache, dst_seq: i32) -> Result<u32> {
        let mut n = 0;
        // SAFETY: Unsafe on both caches, each borrowed mutably.
        check(unsafe { sys::kvrt_cache_seq_transfer(self.raw, src_seq, dst.raw, dst_seq, &mut n) })?;
        Ok(n)
    }

    /// Copies sequence `src_seq` into the empty sequence `dst_seq` of this
    /// same cache (`kvrt_cache_seq_transfer` with one cache).
    pub fn seq_transfer_within(&mut self, src_seq: i32, dst_seq: i32) -> Result<u32> {
        let mut n = 0;
        // SAFETY: Unsafe on the cache (&mut).
        check(unsafe { sys::kvrt_cache_seq_transfer(self.raw, src_seq, self.raw, dst_seq, &mut n) })?;
        Ok(n)
    }
}

fn store_raw(
    cache: &Cache,
    stream: sys::kvrt_stream,
    batch: &Batch,
    layers: Layers,
    k: &TensorRef,
    v: &TensorRef,
) -> Result<Vec<u32>> {
    cache.check_kv(layers, batch.n_tokens(), k, v)?;
    let layer = layers.raw()?;
    let mut tree = sys::KVRT_BATCH_TREE_INIT;
    let (b, kr, vr) = (batch.raw(&mut tree), k.raw(), v.raw());
    let mut cells = out_cell_vec(batch.len());
    // SAFETY: the caller holds the cache exclusively (&mut, or a Recording's
    // borrow on this thread) and the stream; host data was checked against
    // the geometry; `cells` has n_tokens entries.
    check(unsafe { sys::kvrt_cache_store(cache.raw, stream, &b, layer, &kr, &vr, cells.as_mut_ptr()) })?;
    Ok(cells)
}

fn write_raw(
    cache: &Cache,
    stream: sys::kvrt_stream,
    cells: &[u32],
    layers: Layers,
    k: &TensorRef,
    v: &TensorRef,
) -> Result<()> {
    let n = len_u32(cells.len(), "cells")?;
    cache.check_kv(layers, n, k, v)?;
    let layer = layers.raw()?;
    let (kr, vr) = (k.raw(), v.raw());
    // SAFETY: as in store_raw.
    check(unsafe { sys::kvrt_cache_write(cache.raw, stream, n, cells.as_ptr(), layer, &kr, &vr) })
}

fn compact_raw(cache: &Cache, stream: sys::kvrt_stream, threshold: f32, max_moves: u32) -> Result<u32> {
    let mut moved = 0;
    // SAFETY: as in store_raw.
    check(unsafe { sys::kvrt_cache_compact(cache.raw, stream, threshold, max_moves, &mut moved) })?;
    Ok(moved)
}

fn attention_raw(
    cache: &Cache,
    stream: sys::kvrt_stream,
    layer: u32,
    queries: &Batch,
    q: &TensorRef,
    out: &mut OutputRef,
    params: &AttentionParams,
) -> Result<()> {
    let n = queries.n_tokens();
    q.check("q", 1, n, cache.n_heads, cache.head_dim_k)?;
    out.check("out", 1, n, cache.n_heads, cache.head_dim_v)?;
    if let Some(s) = &params.sinks {
        if s.len() != cache.n_heads as usize {
            return Err(Error::invalid(format!(
                "sinks has {} entries for {} heads",
                s.len(),
                cache.n_heads
            )));
        }
    }
    let layer = Layers::One(layer).raw()?;
    let mut p = sys::KVRT_ATTENTION_PARAMS_INIT;
    p.flags = if params.non_causal {
        sys::KVRT_ATTENTION_NON_CAUSAL
    } else {
        0
    };
    p.scale = params.scale;
    p.softcap = params.softcap;
    p.max_bias = params.max_bias;
    p.n_keep = params.n_keep;
    p.sinks = params.sinks.as_ref().map_or(ptr::null(), |s| s.as_ptr());
    let mut tree = sys::KVRT_BATCH_TREE_INIT;
    let (b, qr, or) = (queries.raw(&mut tree), q.raw(), out.raw());
    // SAFETY: as in store_raw; host output was checked to hold every row.
    check(unsafe { sys::kvrt_cache_attention(cache.raw, stream, layer, &b, &qr, &or, &p) })
}

pub(crate) fn no_host_output(out: &OutputRef) -> Result<()> {
    if out.is_host() {
        return Err(Error::invalid(
            "host outputs need a synchronous call, not a recording",
        ));
    }
    Ok(())
}

impl<'r> Recording<'r> {
    /// Records [`Cache::store`] into this stream; the cells are taken at once
    /// and given back if the recording is dropped or fails.
    pub fn store(
        &mut self,
        cache: &'r Cache,
        batch: &Batch,
        layers: Layers,
        k: &TensorRef,
        v: &TensorRef,
    ) -> Result<Vec<u32>> {
        store_raw(cache, self.raw(), batch, layers, k, v)
    }

    /// Records [`Cache::write`] into this stream.
    pub fn write(
        &mut self,
        cache: &'r Cache,
        cells: &[u32],
        layers: Layers,
        k: &TensorRef,
        v: &TensorRef,
    ) -> Result<()> {
        write_raw(cache, self.raw(), cells, layers, k, v)
    }

    /// Records [`Cache::compact`]; metadata changes when the submission is accepted.
    pub fn compact(&mut self, cache: &'r Cache, threshold: f32, max_moves: u32) -> Result<u32> {
        compact_raw(cache, self.raw(), threshold, max_moves)
    }

    /// Records [`Cache::apply_shifts`].
    pub fn apply_shifts(&mut self, cache: &'r Cache) -> Result<()> {
        // SAFETY: the cache is borrowed by this recording; the stream is exclusive.
        check(unsafe { sys::kvrt_cache_apply_shifts(cache.raw, self.raw()) })
    }

    /// Records [`Cache::attention`]; `out` must be a buffer.
    pub fn attention(
        &mut self,
        cache: &'r Cache,
        layer: u32,
        queries: &Batch,
        q: &TensorRef,
        out: &mut OutputRef,
        params: &AttentionParams,
    ) -> Result<()> {
        no_host_output(out)?;
        attention_raw(cache, self.raw(), layer, queries, q, out, params)
    }
}

//! The model's KV cache: a kvrt cache, cell, static or paged layout. The
//! engine places each batch once, then writes every layer's K and V into
//! those cells and runs that layer's attention, all through kvrt.

use anyhow::{bail, Result};
use kvrt::{
    AttentionParams, Batch, Cache, CacheDesc, Context, ElementType, Layers, Layout, OutputRef,
    PagedLayoutDesc, RopeDesc, RopeMode, StaticLayoutDesc, TensorRef,
};

use crate::model::Hparams;

/// The K/V storage types the engine offers.
pub fn parse_kv_type(s: &str) -> Result<ElementType> {
    Ok(match s {
        "f32" => ElementType::F32,
        "f16" => ElementType::F16,
        "q8_0" => ElementType::Q8_0,
        "q4_0" => ElementType::Q4_0,
        _ => bail!("unknown K/V type `{s}` (f32, f16, q8_0 or q4_0)"),
    })
}

/// Tokens per block of the paged layout.
pub const PAGED_BLOCK: u32 = 16;

/// One kvrt cache holding every layer of the model.
pub struct Kv {
    pub cache: Cache,
    cells: Vec<u32>,
    params: AttentionParams,
    /// Context shifts done (each over one sequence).
    pub shifts: u32,
}

impl Kv {
    /// A cache for `hp` with `kv_type` storage: `capacity` cells in the cell
    /// layout, windows of `capacity` rows per sequence in the static one, or
    /// `capacity` cells rounded up to blocks of `PAGED_BLOCK` in the paged one.
    pub fn new(
        ctx: &Context,
        hp: &Hparams,
        kv_type: ElementType,
        layout: Layout,
        capacity: u32,
        max_seqs: u32,
        label: &str,
    ) -> Result<Self> {
        let mut desc = CacheDesc::new(
            hp.n_layers as u32,
            hp.n_heads as u32,
            hp.n_kv_heads as u32,
            hp.head_dim as u32,
            capacity,
        );
        desc.type_k = kv_type;
        desc.type_v = kv_type;
        desc.max_seqs = max_seqs;
        desc.layout = layout;
        desc.label = Some(label.to_string());
        // The model's RoPE, which kvrt's K shifts must reproduce: llama's
        // "normal" mode (pairs (2i, 2i+1)) over the whole head.
        desc.rope = Some(RopeDesc::new(
            RopeMode::Normal,
            hp.rope_dim as u32,
            hp.rope_freq_base,
        ));
        if layout == Layout::Paged {
            desc.capacity = capacity.div_ceil(PAGED_BLOCK) * PAGED_BLOCK;
            desc.paged_layout = Some(PagedLayoutDesc::new(PAGED_BLOCK));
        }
        if layout == Layout::Static {
            desc.capacity = 0;
            desc.static_layout = Some(StaticLayoutDesc::new(capacity + 1));
        }
        Ok(Kv {
            cache: ctx.create_cache(&desc)?,
            cells: Vec::new(),
            params: AttentionParams::default(),
            shifts: 0,
        })
    }

    /// Takes cells for a batch: token i at `positions[i]` of `seqs[i]`.
    pub fn place(&mut self, positions: &[i32], seqs: &[i32]) -> Result<()> {
        self.cells = self.cache.place(&Batch::new(positions, seqs)?)?;
        Ok(())
    }

    /// Writes one layer's K and V ([tokens, kv_heads, head_dim], f32) of the
    /// placed batch.
    pub fn write(&mut self, layer: u32, k: &[f32], v: &[f32]) -> Result<()> {
        self.cache.write(
            &self.cells,
            Layers::One(layer),
            &TensorRef::host_f32(k),
            &TensorRef::host_f32(v),
        )?;
        Ok(())
    }

    /// Attention of the batch's queries ([tokens, heads, head_dim], f32,
    /// after RoPE) over `layer`; the result goes to `out`, same shape.
    pub fn attention(
        &mut self,
        layer: u32,
        positions: &[i32],
        seqs: &[i32],
        q: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        self.cache.attention(
            layer,
            &Batch::new(positions, seqs)?,
            &TensorRef::host_f32(q),
            &mut OutputRef::host_f32(out),
            &self.params,
        )?;
        Ok(())
    }

    /// Free cells (cell layout).
    pub fn free_cells(&self) -> Result<u32> {
        let i = self.cache.info()?;
        Ok(i.capacity - i.used)
    }

    /// llama.cpp's context shift of `seq`: keeps its first `n_keep`
    /// positions, drops half of the rest, moves the others left (the K
    /// rotation runs on the device before the next attention). Returns the
    /// sequence's next position.
    pub fn context_shift(&mut self, seq: i32, n_keep: i32) -> Result<i32> {
        let n_past = self.cache.context_shift(seq, n_keep, 0)?;
        self.shifts += 1;
        Ok(n_past)
    }

    /// Device memory the cache holds.
    pub fn device_bytes(&self) -> Result<u64> {
        Ok(self.cache.info()?.device_bytes)
    }
}

//! The model's KV cache: a kvrt cache, cell, static or paged layout. The
//! engine places each batch once, then for every layer records the write of
//! its K and V into those cells and its attention into one stream: one
//! submission and one wait per layer, the output read once.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use kvrt::{
    AttentionParams, Batch, Buffer, Cache, CacheDesc, Context, ElementType, Layers, Layout,
    OutputRef, PagedLayoutDesc, RopeDesc, RopeMode, StaticLayoutDesc, Stream, StreamDesc,
    TensorRef,
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
    ctx: Context,
    /// Each layer's write and attention, one submission per layer.
    stream: Stream,
    /// Where attention writes; grown to the largest batch.
    out: Option<Buffer>,
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
            ctx: ctx.clone(),
            stream: ctx.create_stream(&StreamDesc::default())?,
            out: None,
            shifts: 0,
        })
    }

    /// Takes cells for a batch: token i at `positions[i]` of `seqs[i]`.
    pub fn place(&mut self, positions: &[i32], seqs: &[i32]) -> Result<()> {
        self.cells = self.cache.place(&Batch::new(positions, seqs)?)?;
        Ok(())
    }

    /// Writes one layer's K and V ([tokens, kv_heads, head_dim], f32) into
    /// the placed batch's cells and runs that layer's attention of the
    /// batch's queries `q` ([tokens, heads, head_dim], f32, after RoPE) into
    /// `out` (same shape). Both are recorded into one stream: one
    /// submission, one wait, the output read once. Returns the time spent
    /// recording (staging the host data, recording the dispatches) and the
    /// time spent submitting, waiting and reading.
    #[allow(clippy::too_many_arguments)]
    pub fn write_attention(
        &mut self,
        layer: u32,
        k: &[f32],
        v: &[f32],
        positions: &[i32],
        seqs: &[i32],
        q: &[f32],
        out: &mut [f32],
    ) -> Result<(Duration, Duration)> {
        let bytes = std::mem::size_of_val(out) as u64;
        if self.out.as_ref().is_none_or(|b| b.size() < bytes) {
            let size = bytes.next_power_of_two().max(4096);
            self.out = Some(
                self.ctx
                    .create_buffer_labeled(size, Some("attention output"))?,
            );
        }
        let Some(buf) = self.out.as_ref() else {
            bail!("no attention output buffer");
        };
        let t = Instant::now();
        let mut rec = self.stream.begin()?;
        rec.write(
            &self.cache,
            &self.cells,
            Layers::One(layer),
            &TensorRef::host_f32(k),
            &TensorRef::host_f32(v),
        )?;
        rec.attention(
            &self.cache,
            layer,
            &Batch::new(positions, seqs)?,
            &TensorRef::host_f32(q),
            &mut OutputRef::buffer(buf, ElementType::F32),
            &self.params,
        )?;
        let recorded = t.elapsed();
        rec.submit()?;
        self.stream.wait(Duration::MAX)?;
        buf.download(0, out)?;
        Ok((recorded, t.elapsed() - recorded))
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

//! A llama-architecture model read from a GGUF file, with its matmuls run on
//! the CPU by candle's quantized kernels and its attention in kvrt.
//!
//! The forward pass follows the llama graph: token embedding; per layer
//! RMSNorm, Q/K/V projections, RoPE on Q and K (here, in the engine, as
//! llama-style engines do), K and V stored in kvrt, attention in kvrt,
//! output projection and residual; RMSNorm, SwiGLU feed-forward and
//! residual; a final RMSNorm and the output projection (tied to the token
//! embedding when the file has no `output.weight`).

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use candle_core::quantized::{gguf_file, QMatMul};
use candle_core::{DType, Device, Module, Tensor};
use candle_transformers::quantized_nn::RmsNorm;

use crate::kv::Kv;

/// The hyper-parameters, read from the GGUF's metadata.
#[derive(Debug, Clone)]
pub struct Hparams {
    pub arch: String,
    pub name: String,
    pub n_layers: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rope_dim: usize,
    pub rope_freq_base: f32,
    pub rms_eps: f64,
    pub context_length: usize,
    pub vocab_size: usize,
}

impl Hparams {
    /// Reads the llama-architecture keys; refuses other architectures and
    /// RoPE variants this engine does not implement (scaling, partial RoPE).
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Self> {
        let get = |k: &str| {
            ct.metadata
                .get(k)
                .ok_or_else(|| anyhow!("the GGUF has no `{k}`"))
        };
        let arch = get("general.architecture")?.to_string()?.clone();
        if arch != "llama" {
            bail!("general.architecture is `{arch}`; this engine runs llama-architecture models");
        }
        let u = |k: &str| -> Result<usize> { Ok(get(&format!("{arch}.{k}"))?.to_u32()? as usize) };
        let n_embd = u("embedding_length")?;
        let n_heads = u("attention.head_count")?;
        let n_kv_heads = u("attention.head_count_kv")?;
        if n_heads == 0 || n_kv_heads == 0 || n_embd % n_heads != 0 || n_heads % n_kv_heads != 0 {
            bail!("inconsistent heads: {n_heads} query heads, {n_kv_heads} KV heads, embedding {n_embd}");
        }
        let head_dim = n_embd / n_heads;
        let rope_dim = u("rope.dimension_count").unwrap_or(head_dim);
        if rope_dim != head_dim {
            bail!("partial RoPE ({rope_dim} of {head_dim} dimensions) is not implemented here");
        }
        if ct
            .metadata
            .contains_key(&format!("{arch}.rope.scaling.type"))
        {
            bail!("RoPE scaling is not implemented here");
        }
        let f = |k: &str, default: f32| -> f32 {
            ct.metadata
                .get(&format!("{arch}.{k}"))
                .and_then(|v| v.to_f32().ok())
                .unwrap_or(default)
        };
        let vocab_size = match ct.metadata.get(&format!("{arch}.vocab_size")) {
            Some(v) => v.to_u32()? as usize,
            None => get("tokenizer.ggml.tokens")?.to_vec()?.len(),
        };
        Ok(Hparams {
            name: ct
                .metadata
                .get("general.name")
                .and_then(|v| v.to_string().ok())
                .cloned()
                .unwrap_or_default(),
            n_layers: u("block_count")?,
            n_ff: u("feed_forward_length")?,
            context_length: u("context_length")?,
            rope_freq_base: f("rope.freq_base", 10000.0),
            rms_eps: f("attention.layer_norm_rms_epsilon", 1e-5) as f64,
            arch,
            n_embd,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_dim,
            vocab_size,
        })
    }
}

struct Layer {
    attn_norm: RmsNorm,
    wq: QMatMul,
    wk: QMatMul,
    wv: QMatMul,
    wo: QMatMul,
    ffn_norm: RmsNorm,
    gate: QMatMul,
    down: QMatMul,
    up: QMatMul,
}

/// Where the time of forward passes went.
#[derive(Debug, Default, Clone, Copy)]
pub struct TimeSplit {
    /// Everything on the CPU: matmuls, norms, RoPE, the output projection.
    pub cpu: Duration,
    /// kvrt calls: placement, K/V writes, attention (and the shifts they apply).
    pub kv: Duration,
    /// Of `kv`: recording each layer's K/V write and attention (staging the
    /// host data, recording the dispatches).
    pub kv_record: Duration,
    /// Of `kv`: submitting each layer's one submission, waiting for it and
    /// reading its output (the device's work and its latency).
    pub kv_wait: Duration,
}

/// The model's weights and RoPE tables.
pub struct Model {
    pub hp: Hparams,
    embedding: Tensor,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: QMatMul,
    cos: Tensor,
    sin: Tensor,
    pub time: TimeSplit,
}

/// The RoPE tables of llama's "normal" mode (rotated pairs (2i, 2i+1)):
/// theta_i = base^(-2i/d), angle = position * theta_i, for positions
/// 0..n_pos, as f32 in the same order of operations as the GGUF reference.
pub fn rope_tables(
    head_dim: usize,
    base: f32,
    n_pos: usize,
    dev: &Device,
) -> Result<(Tensor, Tensor)> {
    let theta: Vec<f32> = (0..head_dim)
        .step_by(2)
        .map(|i| 1f32 / base.powf(i as f32 / head_dim as f32))
        .collect();
    let theta = Tensor::new(theta.as_slice(), dev)?;
    let angles = Tensor::arange(0, n_pos as u32, dev)?
        .to_dtype(DType::F32)?
        .reshape((n_pos, 1))?
        .matmul(&theta.reshape((1, head_dim / 2))?)?;
    Ok((angles.cos()?, angles.sin()?))
}

impl Model {
    /// Loads the weights of `path` (already parsed as `ct`).
    pub fn load(ct: &gguf_file::Content, file: &mut std::fs::File, dev: &Device) -> Result<Self> {
        let hp = Hparams::from_gguf(ct)?;
        let mut tensor = |name: &str| {
            ct.tensor(file, name, dev)
                .with_context(|| format!("reading tensor `{name}`"))
        };
        let embedding_q = tensor("token_embd.weight")?;
        let embedding = embedding_q.dequantize(dev)?;
        let norm = RmsNorm::from_qtensor(tensor("output_norm.weight")?, hp.rms_eps)?;
        let output = match tensor("output.weight") {
            Ok(t) => t,
            Err(_) => embedding_q,
        };
        let mut layers = Vec::with_capacity(hp.n_layers);
        for l in 0..hp.n_layers {
            let mut w = |n: &str| -> Result<QMatMul> {
                Ok(QMatMul::from_qtensor(tensor(&format!(
                    "blk.{l}.{n}.weight"
                ))?)?)
            };
            let (wq, wk, wv, wo) = (w("attn_q")?, w("attn_k")?, w("attn_v")?, w("attn_output")?);
            let (gate, down, up) = (w("ffn_gate")?, w("ffn_down")?, w("ffn_up")?);
            let mut n = |n: &str| -> Result<RmsNorm> {
                Ok(RmsNorm::from_qtensor(
                    tensor(&format!("blk.{l}.{n}.weight"))?,
                    hp.rms_eps,
                )?)
            };
            layers.push(Layer {
                attn_norm: n("attn_norm")?,
                ffn_norm: n("ffn_norm")?,
                wq,
                wk,
                wv,
                wo,
                gate,
                down,
                up,
            });
        }
        let (cos, sin) = rope_tables(
            hp.head_dim,
            hp.rope_freq_base,
            hp.context_length.max(1),
            dev,
        )?;
        Ok(Model {
            hp,
            embedding,
            layers,
            norm,
            output: QMatMul::from_qtensor(output)?,
            cos,
            sin,
            time: TimeSplit::default(),
        })
    }

    /// RoPE of `x` ([n, heads, head_dim]) at `positions` (one per row).
    fn rope(&self, x: &Tensor, positions: &Tensor) -> Result<Tensor> {
        let (n, h, d) = x.dims3()?;
        let cos = self.cos.index_select(positions, 0)?;
        let sin = self.sin.index_select(positions, 0)?;
        // rope_i wants [batch, heads, tokens, dim]; each row is rotated by
        // its own position (the tables' rows).
        let x = x.reshape((1, n, h, d))?.transpose(1, 2)?.contiguous()?;
        let y = candle_nn::rotary_emb::rope_i(&x, &cos, &sin)?;
        Ok(y.transpose(1, 2)?.reshape((n, h, d))?.contiguous()?)
    }

    /// Runs `tokens` (token i at `positions[i]` of sequence `seqs[i]`)
    /// through the model, keeping their K and V in `kv`. Returns the logits
    /// ([rows, vocab]) of the tokens listed in `logits_rows`.
    pub fn forward(
        &mut self,
        kv: &mut Kv,
        tokens: &[u32],
        positions: &[i32],
        seqs: &[i32],
        logits_rows: &[usize],
    ) -> Result<Tensor> {
        let n = tokens.len();
        let hp = &self.hp;
        if n == 0 || positions.len() != n || seqs.len() != n {
            bail!(
                "forward: {n} tokens, {} positions, {} sequence ids",
                positions.len(),
                seqs.len()
            );
        }
        if let Some(&p) = positions
            .iter()
            .find(|&&p| p < 0 || p as usize >= hp.context_length)
        {
            bail!(
                "position {p} is outside the model's context of {}",
                hp.context_length
            );
        }
        let (nh, nkv, hd) = (hp.n_heads, hp.n_kv_heads, hp.head_dim);
        let dev = self.embedding.device().clone();
        let t_start = Instant::now();
        let mut kv_time = Duration::ZERO;

        let t = Instant::now();
        kv.place(positions, seqs)?;
        kv_time += t.elapsed();

        let ids = Tensor::new(tokens, &dev)?;
        let pos_u32: Vec<u32> = positions.iter().map(|&p| p as u32).collect();
        let pos = Tensor::new(pos_u32.as_slice(), &dev)?;
        let mut x = self.embedding.index_select(&ids, 0)?;
        let mut attn_out = vec![0f32; n * nh * hd];
        for (l, layer) in self.layers.iter().enumerate() {
            let h = layer.attn_norm.forward(&x)?;
            let q = layer.wq.forward(&h)?.reshape((n, nh, hd))?;
            let k = layer.wk.forward(&h)?.reshape((n, nkv, hd))?;
            let v = layer.wv.forward(&h)?;
            let q = self.rope(&q, &pos)?;
            let k = self.rope(&k, &pos)?;
            let q = q.flatten_all()?.to_vec1::<f32>()?;
            let k = k.flatten_all()?.to_vec1::<f32>()?;
            let v = v.flatten_all()?.to_vec1::<f32>()?;

            let t = Instant::now();
            let (recorded, waited) =
                kv.write_attention(l as u32, &k, &v, positions, seqs, &q, &mut attn_out)?;
            kv_time += t.elapsed();
            self.time.kv_record += recorded;
            self.time.kv_wait += waited;

            let a = Tensor::from_slice(&attn_out, (n, nh * hd), &dev)?;
            let x1 = (layer.wo.forward(&a)? + &x)?;
            let h = layer.ffn_norm.forward(&x1)?;
            let g = candle_nn::ops::silu(&layer.gate.forward(&h)?)?;
            let u = layer.up.forward(&h)?;
            x = (layer.down.forward(&(g * u)?)? + x1)?;
        }
        let rows: Vec<u32> = logits_rows.iter().map(|&r| r as u32).collect();
        if let Some(&r) = logits_rows.iter().find(|&&r| r >= n) {
            bail!("logits asked for row {r} of {n}");
        }
        let x = x.index_select(&Tensor::new(rows.as_slice(), &dev)?, 0)?;
        let logits = self.output.forward(&self.norm.forward(&x)?)?;
        let total = t_start.elapsed();
        self.time.kv += kv_time;
        self.time.cpu += total.saturating_sub(kv_time);
        Ok(logits)
    }
}

/// The index and value of the largest logit, and its margin over the second.
pub fn top2(logits: &[f32]) -> (u32, f32, f32) {
    let (mut i1, mut v1, mut v2) = (0usize, f32::NEG_INFINITY, f32::NEG_INFINITY);
    for (i, &v) in logits.iter().enumerate() {
        if v > v1 {
            v2 = v1;
            v1 = v;
            i1 = i;
        } else if v > v2 {
            v2 = v;
        }
    }
    (i1 as u32, v1, v1 - v2)
}

/// log-softmax of `logits` at `target`, in f64.
pub fn log_prob(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    logits[target as usize] as f64 - max - sum.ln()
}

/// Rows of a [rows, vocab] logits tensor as vectors.
pub fn logits_rows(logits: &Tensor) -> Result<Vec<Vec<f32>>> {
    let logits = logits.to_dtype(DType::F32)?;
    Ok(logits.to_vec2::<f32>()?)
}

/// Normalized mean squared error of `a` against `reference`.
pub fn nmse(a: &[f32], reference: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (&x, &r) in a.iter().zip(reference) {
        num += (x as f64 - r as f64).powi(2);
        den += (r as f64).powi(2);
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

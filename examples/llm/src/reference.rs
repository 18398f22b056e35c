//! The independent reference: candle-transformers' own quantized llama
//! (`quantized_llama::ModelWeights`) on the same GGUF, with its own KV cache
//! (tensors concatenated on the CPU) and its own attention. The engine feeds
//! it the same tokens and compares the logits of every step.

use anyhow::{Context as _, Result};
use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::{ModelWeights, MAX_SEQ_LEN};

use crate::model::{nmse, top2};

/// One sequence run by the reference engine.
pub struct Reference {
    model: ModelWeights,
    /// Next position.
    pos: usize,
}

/// How the engine's logits agreed with the reference's.
#[derive(Debug, Default, Clone)]
pub struct Agreement {
    /// Steps compared.
    pub steps: usize,
    /// Steps whose top-1 token was the same.
    pub top1_same: usize,
    /// Steps before the first different top-1 token: the tokens a greedy
    /// run of the reference on its own would have generated identically.
    pub identical_prefix: usize,
    /// The largest NMSE of one step's logits.
    pub nmse_max: f64,
    /// Sum of the steps' NMSE (for the mean).
    pub nmse_sum: f64,
    /// Each step's NMSE, in order.
    pub nmse_steps: Vec<f64>,
    /// Why comparing stopped early, if it did.
    pub stopped: Option<String>,
}

impl Agreement {
    /// Compares one step's logits.
    pub fn add(&mut self, engine: &[f32], reference: &[f32]) {
        let e = nmse(engine, reference);
        self.steps += 1;
        self.nmse_sum += e;
        self.nmse_steps.push(e);
        self.nmse_max = self.nmse_max.max(e);
        if top2(engine).0 == top2(reference).0 {
            self.top1_same += 1;
            if self.identical_prefix + 1 == self.steps {
                self.identical_prefix += 1;
            }
        }
    }

    /// The mean NMSE over the steps compared.
    pub fn nmse_mean(&self) -> f64 {
        if self.steps == 0 {
            0.0
        } else {
            self.nmse_sum / self.steps as f64
        }
    }
}

/// Loads the reference model from the GGUF at `path`.
pub fn load(path: &std::path::Path, dev: &Device) -> Result<ModelWeights> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let ct =
        gguf_file::Content::read(&mut f).with_context(|| format!("reading {}", path.display()))?;
    Ok(ModelWeights::from_gguf(ct, &mut f, dev)?)
}

impl Reference {
    /// A sequence of its own on a copy of `model` (weights are shared).
    pub fn new(model: &ModelWeights) -> Self {
        Reference {
            model: model.clone(),
            pos: 0,
        }
    }

    /// Whether `n` more tokens fit the reference's RoPE tables.
    pub fn fits(&self, n: usize) -> bool {
        self.pos + n <= MAX_SEQ_LEN
    }

    /// Feeds `tokens` at the next positions; returns the last token's logits.
    pub fn step(&mut self, tokens: &[u32], dev: &Device) -> Result<Vec<f32>> {
        let x = Tensor::new(tokens, dev)?.unsqueeze(0)?;
        let logits = self.model.forward(&x, self.pos)?;
        self.pos += tokens.len();
        Ok(logits.squeeze(0)?.to_vec1::<f32>()?)
    }
}

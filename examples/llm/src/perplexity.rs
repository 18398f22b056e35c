//! Perplexity of a text file, computed the way llama.cpp's
//! `llama-perplexity` does: the text's tokens cut into non-overlapping
//! chunks of `ctx` tokens, each chunk evaluated from an empty cache, and the
//! second half of each chunk scored (every token after position ctx/2
//! predicted from all before it in the chunk). With a cache smaller than the
//! chunk, context shifts happen inside each chunk, which is what the figure
//! then measures.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use kvrt::{Context, ElementType, Layout};

use crate::kv::Kv;
use crate::model::{log_prob, logits_rows, Model};
use crate::tokenizer::GgufTokenizer;

/// Perplexity options.
#[derive(Debug, Clone)]
pub struct PplOptions {
    pub ctx: usize,
    pub kv_type: ElementType,
    /// Cells of the cache; below `ctx`, context shifts happen.
    pub capacity: u32,
    pub keep: u32,
    pub ubatch: usize,
    /// Stop after this many chunks (0 = all).
    pub max_chunks: usize,
    pub progress: bool,
}

/// The result.
#[derive(Debug, Clone)]
pub struct PplReport {
    pub ppl: f64,
    /// The standard error of the perplexity estimate.
    pub ppl_err: f64,
    pub chunks: Vec<f64>,
    pub tokens_scored: usize,
    pub text_tokens: usize,
    pub shifts: u32,
    pub time: Duration,
}

/// Computes the perplexity of `text`.
pub fn perplexity(
    model: &mut Model,
    tok: &GgufTokenizer,
    ctx: &Context,
    text: &str,
    opts: &PplOptions,
) -> Result<PplReport> {
    let tokens = tok.encode(text, false)?;
    let n_ctx = opts.ctx;
    if n_ctx < 8 {
        bail!("--ctx must be at least 8");
    }
    if tokens.len() < 2 * n_ctx {
        bail!(
            "the text has {} tokens; --ctx {n_ctx} needs at least {}",
            tokens.len(),
            2 * n_ctx
        );
    }
    let mut n_chunks = tokens.len() / n_ctx;
    if opts.max_chunks > 0 {
        n_chunks = n_chunks.min(opts.max_chunks);
    }
    let capacity = opts.capacity.min(n_ctx as u32);
    // A pass must fit beside what a shift keeps.
    let ubatch = opts
        .ubatch
        .min(((capacity - opts.keep.min(capacity)) / 2).max(1) as usize);
    let first = n_ctx / 2;
    let mut kv = Kv::new(
        ctx,
        &model.hp,
        opts.kv_type,
        Layout::Cells,
        capacity,
        1,
        "perplexity",
    )?;
    let t0 = Instant::now();
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    let mut chunks = Vec::with_capacity(n_chunks);
    for c in 0..n_chunks {
        let chunk = &tokens[c * n_ctx..(c + 1) * n_ctx];
        kv.cache.clear()?;
        let mut n_past = 0i32;
        let mut start = 0;
        while start < n_ctx {
            let end = (start + ubatch).min(n_ctx);
            let n = end - start;
            if kv.free_cells()? < n as u32 {
                n_past = kv.context_shift(0, opts.keep as i32)?;
            }
            let pos: Vec<i32> = (n_past..n_past + n as i32).collect();
            // Logits only for the rows that score a token.
            let rows: Vec<usize> = (start..end)
                .filter(|&j| j >= first && j + 1 < n_ctx)
                .map(|j| j - start)
                .collect();
            let logits_for: &[usize] = if rows.is_empty() { &[0] } else { &rows };
            let logits =
                model.forward(&mut kv, &chunk[start..end], &pos, &vec![0; n], logits_for)?;
            if !rows.is_empty() {
                for (r, l) in rows.iter().zip(logits_rows(&logits)?) {
                    let j = start + r;
                    let lp = -log_prob(&l, chunk[j + 1]);
                    nll += lp;
                    nll2 += lp * lp;
                    count += 1;
                }
            }
            n_past += n as i32;
            start = end;
        }
        let ppl = (nll / count as f64).exp();
        chunks.push(ppl);
        if opts.progress {
            eprint!("[{}]{ppl:.4},", c + 1);
            std::io::stderr().flush().ok();
        }
    }
    if opts.progress {
        eprintln!();
    }
    let mean = nll / count as f64;
    let var = (nll2 / count as f64 - mean * mean).max(0.0);
    let se = if count > 1 {
        (var / (count - 1) as f64).sqrt()
    } else {
        0.0
    };
    let ppl = mean.exp();
    Ok(PplReport {
        ppl,
        ppl_err: ppl * se,
        chunks,
        tokens_scored: count,
        text_tokens: tokens.len(),
        shifts: kv.shifts,
        time: t0.elapsed(),
    })
}

//! Generation: N prompts sharing their common prefix (stored once, shared
//! with `seq_cp`), decoded together with one batched attention call per
//! layer, context shifts when the cell cache is full, and the static-layout
//! hand-off (prefill in cells, `seq_transfer` to the windows, decode from
//! the windows).

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use candle_core::Device;
use candle_transformers::generation::{LogitsProcessor, Sampling};
use candle_transformers::models::quantized_llama::ModelWeights;
use kvrt::{Context, ElementType, Layout};

use crate::kv::{Kv, PAGED_BLOCK};
use crate::model::{logits_rows, top2, Model};
use crate::reference::{Agreement, Reference};
use crate::tokenizer::GgufTokenizer;

/// How to generate.
#[derive(Debug, Clone)]
pub struct GenOptions {
    pub n_tokens: usize,
    pub kv_type: ElementType,
    pub layout: Layout,
    /// Cells of the cell cache; rows of each static window.
    pub capacity: u32,
    /// Positions kept at the start of a sequence by context shifts.
    pub keep: u32,
    pub temperature: f64,
    pub top_p: Option<f64>,
    pub seed: u64,
    pub ignore_eos: bool,
    /// Prompt tokens per forward pass.
    pub ubatch: usize,
    /// Stream the text of sequence 0 to stdout as it is generated.
    pub stream: bool,
}

/// One sequence's outcome.
#[derive(Debug, Default, Clone)]
pub struct SeqResult {
    pub prompt: String,
    pub prompt_ids: Vec<u32>,
    pub generated_ids: Vec<u32>,
    /// Per generated token: the largest logit and its margin over the second.
    pub top1_logit: Vec<f32>,
    pub top1_minus_top2: Vec<f32>,
    pub text: String,
    pub agreement: Option<Agreement>,
}

/// The outcome of a generation.
#[derive(Debug, Default)]
pub struct Report {
    pub seqs: Vec<SeqResult>,
    /// Leading prompt tokens shared by all sequences (stored once).
    pub shared_prefix: usize,
    pub prefill_tokens: usize,
    pub prefill_time: Duration,
    pub decode_tokens: usize,
    pub decode_time: Duration,
    /// Time in the reference engine (not counted in the times above).
    pub reference_time: Duration,
    pub shifts: u32,
    pub cache_bytes: u64,
    pub static_bytes_moved: u64,
    /// The paged layout: blocks in use, and those in several block tables.
    pub paged_used_blocks: u32,
    pub paged_shared_blocks: u32,
}

struct Seq {
    id: i32,
    n_past: i32,
    logits: Vec<f32>,
    done: bool,
    reference: Option<Reference>,
    printed: usize,
}

fn common_prefix(lists: &[Vec<u32>]) -> usize {
    let first = &lists[0];
    let mut n = first.len();
    for l in &lists[1..] {
        n = n.min(first.iter().zip(l).take_while(|(a, b)| a == b).count());
    }
    n
}

/// Runs `tokens` (each with a position and sequence) in passes of at most
/// `ubatch` tokens; returns the logits of the rows in `want` (indices into
/// `tokens`), in order.
fn run(
    model: &mut Model,
    kv: &mut Kv,
    tokens: &[u32],
    positions: &[i32],
    seqs: &[i32],
    want: &[usize],
    ubatch: usize,
) -> Result<Vec<Vec<f32>>> {
    let mut out = Vec::with_capacity(want.len());
    let mut start = 0;
    while start < tokens.len() {
        let end = (start + ubatch).min(tokens.len());
        let rows: Vec<usize> = want
            .iter()
            .filter(|&&w| w >= start && w < end)
            .map(|&w| w - start)
            .collect();
        let r = start..end;
        let logits_for: &[usize] = if rows.is_empty() { &[0] } else { &rows };
        let logits = model.forward(
            kv,
            &tokens[r.clone()],
            &positions[r.clone()],
            &seqs[r],
            logits_for,
        )?;
        if !rows.is_empty() {
            out.extend(logits_rows(&logits)?);
        }
        start = end;
    }
    Ok(out)
}

/// Generates from `prompts` (already rendered: chat template applied).
#[allow(clippy::too_many_arguments)]
pub fn generate(
    model: &mut Model,
    tok: &GgufTokenizer,
    ctx: &Context,
    reference: Option<&ModelWeights>,
    dev: &Device,
    prompts: &[String],
    opts: &GenOptions,
) -> Result<Report> {
    let n = prompts.len();
    if n == 0 {
        bail!("no prompt");
    }
    let ids: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| tok.encode(p, true))
        .collect::<Result<_>>()?;
    if let Some(i) = ids.iter().position(|t| t.is_empty()) {
        bail!("prompt {i} has no token");
    }
    // The shared prefix, leaving each sequence at least its last prompt
    // token to compute (its logits start the generation).
    let min_len = ids.iter().map(Vec::len).min().unwrap_or(0);
    let shared = if n > 1 {
        common_prefix(&ids).min(min_len - 1)
    } else {
        0
    };
    let prompt_cells = shared + ids.iter().map(|t| t.len() - shared).sum::<usize>();
    if opts.layout == Layout::Cells && prompt_cells > opts.capacity as usize {
        bail!(
            "the prompts need {prompt_cells} cells and --capacity is {}: raise --capacity",
            opts.capacity
        );
    }
    // The paged layout: the shared prefix's blocks once, then each
    // sequence's own tokens from the copy of the prefix's last, partly
    // filled block (copy-on-write) on.
    let b = PAGED_BLOCK as usize;
    let paged_cells = shared.div_ceil(b) * b
        + ids
            .iter()
            .map(|t| (t.len() - shared / b * b).div_ceil(b) * b)
            .sum::<usize>();
    if opts.layout == Layout::Paged
        && paged_cells > opts.capacity.div_ceil(PAGED_BLOCK) as usize * b
    {
        bail!(
            "the prompts need {} blocks of {b} tokens and --capacity {} holds {}: raise --capacity",
            paged_cells / b,
            opts.capacity,
            opts.capacity.div_ceil(PAGED_BLOCK)
        );
    }
    let keep = opts.keep.max(shared as u32) as i32;

    // The cache the prompt goes to: the cell or paged cache, or with the
    // static layout a cell cache just large enough for the prompts.
    let prefill_cap = if opts.layout == Layout::Static {
        prompt_cells as u32
    } else {
        opts.capacity
    };
    // The windows first: a type the static layout refuses fails before any work.
    let mut windows = match opts.layout {
        Layout::Static => Some(Kv::new(
            ctx,
            &model.hp,
            opts.kv_type,
            Layout::Static,
            opts.capacity,
            n as u32,
            "windows",
        )?),
        _ => None,
    };
    let mut kv = Kv::new(
        ctx,
        &model.hp,
        opts.kv_type,
        if opts.layout == Layout::Paged {
            Layout::Paged
        } else {
            Layout::Cells
        },
        prefill_cap,
        n as u32,
        "prompt",
    )?;
    let mut report = Report {
        shared_prefix: shared,
        ..Default::default()
    };
    let mut seqs: Vec<Seq> = (0..n)
        .map(|i| Seq {
            id: i as i32,
            n_past: 0,
            logits: Vec::new(),
            done: false,
            reference: reference.map(Reference::new),
            printed: 0,
        })
        .collect();
    let mut results: Vec<SeqResult> = prompts
        .iter()
        .zip(&ids)
        .map(|(p, t)| SeqResult {
            prompt: p.clone(),
            prompt_ids: t.clone(),
            agreement: reference.map(|_| Agreement::default()),
            ..Default::default()
        })
        .collect();

    // Prefill: the shared prefix once in sequence 0, shared with the others
    // by seq_cp (in the paged layout a fork of its blocks), then every
    // sequence's own tokens in one pass.
    let t0 = Instant::now();
    if shared > 0 {
        let pos: Vec<i32> = (0..shared as i32).collect();
        run(
            model,
            &mut kv,
            &ids[0][..shared],
            &pos,
            &vec![0; shared],
            &[],
            opts.ubatch,
        )?;
        for s in 1..n as i32 {
            kv.cache.seq_cp(0, s, -1, -1)?;
        }
    }
    let (mut toks, mut pos, mut sq, mut last) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, t) in ids.iter().enumerate() {
        for (p, &id) in t.iter().enumerate().skip(shared) {
            toks.push(id);
            pos.push(p as i32);
            sq.push(i as i32);
        }
        last.push(toks.len() - 1);
        seqs[i].n_past = t.len() as i32;
    }
    let logits = run(model, &mut kv, &toks, &pos, &sq, &last, opts.ubatch)?;
    report.prefill_tokens = prompt_cells;
    report.prefill_time = t0.elapsed();
    for (s, l) in seqs.iter_mut().zip(logits) {
        s.logits = l;
    }
    // The reference's prompt pass, compared with the engine's.
    for (i, s) in seqs.iter_mut().enumerate() {
        if let (Some(r), Some(a)) = (s.reference.as_mut(), results[i].agreement.as_mut()) {
            if !r.fits(ids[i].len()) {
                a.stopped = Some("the prompt is longer than the reference's RoPE tables".into());
                s.reference = None;
                continue;
            }
            let t = Instant::now();
            let rl = r.step(&ids[i], dev)?;
            report.reference_time += t.elapsed();
            a.add(&s.logits, &rl);
        }
    }

    // The static layout: hand the sequences over to the windows.
    if let Some(mut w) = windows.take() {
        for s in &seqs {
            kv.cache.seq_transfer(s.id, &mut w.cache, s.id)?;
        }
        kv = w;
    }

    let mut sampler = if opts.temperature > 0.0 {
        let sampling = match opts.top_p {
            Some(p) => Sampling::TopP {
                p,
                temperature: opts.temperature,
            },
            None => Sampling::All {
                temperature: opts.temperature,
            },
        };
        Some(LogitsProcessor::from_sampling(opts.seed, sampling))
    } else {
        None
    };

    let t1 = Instant::now();
    let mut ref_time = Duration::ZERO;
    for step in 0..opts.n_tokens {
        // Choose each live sequence's next token.
        let (mut toks, mut pos, mut sq) = (Vec::new(), Vec::new(), Vec::new());
        for (i, s) in seqs.iter_mut().enumerate() {
            if s.done {
                continue;
            }
            let (best, logit, margin) = top2(&s.logits);
            let next = match sampler.as_mut() {
                Some(p) => p.sample(&candle_core::Tensor::new(s.logits.as_slice(), dev)?)?,
                None => best,
            };
            let r = &mut results[i];
            r.generated_ids.push(next);
            r.top1_logit.push(logit);
            r.top1_minus_top2.push(margin);
            if opts.stream && i == 0 {
                let text = tok.decode(&r.generated_ids, false)?;
                // Print only whole characters: a token can end inside one.
                if text.len() > s.printed && !text.ends_with('\u{FFFD}') {
                    print!("{}", &text[s.printed..]);
                    std::io::stdout().flush().ok();
                    s.printed = text.len();
                }
            }
            if (!opts.ignore_eos && tok.stop.contains(&next)) || step + 1 == opts.n_tokens {
                s.done = true;
                continue;
            }
            toks.push(next);
            pos.push(s.n_past);
            sq.push(s.id);
        }
        if toks.is_empty() {
            break;
        }
        // A full cell cache: every live sequence drops half of what follows
        // its kept prefix (the shared prefix is always kept).
        if opts.layout == Layout::Cells && kv.free_cells()? < toks.len() as u32 {
            for (j, s) in seqs.iter_mut().filter(|s| !s.done).enumerate() {
                if s.n_past <= keep + 1 {
                    bail!(
                        "--capacity is too small to shift: sequence {} keeps {keep} positions",
                        s.id
                    );
                }
                s.n_past = kv.context_shift(s.id, keep)?;
                pos[j] = s.n_past;
                if let (Some(_), Some(a)) = (
                    s.reference.take(),
                    results[s.id as usize].agreement.as_mut(),
                ) {
                    a.stopped = Some(format!("context shift at step {step}"));
                }
            }
        }
        let rows: Vec<usize> = (0..toks.len()).collect();
        let logits = run(model, &mut kv, &toks, &pos, &sq, &rows, opts.ubatch)?;
        report.decode_tokens += toks.len();
        for (j, l) in logits.into_iter().enumerate() {
            let s = &mut seqs[sq[j] as usize];
            s.logits = l;
            s.n_past += 1;
            let i = s.id as usize;
            if let Some(r) = s.reference.as_mut() {
                if !r.fits(1) {
                    s.reference = None;
                    if let Some(a) = results[i].agreement.as_mut() {
                        a.stopped = Some("past the reference's RoPE tables".into());
                    }
                    continue;
                }
                let t = Instant::now();
                let rl = r.step(&[toks[j]], dev)?;
                ref_time += t.elapsed();
                if let Some(a) = results[i].agreement.as_mut() {
                    a.add(&s.logits, &rl);
                }
            }
        }
    }
    report.decode_time = t1.elapsed().saturating_sub(ref_time);
    report.reference_time += ref_time;
    if opts.stream {
        println!();
    }
    for r in results.iter_mut() {
        r.text = tok.decode(&r.generated_ids, false)?;
    }
    report.shifts = kv.shifts;
    report.cache_bytes = kv.device_bytes()?;
    if opts.layout == Layout::Static {
        report.static_bytes_moved = kv.cache.static_stats(None)?.bytes_moved;
    }
    if opts.layout == Layout::Paged {
        let st = kv.cache.paged_stats()?;
        report.paged_used_blocks = st.used_blocks;
        report.paged_shared_blocks = st.shared_blocks;
    }
    report.seqs = results;
    Ok(report)
}

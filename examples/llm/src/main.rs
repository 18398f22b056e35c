//! kvrt-llm: a llama-architecture model (SmolLM2 and others in GGUF)
//! generating text with its KV cache in kvrt. candle runs the matmuls on the
//! CPU with its quantized kernels, the `tokenizers` crate tokenizes with the
//! vocabulary and merges stored in the GGUF, and kvrt owns every K and V:
//! stores, attention, context shifts, sequences, the static layout.
//!
//! Progress goes to stderr, the generated text to stdout as it comes;
//! `--json` prints one JSON object instead.

mod generate;
mod kv;
mod model;
mod perplexity;
mod reference;
mod tokenizer;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use candle_core::quantized::gguf_file;
use candle_core::Device;
use clap::{Parser, ValueEnum};
use serde_json::json;

use crate::generate::{GenOptions, Report};
use crate::perplexity::PplOptions;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LayoutArg {
    /// The general cell layout.
    Cells,
    /// Prefill in cells, then `seq_transfer` to static windows and decode from them.
    Static,
    /// Block tables of 16 tokens: the shared prompt prefix is forked
    /// (copy-on-write), never copied; no context shifts (a full pool fails).
    Paged,
}

/// Generates text with a GGUF llama model, its KV cache in kvrt.
#[derive(Debug, Parser)]
#[command(name = "kvrt-llm", version, about)]
struct Args {
    /// The GGUF model file.
    #[arg(long, env = "KVRT_LLM_MODEL")]
    model: PathBuf,
    /// A prompt; repeat for several sequences (with --seqs, prompts are reused in turn).
    #[arg(short, long)]
    prompt: Vec<String>,
    /// Tokens to generate per sequence.
    #[arg(short = 'n', long, default_value_t = 64)]
    tokens: usize,
    /// K/V storage type in the cache: f32, f16, q8_0 or q4_0.
    #[arg(long, default_value = "f16")]
    kv_type: String,
    /// Cells of the cache (small values force context shifts); with
    /// --layout static, the rows of each sequence's window; with --layout
    /// paged, rounded up to whole blocks of 16.
    #[arg(long, default_value_t = 2048)]
    capacity: u32,
    /// Positions a context shift keeps at the start of a sequence (sinks);
    /// a prefix shared by all sequences is always kept.
    #[arg(long, default_value_t = 4)]
    keep: u32,
    /// Cache layout.
    #[arg(long, value_enum, default_value_t = LayoutArg::Cells)]
    layout: LayoutArg,
    /// Sequences decoded together; their common prompt prefix is stored once.
    #[arg(long, default_value_t = 1)]
    seqs: usize,
    /// Wrap each prompt in the model's chat template (from the GGUF).
    #[arg(long)]
    chat: bool,
    /// System message for --chat (default: the template's own).
    #[arg(long)]
    system: Option<String>,
    /// Sampling temperature; 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Nucleus sampling threshold (with --temperature).
    #[arg(long)]
    top_p: Option<f64>,
    /// Sampling seed.
    #[arg(long, default_value_t = 299792458)]
    seed: u64,
    /// Keep generating past end-of-turn tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Compare every step's logits with candle-transformers' own quantized
    /// llama (its own KV cache and attention) on the same GGUF.
    #[arg(long)]
    check: bool,
    /// Dequantize the weights to f32 once and run f32 matmuls (no 8-bit
    /// quantization of activations): slower to load, but deterministic f32
    /// arithmetic, so that a comparison with --check isolates the KV cache.
    #[arg(long)]
    dequantize: bool,
    /// Print the token ids of each prompt (after --chat) as JSON and exit.
    #[arg(long)]
    tokenize: bool,
    /// Print one JSON object on stdout instead of the text.
    #[arg(long)]
    json: bool,
    /// Compute the perplexity of this text file instead of generating.
    #[arg(long)]
    perplexity: Option<PathBuf>,
    /// Chunk size for --perplexity.
    #[arg(long, default_value_t = 512)]
    ctx: usize,
    /// Stop --perplexity after this many chunks (0 = all).
    #[arg(long, default_value_t = 0)]
    chunks: usize,
    /// Tokens per forward pass.
    #[arg(long, default_value_t = 256)]
    ubatch: usize,
    /// The Vulkan device (index or part of its name); default: kvrt's choice.
    #[arg(long)]
    device: Option<String>,
}

const DEFAULT_PROMPTS: [&str; 4] = [
    "What is the capital of France?",
    "Give me three tips for staying healthy.",
    "Write a short poem about the sea.",
    "Explain what a KV cache is in one sentence.",
];

/// "f32" when candle dequantizes the weights (CANDLE_DEQUANTIZE_ALL), else "quantized".
fn matmul_kind() -> &'static str {
    match std::env::var("CANDLE_DEQUANTIZE_ALL") {
        Ok(s) if !s.is_empty() && s != "0" => "f32",
        _ => "quantized",
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("kvrt-llm: error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let args = Args::parse();
    let kv_type = kv::parse_kv_type(&args.kv_type)?;
    if args.seqs == 0 {
        bail!("--seqs must be at least 1");
    }
    if args.capacity == 0 {
        bail!("--capacity must be at least 1");
    }
    let dev = Device::Cpu;
    if args.dequantize {
        // candle's QMatMul reads this when a weight is loaded (both engines).
        std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1");
    }
    let t_load = Instant::now();
    let mut file = std::fs::File::open(&args.model)
        .with_context(|| format!("opening the model {}", args.model.display()))?;
    let ct = gguf_file::Content::read(&mut file)
        .with_context(|| format!("reading {} as GGUF", args.model.display()))?;
    let tok = tokenizer::GgufTokenizer::from_gguf(&ct)?;
    let mut model = model::Model::load(&ct, &mut file, &dev)?;
    let hp = model.hp.clone();
    if tok.vocab_size() != hp.vocab_size {
        bail!(
            "the GGUF's vocabulary has {} tokens and its model {}",
            tok.vocab_size(),
            hp.vocab_size
        );
    }
    eprintln!(
        "kvrt-llm: {} ({}, {}): {} layers, embedding {}, feed-forward {}, {} heads / {} KV heads of {}, RoPE base {}, vocabulary {}; loaded in {:.2} s",
        args.model.display(),
        hp.name,
        hp.arch,
        hp.n_layers,
        hp.n_embd,
        hp.n_ff,
        hp.n_heads,
        hp.n_kv_heads,
        hp.head_dim,
        hp.rope_freq_base,
        hp.vocab_size,
        t_load.elapsed().as_secs_f64()
    );
    let mut builder = kvrt::Context::builder().log_callback(kvrt::LogLevel::Warn, |level, msg| {
        eprintln!("kvrt: {level:?}: {msg}")
    });
    if let Some(d) = &args.device {
        builder = builder.device(d.clone());
    }
    let ctx = builder.build()?;
    eprintln!(
        "kvrt-llm: kvrt {} on {}",
        kvrt::version_string(),
        ctx.device_info()?.name
    );

    if let Some(path) = &args.perplexity {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let opts = PplOptions {
            ctx: args.ctx,
            kv_type,
            capacity: args.capacity,
            keep: args.keep,
            ubatch: args.ubatch,
            max_chunks: args.chunks,
            progress: !args.json,
        };
        let r = perplexity::perplexity(&mut model, &tok, &ctx, &text, &opts)?;
        let t = model.time;
        if args.json {
            println!(
                "{}",
                json!({
                    "file": path.display().to_string(), "kv_type": args.kv_type, "matmul": matmul_kind(), "ctx": args.ctx,
                    "capacity": args.capacity.min(args.ctx as u32), "keep": args.keep,
                    "perplexity": r.ppl, "perplexity_err": r.ppl_err, "chunks": r.chunks,
                    "text_tokens": r.text_tokens, "tokens_scored": r.tokens_scored, "context_shifts": r.shifts,
                    "seconds": r.time.as_secs_f64(), "cpu_seconds": t.cpu.as_secs_f64(), "kvrt_seconds": t.kv.as_secs_f64(),
                })
            );
        } else {
            println!("Final estimate: PPL = {:.4} +/- {:.5}", r.ppl, r.ppl_err);
            eprintln!(
                "kvrt-llm: {} chunks of {} tokens ({} scored, {} in the text), K/V {}, capacity {}, {} context shifts, {:.1} s (CPU {:.1} s, kvrt {:.1} s)",
                r.chunks.len(),
                args.ctx,
                r.tokens_scored,
                r.text_tokens,
                args.kv_type,
                args.capacity.min(args.ctx as u32),
                r.shifts,
                r.time.as_secs_f64(),
                t.cpu.as_secs_f64(),
                t.kv.as_secs_f64()
            );
        }
        return Ok(());
    }

    let mut prompts: Vec<String> = if args.prompt.is_empty() {
        DEFAULT_PROMPTS.iter().map(|s| s.to_string()).collect()
    } else {
        args.prompt.clone()
    };
    if !args.tokenize {
        prompts = (0..args.seqs)
            .map(|i| prompts[i % prompts.len()].clone())
            .collect();
    }
    if args.chat {
        prompts = prompts
            .iter()
            .map(|p| tok.chat_prompt(args.system.as_deref(), p))
            .collect::<Result<_>>()?;
    }
    if args.tokenize {
        let ids: Vec<Vec<u32>> = prompts
            .iter()
            .map(|p| tok.encode(p, true))
            .collect::<Result<_>>()?;
        println!("{}", json!({ "prompts": prompts, "ids": ids }));
        return Ok(());
    }
    let reference = if args.check {
        let t = Instant::now();
        let r = reference::load(&args.model, &dev)?;
        eprintln!(
            "kvrt-llm: reference engine (candle-transformers quantized_llama) loaded in {:.2} s",
            t.elapsed().as_secs_f64()
        );
        Some(r)
    } else {
        None
    };
    let opts = GenOptions {
        n_tokens: args.tokens,
        kv_type,
        layout: match args.layout {
            LayoutArg::Cells => kvrt::Layout::Cells,
            LayoutArg::Static => kvrt::Layout::Static,
            LayoutArg::Paged => kvrt::Layout::Paged,
        },
        capacity: args.capacity,
        keep: args.keep,
        temperature: args.temperature,
        top_p: args.top_p,
        seed: args.seed,
        ignore_eos: args.ignore_eos,
        ubatch: args.ubatch.max(1),
        stream: !args.json && args.seqs == 1,
    };
    let report = generate::generate(
        &mut model,
        &tok,
        &ctx,
        reference.as_ref(),
        &dev,
        &prompts,
        &opts,
    )?;
    let t = model.time;
    if args.json {
        println!("{}", report_json(&args, &report, t));
        return Ok(());
    }
    if args.seqs > 1 {
        for (i, s) in report.seqs.iter().enumerate() {
            println!(
                "--- sequence {i}: {}",
                args.prompt
                    .get(i % args.prompt.len().max(1))
                    .map_or(DEFAULT_PROMPTS[i % 4], |p| p.as_str())
            );
            println!("{}", s.text);
        }
    }
    summary(&args, &report, t);
    Ok(())
}

fn report_json(args: &Args, r: &Report, t: model::TimeSplit) -> serde_json::Value {
    let seq_json = |s: &generate::SeqResult| {
        json!({
            "prompt": s.prompt, "prompt_ids": s.prompt_ids, "generated_ids": s.generated_ids,
            "text": s.text, "top1_logit": s.top1_logit, "top1_minus_top2": s.top1_minus_top2,
            "agreement": s.agreement.as_ref().map(|a| json!({
                "steps": a.steps, "top1_same": a.top1_same, "identical_prefix": a.identical_prefix, "nmse_max": a.nmse_max,
                "nmse_mean": a.nmse_mean(), "nmse_steps": a.nmse_steps, "stopped": a.stopped,
            })),
        })
    };
    let s0 = &r.seqs[0];
    let mut v = seq_json(s0);
    let extra = json!({
        "kv_type": args.kv_type, "matmul": matmul_kind(), "layout": format!("{:?}", args.layout).to_lowercase(),
        "capacity": args.capacity, "seqs": r.seqs.len(), "shared_prefix": r.shared_prefix,
        "context_shifts": r.shifts, "cache_bytes": r.cache_bytes, "static_bytes_moved": r.static_bytes_moved,
        "paged_used_blocks": r.paged_used_blocks, "paged_shared_blocks": r.paged_shared_blocks,
        "prefill_tokens": r.prefill_tokens, "prefill_seconds": r.prefill_time.as_secs_f64(),
        "decode_tokens": r.decode_tokens, "decode_seconds": r.decode_time.as_secs_f64(),
        "reference_seconds": r.reference_time.as_secs_f64(),
        "cpu_seconds": t.cpu.as_secs_f64(), "kvrt_seconds": t.kv.as_secs_f64(),
        "kvrt_record_seconds": t.kv_record.as_secs_f64(), "kvrt_wait_seconds": t.kv_wait.as_secs_f64(),
        "sequences": r.seqs.iter().map(seq_json).collect::<Vec<_>>(),
    });
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    v
}

fn summary(args: &Args, r: &Report, t: model::TimeSplit) {
    let total = (t.cpu + t.kv).as_secs_f64().max(1e-9);
    let decode_s = r.decode_time.as_secs_f64().max(1e-9);
    eprintln!();
    eprintln!(
        "kvrt-llm: prompt {} tokens in {:.2} s ({:.1} tokens/s){}; generated {} tokens in {:.2} s ({:.1} tokens/s)",
        r.prefill_tokens,
        r.prefill_time.as_secs_f64(),
        r.prefill_tokens as f64 / r.prefill_time.as_secs_f64().max(1e-9),
        if r.shared_prefix > 0 { format!(", {} shared by all sequences", r.shared_prefix) } else { String::new() },
        r.decode_tokens + r.seqs.len(),
        decode_s,
        (r.decode_tokens + r.seqs.len()) as f64 / decode_s,
    );
    eprintln!(
        "kvrt-llm: time: CPU ({} matmuls and the rest) {:.2} s ({:.0} %), kvrt {:.2} s ({:.0} %: recording {:.2} s, submit, wait and read {:.2} s)",
        matmul_kind(),
        t.cpu.as_secs_f64(),
        100.0 * t.cpu.as_secs_f64() / total,
        t.kv.as_secs_f64(),
        100.0 * t.kv.as_secs_f64() / total,
        t.kv_record.as_secs_f64(),
        t.kv_wait.as_secs_f64()
    );
    eprintln!(
        "kvrt-llm: cache: {} layout, K/V {}, capacity {}, {:.2} MiB of device memory, {} context shifts{}",
        format!("{:?}", args.layout).to_lowercase(),
        args.kv_type,
        args.capacity,
        mib(r.cache_bytes),
        r.shifts,
        if r.static_bytes_moved > 0 { format!(", {:.2} MiB moved by window slides", mib(r.static_bytes_moved)) } else { String::new() }
    );
    for (i, s) in r.seqs.iter().enumerate() {
        if let Some(a) = &s.agreement {
            eprintln!(
                "kvrt-llm: sequence {i} against the reference (candle-transformers quantized_llama): greedy tokens identical for {}/{} steps, top-1 equal in {}/{} steps (same inputs), logits NMSE mean {:.2e}, max {:.2e}{}",
                a.identical_prefix,
                a.steps,
                a.top1_same,
                a.steps,
                a.nmse_mean(),
                a.nmse_max,
                a.stopped.as_ref().map_or(String::new(), |w| format!(" (compared until: {w})"))
            );
        }
    }
}

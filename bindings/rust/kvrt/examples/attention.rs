//! The basic kvrt loop of an inference engine, as examples/attention.c:
//! create a context and a cache, store a 5-token prompt, decode one token
//! (store its K/V, then attention for its query), and check the result
//! against a softmax computed here.

use kvrt::{AttentionParams, Batch, CacheDesc, Context, Layers, LogLevel, OutputRef, TensorRef};

const N_HEADS: usize = 2;
const N_KV_HEADS: usize = 1;
const HEAD_DIM: usize = 8;

fn key_of(t: usize, d: usize) -> f32 {
    ((t * 3 + d) % 7) as f32 / 8.0 - 3.0 / 8.0
}
fn value_of(t: usize, d: usize) -> f32 {
    t as f32 - 2.0 + d as f32 / 8.0
}
fn query_of(h: usize, d: usize) -> f32 {
    ((h + 2 * d) % 5) as f32 / 4.0 - 0.5
}

fn main() -> Result<(), kvrt::Error> {
    let ctx = Context::builder()
        .log_callback(LogLevel::Warn, |level, msg| eprintln!("kvrt: {level:?}: {msg}"))
        .build()?;
    println!("device: {}", ctx.device_info()?.name);
    let mut cache = ctx.create_cache(&CacheDesc::new(
        1,
        N_HEADS as u32,
        N_KV_HEADS as u32,
        HEAD_DIM as u32,
        64,
    ))?;

    // Prompt and decoded token: positions 0..=5 of sequence 0.
    let n = 6;
    let k: Vec<f32> = (0..n)
        .flat_map(|t| (0..HEAD_DIM).map(move |d| key_of(t, d)))
        .collect();
    let v: Vec<f32> = (0..n)
        .flat_map(|t| (0..HEAD_DIM).map(move |d| value_of(t, d)))
        .collect();
    let positions: Vec<i32> = (0..n as i32).collect();
    let row = N_KV_HEADS * HEAD_DIM;
    cache.store(
        &Batch::for_seq(0, &positions[..5]),
        Layers::One(0),
        &TensorRef::host_f32(&k[..5 * row]),
        &TensorRef::host_f32(&v[..5 * row]),
    )?;
    cache.store(
        &Batch::for_seq(0, &positions[5..]),
        Layers::One(0),
        &TensorRef::host_f32(&k[5 * row..]),
        &TensorRef::host_f32(&v[5 * row..]),
    )?;

    let q: Vec<f32> = (0..N_HEADS)
        .flat_map(|h| (0..HEAD_DIM).map(move |d| query_of(h, d)))
        .collect();
    let mut out = vec![0f32; N_HEADS * HEAD_DIM];
    cache.attention(
        0,
        &Batch::for_seq(0, &positions[5..]),
        &TensorRef::host_f32(&q),
        &mut OutputRef::host_f32(&mut out),
        &AttentionParams::default(),
    )?;

    // The reference: softmax(q k^T / sqrt(d)) v; both heads read KV head 0.
    let scale = 1.0 / (HEAD_DIM as f64).sqrt();
    let mut worst = 0f64;
    for h in 0..N_HEADS {
        let logits: Vec<f64> = (0..n)
            .map(|t| {
                (0..HEAD_DIM)
                    .map(|d| (q[h * HEAD_DIM + d] * key_of(t, d)) as f64)
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = logits.iter().map(|l| (l - m).exp()).collect();
        let sum: f64 = w.iter().sum();
        for d in 0..HEAD_DIM {
            let expect = (0..n).map(|t| w[t] * value_of(t, d) as f64).sum::<f64>() / sum;
            worst = worst.max((expect - out[h * HEAD_DIM + d] as f64).abs());
        }
    }
    println!("head 0: {:?}", &out[..HEAD_DIM]);
    println!("largest difference from the CPU reference: {worst:.2e}");
    assert!(worst < 1e-2, "attention differs from the reference");
    Ok(())
}

//! Shared helpers of the integration tests.
#![allow(dead_code)]

/// A context with the library's validation on (as `KVRT_VALIDATION=1`,
/// which `make test-rust` also sets, does).
pub fn context() -> kvrt::Context {
    kvrt::Context::builder()
        .validation(true)
        .build()
        .expect("context")
}

/// Rounds to f16 and back, as the cache's storage does.
pub fn f16_round(x: f32) -> f32 {
    // Round to 10 mantissa bits (inputs here are in normal f16 range).
    if x == 0.0 {
        return 0.0;
    }
    let e = x.abs().log2().floor();
    let ulp = 2f32.powf(e - 10.0);
    (x / ulp).round() * ulp
}

/// Softmax attention in f64: `q` of n_heads × d, keys/values of n_cells ×
/// n_kv_heads × d; GQA head h reads KV head h / (n_heads / n_kv_heads).
pub fn reference(q: &[f32], k: &[f32], v: &[f32], n_heads: usize, n_kv: usize, d: usize) -> Vec<f32> {
    let n = k.len() / (n_kv * d);
    let group = n_heads / n_kv;
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0f32; n_heads * d];
    for h in 0..n_heads {
        let kh = h / group;
        let logits: Vec<f64> = (0..n)
            .map(|c| {
                (0..d)
                    .map(|i| q[h * d + i] as f64 * k[(c * n_kv + kh) * d + i] as f64)
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = logits.iter().map(|l| (l - m).exp()).collect();
        let sum: f64 = w.iter().sum();
        for i in 0..d {
            let acc: f64 = (0..n).map(|c| w[c] * v[(c * n_kv + kh) * d + i] as f64).sum();
            out[h * d + i] = (acc / sum) as f32;
        }
    }
    out
}

/// Deterministic test values in [-1, 1).
pub fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// RoPE (normal mode, base 10000) of one head row at position `pos`.
pub fn rope(row: &mut [f32], pos: i32) {
    let d = row.len();
    for i in (0..d).step_by(2) {
        let theta = pos as f64 * 10000f64.powf(-(i as f64) / d as f64);
        let (s, c) = theta.sin_cos();
        let (a, b) = (row[i] as f64, row[i + 1] as f64);
        row[i] = (a * c - b * s) as f32;
        row[i + 1] = (a * s + b * c) as f32;
    }
}

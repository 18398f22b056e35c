//! The paged layout on the device: prefix sharing between prompts, forks,
//! copy-on-write appends (synchronous and recorded) and the errors of misuse.
//! Validation is on (KVRT_VALIDATION=1).

mod common;

use common::*;
use kvrt::{Batch, Cache, CacheDesc, Context, Error, Layers, Layout, PagedLayoutDesc, StreamDesc, TensorRef};
use std::time::Duration;

const LAYERS: usize = 2;
const KV: usize = 2; // KV heads
const D: usize = 32; // head dim
const ROW: usize = KV * D; // values of one token's K (or V) in one layer
const B: usize = 16; // block size
/// One f16 step for values in [-1, 1): the device may round ties to even
/// where `f16_round` rounds them away from zero.
const F16_ULP: f32 = 1.0 / 2048.0;

/// A paged cache of 2 layers, 2 KV heads of 32 and blocks of 16.
fn paged_cache(ctx: &Context, capacity: u32) -> Cache {
    let mut desc = CacheDesc::new(LAYERS as u32, 2, KV as u32, D as u32, capacity);
    desc.layout = Layout::Paged;
    desc.paged_layout = Some(PagedLayoutDesc::new(B as u32));
    desc.max_seqs = 4;
    ctx.create_cache(&desc).unwrap()
}

/// The token ids of a prompt of `n` tokens, and positions 0..n.
fn prompt(n: usize) -> (Vec<i32>, Vec<i32>) {
    (
        (0..n as i32).map(|t| 1000 + 7 * t).collect(),
        (0..n as i32).collect(),
    )
}

/// Layer-major K or V of `n` tokens: LAYERS blocks of n × ROW values.
fn kv_values(seed: u64, n: usize) -> Vec<f32> {
    values(seed, LAYERS * n * ROW)
}

/// Rows `tokens` of `layer` out of layer-major data of `n` tokens.
fn rows(data: &[f32], n: usize, layer: usize, tokens: std::ops::Range<usize>) -> Vec<f32> {
    let base = layer * n * ROW;
    data[base + tokens.start * ROW..base + tokens.end * ROW].to_vec()
}

/// Writes rows `tokens` of layer-major `k` and `v` (of `n` tokens) to `cells`, layer by layer.
fn write_rows(
    cache: &mut Cache,
    cells: &[u32],
    k: &[f32],
    v: &[f32],
    n: usize,
    tokens: std::ops::Range<usize>,
) {
    assert_eq!(cells.len(), tokens.len());
    for layer in 0..LAYERS {
        let (kl, vl) = (
            rows(k, n, layer, tokens.clone()),
            rows(v, n, layer, tokens.clone()),
        );
        cache
            .write(
                cells,
                Layers::One(layer as u32),
                &TensorRef::host_f32(&kl),
                &TensorRef::host_f32(&vl),
            )
            .unwrap();
    }
}

/// K and V of `cells` in `layer`.
fn read_rows(cache: &Cache, layer: u32, cells: &[u32]) -> (Vec<f32>, Vec<f32>) {
    let mut k = vec![0f32; cells.len() * ROW];
    let mut v = vec![0f32; cells.len() * ROW];
    cache.read(layer, cells, Some(&mut k), Some(&mut v)).unwrap();
    (k, v)
}

fn rounded(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&x| f16_round(x)).collect()
}

/// `a` equals `b` within `tol`, element by element (f16 storage of `b` when
/// `b` is [`rounded`]).
fn close(a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol,
            "element {i} (token {}): {x} vs {y}",
            i / ROW
        );
    }
}

/// Token t of a sequence lies in cell table[t / B] * B + t % B.
fn assert_block_structure(cells: &[u32]) {
    for (t, &c) in cells.iter().enumerate() {
        assert_eq!(c as usize % B, t % B, "token {t} in cell {c}");
        let first = cells[t - t % B];
        assert_eq!(c, first + (t % B) as u32, "token {t} leaves its block");
    }
}

#[test]
fn shared_prompt_fork_and_copy_on_write() {
    let ctx = context();
    let mut cache = paged_cache(&ctx, 256);
    let stats = cache.paged_stats().unwrap();
    assert_eq!(
        (stats.block_size, stats.n_blocks, stats.free_blocks),
        (16, 16, 16)
    );

    // Seq 0: a prompt of 40 tokens, nothing cached; 2 full blocks and one of 8.
    let n = 40;
    let (ids, pos) = prompt(n);
    let (k, v) = (kv_values(1, n), kv_values(2, n));
    let a0 = cache.paged_admit(0, &ids, &pos, 7).unwrap();
    assert_eq!(a0.n_cached, 0);
    assert_eq!(a0.cells.len(), n);
    assert_eq!(a0.uncached_cells(), &a0.cells[..]);
    assert_block_structure(&a0.cells);
    write_rows(&mut cache, &a0.cells, &k, &v, n, 0..n);
    assert_eq!(cache.paged_cells(0).unwrap(), a0.cells);
    assert_eq!(cache.paged_len(0).unwrap(), n as u32);
    let s = cache.paged_stats().unwrap();
    assert_eq!((s.used_blocks, s.registered_blocks, s.shared_blocks), (3, 2, 0));
    assert_eq!(s.free_blocks + s.cached_blocks + s.used_blocks, s.n_blocks);
    assert_eq!(cache.info().unwrap().used, n as u32);

    // Seq 1, the same prompt and salt: the two full blocks are mapped.
    let a1 = cache.paged_admit(1, &ids, &pos, 7).unwrap();
    assert_eq!(a1.n_cached, 32);
    assert_eq!(a1.cells[..32], a0.cells[..32]);
    assert!(a1.cells[32..].iter().all(|c| !a0.cells.contains(c)));
    assert_eq!(a1.uncached_cells(), &a1.cells[32..]);
    write_rows(&mut cache, a1.uncached_cells(), &k, &v, n, 32..n);
    let s = cache.paged_stats().unwrap();
    assert_eq!((s.used_blocks, s.shared_blocks), (4, 2));

    // Seq 3 with another salt shares nothing.
    let a3 = cache.paged_admit(3, &ids, &pos, 8).unwrap();
    assert_eq!(a3.n_cached, 0);
    cache.seq_rm(3, -1, -1).unwrap();
    assert_eq!(cache.paged_len(3).unwrap(), 0);

    // Fork seq 0 into seq 2: every block shared, no data moves.
    let shared_before = cache.paged_stats().unwrap().shared_blocks;
    cache.paged_fork(0, 2).unwrap();
    assert_eq!(cache.paged_cells(2).unwrap(), a0.cells);
    let s = cache.paged_stats().unwrap();
    assert!(s.shared_blocks > shared_before, "{s:?}");
    assert_eq!(s.shared_blocks, 3);

    // Appending to seq 2 copies its shared, partly filled last block first:
    // its tokens 32..40 move, seq 0's do not.
    let (nk, nv) = (kv_values(3, 1), kv_values(4, 1));
    let new = cache.paged_append(2, Some(&[2000]), &[n as i32]).unwrap();
    let cells2 = cache.paged_cells(2).unwrap();
    assert_eq!(cells2.len(), n + 1);
    assert_eq!(cells2[n], new[0]);
    assert_eq!(cells2[..32], a0.cells[..32]);
    assert!(cells2[32..n].iter().all(|c| !a0.cells.contains(c)), "{cells2:?}");
    assert_block_structure(&cells2);
    assert_eq!(cache.paged_cells(0).unwrap(), a0.cells);
    write_rows(&mut cache, &new, &nk, &nv, 1, 0..1);
    assert_eq!(cache.paged_stats().unwrap().shared_blocks, 2);

    // The copies hold seq 0's rows, bit for bit; seq 0's rows are untouched.
    for layer in 0..LAYERS as u32 {
        let (k0, v0) = read_rows(&cache, layer, &a0.cells);
        let (k2, v2) = read_rows(&cache, layer, &cells2[..n]);
        assert!(k2 == k0 && v2 == v0, "layer {layer}: the copied rows differ");
        close(&k0, &rounded(&rows(&k, n, layer as usize, 0..n)), F16_ULP);
        close(&v0, &rounded(&rows(&v, n, layer as usize, 0..n)), F16_ULP);
        let (kn, _) = read_rows(&cache, layer, &new);
        close(&kn, &rounded(&rows(&nk, 1, layer as usize, 0..1)), F16_ULP);
    }
    assert_eq!(ctx.stats().unwrap().validation_errors, 0);
}

#[test]
fn recorded_append_copies_on_submit_and_rolls_back_when_dropped() {
    let ctx = context();
    let mut cache = paged_cache(&ctx, 128);
    let n = 20; // one full block and 4 tokens
    let (ids, pos) = prompt(n);
    let (k, v) = (kv_values(11, n), kv_values(12, n));
    let a0 = cache.paged_admit(0, &ids, &pos, 0).unwrap();
    write_rows(&mut cache, &a0.cells, &k, &v, n, 0..n);
    cache.paged_fork(0, 1).unwrap();
    cache.paged_fork(0, 2).unwrap();
    let mut stream = ctx.create_stream(&StreamDesc::default()).unwrap();

    // Recorded: the copy runs on submission.
    {
        let mut rec = stream.begin().unwrap();
        let new = rec.paged_append(&cache, 1, None, &[n as i32]).unwrap();
        assert_eq!(new.len(), 1);
        // Mismatched lengths are refused in a recording too.
        assert!(matches!(
            rec.paged_append(&cache, 1, Some(&[1, 2]), &[21]),
            Err(Error::InvalidArgument(_))
        ));
        rec.submit().unwrap();
    }
    stream.wait(Duration::from_secs(60)).unwrap();
    let cells1 = cache.paged_cells(1).unwrap();
    assert_eq!(cells1.len(), n + 1);
    assert_eq!(cells1[..B], a0.cells[..B]);
    assert!(cells1[B..n].iter().all(|c| !a0.cells.contains(c)));
    for layer in 0..LAYERS as u32 {
        let copied = read_rows(&cache, layer, &cells1[..n]);
        assert!(
            copied == read_rows(&cache, layer, &a0.cells),
            "layer {layer}: the copied rows differ"
        );
    }

    // Dropped: seq 2 is cut back to the start of the block it copied.
    {
        let mut rec = stream.begin().unwrap();
        rec.paged_append(&cache, 2, Some(&[5]), &[n as i32]).unwrap();
    }
    assert_eq!(cache.paged_cells(2).unwrap(), a0.cells[..B]);
    assert_eq!(cache.paged_cells(0).unwrap(), a0.cells);
    assert_eq!(ctx.stats().unwrap().validation_errors, 0);
}

#[test]
fn sharing_off_and_cleared_registry_map_nothing() {
    let ctx = context();
    let mut cache = paged_cache(&ctx, 256);
    let n = 40;
    let (ids, pos) = prompt(n);
    cache.paged_admit(0, &ids, &pos, 0).unwrap();

    cache.paged_set_sharing(1, false).unwrap();
    assert_eq!(cache.paged_admit(1, &ids, &pos, 0).unwrap().n_cached, 0);
    cache.paged_set_sharing(1, true).unwrap();
    cache.seq_rm(1, -1, -1).unwrap();
    assert_eq!(cache.paged_admit(1, &ids, &pos, 0).unwrap().n_cached, 32);

    // Removed, seq 0's full blocks stay cached until the registry is cleared.
    cache.seq_rm(-1, -1, -1).unwrap();
    let s = cache.paged_stats().unwrap();
    assert_eq!((s.used_blocks, s.cached_blocks), (0, 2));
    cache.paged_clear_registry().unwrap();
    let s = cache.paged_stats().unwrap();
    assert_eq!(
        (s.cached_blocks, s.registered_blocks, s.free_blocks),
        (0, 0, s.n_blocks)
    );
    assert_eq!(cache.paged_admit(0, &ids, &pos, 0).unwrap().n_cached, 0);
}

#[test]
fn paged_errors() {
    let ctx = context();
    let mut cache = paged_cache(&ctx, 64);
    let (ids, pos) = prompt(20);
    cache.paged_admit(0, &ids, &pos, 0).unwrap();
    let before = cache.paged_stats().unwrap();

    // Admitting into a non-empty sequence.
    let err = cache.paged_admit(0, &ids, &pos, 0).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // A negative id, a sequence out of range, a fork into a non-empty one.
    assert!(matches!(
        cache.paged_admit(1, &[-1], &[0], 0),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        cache.paged_append(99, None, &[0]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(cache.paged_fork(1, 0), Err(Error::InvalidArgument(_))));
    assert!(matches!(cache.paged_fork(0, 0), Err(Error::InvalidArgument(_))));
    assert!(matches!(cache.paged_cells(99), Err(Error::InvalidArgument(_))));
    // Too few blocks: 20 tokens hold 2 of 4, 40 more need 3.
    let (ids40, pos40) = prompt(40);
    assert!(matches!(
        cache.paged_admit(1, &ids40, &pos40, 1),
        Err(Error::CacheFull(_))
    ));
    // Calls of the cell layout the paged one lacks.
    assert!(matches!(cache.seq_div(0, 0, -1, 2), Err(Error::Unsupported(_))));

    // Mismatched lengths, refused before the library is called.
    let err = cache.paged_admit(1, &ids[..3], &pos[..2], 0).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(
        err.message().contains("token_ids has 3 entries for 2 positions"),
        "{err}"
    );
    let err = cache.paged_append(0, Some(&ids[..1]), &pos[20..20]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert_eq!(cache.paged_cells(0).unwrap().len(), 20);
    assert_eq!(cache.paged_len(1).unwrap(), 0);
    assert_eq!(cache.paged_stats().unwrap(), before);

    // Descriptors: a block size other than 16, 32 or 64, a capacity that is
    // not a multiple of it, a paged descriptor with another layout.
    let mut desc = CacheDesc::new(1, 1, 1, 8, 64);
    desc.layout = Layout::Paged;
    desc.paged_layout = Some(PagedLayoutDesc::new(24));
    assert!(matches!(ctx.create_cache(&desc), Err(Error::InvalidArgument(_))));
    desc.paged_layout = Some(PagedLayoutDesc::new(64));
    desc.capacity = 96;
    assert!(matches!(ctx.create_cache(&desc), Err(Error::InvalidArgument(_))));
    desc.paged_layout = None; // 16
    assert_eq!(
        ctx.create_cache(&desc).unwrap().paged_stats().unwrap().block_size,
        16
    );
    desc.layout = Layout::Cells;
    desc.paged_layout = Some(PagedLayoutDesc::new(16));
    assert!(matches!(ctx.create_cache(&desc), Err(Error::InvalidArgument(_))));

    // Paged calls on a cell-layout cache.
    let mut cells = ctx.create_cache(&CacheDesc::new(1, 1, 1, 8, 64)).unwrap();
    let unsupported = |r: kvrt::Result<()>| assert!(matches!(r, Err(Error::Unsupported(_))), "{r:?}");
    unsupported(cells.paged_admit(0, &ids, &pos, 0).map(drop));
    unsupported(cells.paged_append(0, None, &pos).map(drop));
    unsupported(cells.paged_fork(0, 1));
    unsupported(cells.paged_set_sharing(0, false));
    unsupported(cells.paged_clear_registry());
    unsupported(cells.paged_cells(0).map(drop));
    unsupported(cells.paged_len(0).map(drop));
    unsupported(cells.paged_stats().map(drop));
    // The length check comes first: InvalidArgument, not the library's Unsupported.
    assert!(matches!(
        cells.paged_admit(0, &ids, &pos[..1], 0),
        Err(Error::InvalidArgument(_))
    ));
    let mut stream = ctx.create_stream(&StreamDesc::default()).unwrap();
    let mut rec = stream.begin().unwrap();
    assert!(matches!(
        rec.paged_append(&cells, 0, None, &[0]),
        Err(Error::Unsupported(_))
    ));
    drop(rec);

    // kvrt_cache_store works on a paged cache too, in the sequence's blocks.
    let (k, v) = (values(21, 2 * ROW), values(22, 2 * ROW));
    let stored = cache
        .store(
            &Batch::for_seq(2, &[0, 1]),
            Layers::One(0),
            &TensorRef::host_f32(&k),
            &TensorRef::host_f32(&v),
        )
        .unwrap();
    assert_eq!(cache.paged_cells(2).unwrap(), stored);
    assert_block_structure(&stored);
    close(&read_rows(&cache, 0, &stored).0, &rounded(&k), F16_ULP);
    assert_eq!(ctx.stats().unwrap().validation_errors, 0);
}

//! The window group (`kvrt_window_layout_desc`) on the device: windowed
//! layers drop the rows no later query sees, `seq_window_pos_min`, the errors
//! of reaching dropped rows and of state saves, and the memory it saves.
//! Validation is on (KVRT_VALIDATION=1).

mod common;

use common::*;
use kvrt::{
    AttentionParams, Batch, Cache, CacheDesc, Context, Error, Layers, Layout, OutputRef, PagedLayoutDesc,
    TensorRef, WindowLayoutDesc,
};

const LAYERS: usize = 2;
const H: usize = 4; // query heads
const KV: usize = 2; // KV heads
const D: usize = 16; // head dim
const ROW: usize = KV * D; // values of one token's K (or V) in one layer
const W: u32 = 16; // window of layer 1
const N_KEEP: u32 = 2;

/// A cell cache of 2 layers (layer 1 with a window of 16) with a window
/// group of the default size keeping positions below 2, for 1 sequence.
fn window_cache(ctx: &Context) -> Cache {
    let mut desc = CacheDesc::new(LAYERS as u32, H as u32, KV as u32, D as u32, 256);
    desc.layer_windows = Some(vec![0, W]);
    desc.max_seqs = 1;
    desc.window_layout = Some(WindowLayoutDesc::new(0, N_KEEP));
    ctx.create_cache(&desc).unwrap()
}

/// Layer-major K and V of one token at `pos` (every layer).
fn token_kv(pos: i32) -> (Vec<f32>, Vec<f32>) {
    let seed = 1000 + 2 * pos as u64;
    (values(seed, LAYERS * ROW), values(seed + 1, LAYERS * ROW))
}

/// Stores one token of sequence 0 at `pos`, every layer; returns its cell.
fn store_token(cache: &mut Cache, pos: i32) -> kvrt::Result<u32> {
    let (k, v) = token_kv(pos);
    let positions = [pos];
    let cells = cache.store(
        &Batch::for_seq(0, &positions),
        Layers::All,
        &TensorRef::host_f32(&k),
        &TensorRef::host_f32(&v),
    )?;
    Ok(cells[0])
}

/// K and V of one cell in `layer`.
fn read_cell(cache: &Cache, layer: u32, cell: u32) -> kvrt::Result<(Vec<f32>, Vec<f32>)> {
    let mut k = vec![0f32; ROW];
    let mut v = vec![0f32; ROW];
    cache.read(layer, &[cell], Some(&mut k), Some(&mut v))?;
    Ok((k, v))
}

/// Checks that `got` is layer `layer` of the layer-major `want`, rounded to f16.
fn assert_rows(got: &[f32], want: &[f32], layer: usize) {
    let want = &want[layer * ROW..(layer + 1) * ROW];
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - f16_round(*w)).abs() <= 1.0 / 2048.0, "value {i}: {g} vs {w}");
    }
}

/// After 100 tokens with a window of 16 and two sinks: layer 1 dropped
/// position 50, and the kept (below n_keep) and in-window positions read
/// back in both layers.
fn assert_held(cache: &Cache, cells: &[u32]) {
    let err = read_cell(cache, 1, cells[50]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    for pos in [0usize, 1, 84, 99] {
        let (wk, wv) = token_kv(pos as i32);
        for layer in 0..LAYERS {
            let (k, v) = read_cell(cache, layer as u32, cells[pos]).unwrap();
            assert_rows(&k, &wk, layer);
            assert_rows(&v, &wv, layer);
        }
    }
}

#[test]
fn window_group_drops_rows_out_of_the_window() {
    let ctx = context();
    let mut cache = window_cache(&ctx);
    assert_eq!(cache.seq_window_pos_min(0).unwrap(), None);
    let cells: Vec<u32> = (0..100).map(|p| store_token(&mut cache, p).unwrap()).collect();

    // The last store (position 99) dropped positions 2..=83 of layer 1.
    assert_eq!(cache.seq_window_pos_min(0).unwrap(), Some(84));
    assert_eq!(cache.seq_pos_min(0).unwrap(), Some(0));
    assert_eq!(cache.seq_pos_max(0).unwrap(), Some(99));

    // Position 50: layer 0 still holds it, the windowed layer 1 does not.
    let (k, v) = read_cell(&cache, 0, cells[50]).unwrap();
    let (wk, wv) = token_kv(50);
    assert_rows(&k, &wk, 0);
    assert_rows(&v, &wv, 0);
    assert_held(&cache, &cells);

    // A swap keeps exactly what the group holds: the sinks and 84.. only.
    let swapped = cache.seq_swap_out(0).unwrap();
    assert_eq!(cache.seq_window_pos_min(0).unwrap(), None);
    cache.seq_swap_in(0, &swapped).unwrap();
    assert_eq!(cache.seq_window_pos_min(0).unwrap(), Some(84));
    // (Its cells were free, so it comes back to them.)
    assert_held(&cache, &cells);

    // Going on at 90 needs positions 75.. that layer 1 dropped: nothing changes.
    cache.seq_rm(0, 90, -1).unwrap();
    assert_eq!(cache.seq_window_pos_min(0).unwrap(), Some(84));
    let err = store_token(&mut cache, 90).unwrap_err();
    assert!(matches!(err, Error::InvalidState(_)), "{err:?}");
    assert_eq!(cache.seq_pos_max(0).unwrap(), Some(89));

    // Removing the positions from n_keep on lets the sequence start again there.
    cache.seq_rm(0, N_KEEP as i32, -1).unwrap();
    assert_eq!(cache.seq_pos_max(0).unwrap(), Some(1));
    let cell = store_token(&mut cache, 2).unwrap();
    let (k, _) = read_cell(&cache, 1, cell).unwrap();
    assert_rows(&k, &token_kv(2).0, 1);
}

#[test]
fn window_layout_needs_a_windowed_layer() {
    let ctx = context();
    let mut desc = CacheDesc::new(LAYERS as u32, H as u32, KV as u32, D as u32, 256);
    desc.window_layout = Some(WindowLayoutDesc::new(0, N_KEEP));
    let err = ctx.create_cache(&desc).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    desc.layer_windows = Some(vec![0, 0]);
    let err = ctx.create_cache(&desc).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    // More cells than the capacity.
    desc.layer_windows = Some(vec![0, W]);
    desc.window_layout = Some(WindowLayoutDesc::new(257, 0));
    let err = ctx.create_cache(&desc).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
}

#[test]
fn window_group_takes_less_device_memory() {
    let ctx = context();
    let mut desc = CacheDesc::new(4, H as u32, KV as u32, D as u32, 4096);
    desc.layer_windows = Some(vec![0, 64, 0, 64]);
    desc.max_seqs = 2;
    let full = ctx.create_cache(&desc).unwrap().info().unwrap().device_bytes;
    desc.window_layout = Some(WindowLayoutDesc::default());
    let windowed = ctx.create_cache(&desc).unwrap().info().unwrap().device_bytes;
    assert!(windowed < full, "{windowed} >= {full}");
}

/// Layers of the paged window-group test: windows 8, none and 12.
const PAGED_WINDOWS: [u32; 3] = [8, 0, 12];
const PAGED_N_KEEP: u32 = 2;

/// A paged cache (blocks of 16, 1024 cells, 4 sequences) of 3 layers with
/// windows [8, 0, 12], with a window group of the default size keeping
/// positions below 2 when `grouped`.
fn paged_window_cache(ctx: &Context, grouped: bool) -> Cache {
    let mut desc = CacheDesc::new(PAGED_WINDOWS.len() as u32, H as u32, KV as u32, D as u32, 1024);
    desc.layout = Layout::Paged;
    desc.paged_layout = Some(PagedLayoutDesc::new(16));
    desc.layer_windows = Some(PAGED_WINDOWS.to_vec());
    desc.max_seqs = 4;
    if grouped {
        desc.window_layout = Some(WindowLayoutDesc::new(0, PAGED_N_KEEP));
    }
    ctx.create_cache(&desc).unwrap()
}

/// K and V of the token `id` at `pos` in `layer`: a function of the four.
fn paged_token_kv(id: i32, pos: i32, layer: usize) -> (Vec<f32>, Vec<f32>) {
    let seed = ((id as u64) << 24) ^ ((pos as u64) << 4) ^ ((layer as u64) << 1);
    (values(seed, ROW), values(seed | (1 << 63), ROW))
}

/// Writes the rows of tokens `ids` at `positions` to `cells`, every layer.
fn paged_write(cache: &mut Cache, cells: &[u32], ids: &[i32], positions: &[i32]) {
    assert_eq!(cells.len(), ids.len());
    for layer in 0..PAGED_WINDOWS.len() {
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for (&id, &pos) in ids.iter().zip(positions) {
            let (tk, tv) = paged_token_kv(id, pos, layer);
            k.extend(tk);
            v.extend(tv);
        }
        cache
            .write(
                cells,
                Layers::One(layer as u32),
                &TensorRef::host_f32(&k),
                &TensorRef::host_f32(&v),
            )
            .unwrap();
    }
}

/// A 40-token prompt in sequence 0, forked into 1, which then goes on one
/// token at a time to position 44, and the prompt plus one token admitted
/// into sequence 2; returns n_cached of that admit and the attention of
/// sequences 0, 1 and 2 at their next positions (40, 45, 41) in every layer.
fn paged_window_run(cache: &mut Cache) -> (u32, Vec<Vec<f32>>) {
    let n = 40;
    let ids: Vec<i32> = (0..n).map(|i| 1000 + i).collect();
    let pos: Vec<i32> = (0..n).collect();
    let a0 = cache.paged_admit(0, &ids, &pos, 0).unwrap();
    assert_eq!(a0.n_cached, 0);
    let from = a0.n_cached as usize;
    paged_write(cache, a0.uncached_cells(), &ids[from..], &pos[from..]);

    cache.paged_fork(0, 1).unwrap();
    for p in n..n + 5 {
        let (id, at) = ([2000 + p], [p]);
        let cells = cache.paged_append(1, Some(&id), &at).unwrap();
        paged_write(cache, &cells, &id, &at);
    }

    let ids2: Vec<i32> = (0..=n).map(|i| 1000 + i).collect();
    let pos2: Vec<i32> = (0..=n).collect();
    let a2 = cache.paged_admit(2, &ids2, &pos2, 0).unwrap();
    let from = a2.n_cached as usize;
    paged_write(cache, a2.uncached_cells(), &ids2[from..], &pos2[from..]);

    let mut outs = Vec::new();
    for (seq, next) in [(0, n), (1, n + 5), (2, n + 1)] {
        for layer in 0..PAGED_WINDOWS.len() as u32 {
            let q = values(500 + 10 * seq as u64 + u64::from(layer), H * D);
            let mut out = vec![0f32; H * D];
            cache
                .attention(
                    layer,
                    &Batch::for_seq(seq, &[next]),
                    &TensorRef::host_f32(&q),
                    &mut OutputRef::host_f32(&mut out),
                    &AttentionParams::default(),
                )
                .unwrap_or_else(|e| panic!("sequence {seq}, layer {layer}: {e:?}"));
            outs.push(out);
        }
    }
    (a2.n_cached, outs)
}

#[test]
fn paged_window_group_attends_as_the_plain_paged_cache() {
    let ctx = context();
    let mut grouped = paged_window_cache(&ctx, true);
    let mut plain = paged_window_cache(&ctx, false);
    let (n_grouped, out_grouped) = paged_window_run(&mut grouped);
    let (n_plain, out_plain) = paged_window_run(&mut plain);

    // Sequence 0 still holds every row of the prompt: the two full blocks map.
    assert_eq!(n_grouped, 32);
    assert_eq!(n_plain, 32);

    for (i, (g, p)) in out_grouped.iter().zip(&out_plain).enumerate() {
        let (seq, layer) = (i / PAGED_WINDOWS.len(), i % PAGED_WINDOWS.len());
        let max_abs = g.iter().zip(p).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let err: f64 = g
            .iter()
            .zip(p)
            .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
            .sum();
        let norm: f64 = p.iter().map(|&b| f64::from(b).powi(2)).sum();
        let nmse = err / norm;
        assert!(
            max_abs <= 1e-5 && nmse <= 1e-10,
            "sequence {seq}, layer {layer}: max abs diff {max_abs}, NMSE {nmse}"
        );
    }

    let (gb, pb) = (
        grouped.info().unwrap().device_bytes,
        plain.info().unwrap().device_bytes,
    );
    assert!(gb < pb, "device bytes with the group {gb}, without {pb}");

    // Appending position 44 dropped positions 2..=32 of sequence 1 (44 - 12).
    assert_eq!(grouped.seq_window_pos_min(1).unwrap(), Some(33));
    assert_eq!(ctx.stats().unwrap().validation_errors, 0);
}

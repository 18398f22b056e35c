//! The window group (`kvrt_window_layout_desc`) on the device: windowed
//! layers drop the rows no later query sees, `seq_window_pos_min`, the errors
//! of reaching dropped rows and of state saves, and the memory it saves.
//! Validation is on (KVRT_VALIDATION=1).

mod common;

use common::*;
use kvrt::{Batch, Cache, CacheDesc, Context, Error, Layers, TensorRef, WindowLayoutDesc};

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
    desc.window_layout = Some(WindowLayoutDesc {
        cells: 0,
        n_keep: N_KEEP,
    });
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
    let err = read_cell(&cache, 1, cells[50]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    // Kept (below n_keep) and in-window positions read back in both layers.
    for pos in [0usize, 1, 84, 99] {
        let (wk, wv) = token_kv(pos as i32);
        for layer in 0..LAYERS {
            let (k, v) = read_cell(&cache, layer as u32, cells[pos]).unwrap();
            assert_rows(&k, &wk, layer);
            assert_rows(&v, &wv, layer);
        }
    }

    // State saves, swaps and transfers are unsupported with a window group.
    let err = cache.state_size(None).unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err:?}");
    let err = cache.state_save(Some(0)).unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err:?}");
    let err = cache.seq_swap_out(0).unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err:?}");

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
    desc.window_layout = Some(WindowLayoutDesc {
        cells: 0,
        n_keep: N_KEEP,
    });
    let err = ctx.create_cache(&desc).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    desc.layer_windows = Some(vec![0, 0]);
    let err = ctx.create_cache(&desc).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    // More cells than the capacity.
    desc.layer_windows = Some(vec![0, W]);
    desc.window_layout = Some(WindowLayoutDesc {
        cells: 257,
        n_keep: 0,
    });
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

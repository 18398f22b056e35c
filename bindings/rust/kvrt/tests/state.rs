//! Cache state on the device: sequence and whole-cache states in memory and
//! in files, host swap in the cell and paged layouts, and the errors of
//! malformed states, bad paths and misuse. Validation is on
//! (KVRT_VALIDATION=1).

mod common;

use common::*;
use kvrt::{
    AttentionParams, Batch, Cache, CacheDesc, Context, Error, KvArray, Layers, Layout, OutputRef,
    PagedLayoutDesc, TensorRef,
};
use std::path::{Path, PathBuf};

const LAYERS: usize = 2;
const H: usize = 4; // query heads
const KV: usize = 2; // KV heads
const D: usize = 16; // head dim of the cell-layout caches
const PD: usize = 32; // head dim of the paged caches
const B: usize = 16; // block size of the paged caches

/// A directory of its own under the system's temporary directory, removed
/// on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("kvrt-state-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A cell-layout cache of 2 layers, 4 query heads over 2 KV heads of 16.
fn cell_cache(ctx: &Context, capacity: u32) -> Cache {
    ctx.create_cache(&CacheDesc::new(
        LAYERS as u32,
        H as u32,
        KV as u32,
        D as u32,
        capacity,
    ))
    .unwrap()
}

/// A paged cache of 2 layers, 2 KV heads of 32 and blocks of 16.
fn paged_cache(ctx: &Context, capacity: u32) -> Cache {
    let mut desc = CacheDesc::new(LAYERS as u32, H as u32, KV as u32, PD as u32, capacity);
    desc.layout = Layout::Paged;
    desc.paged_layout = Some(PagedLayoutDesc::new(B as u32));
    desc.max_seqs = 4;
    ctx.create_cache(&desc).unwrap()
}

/// Stores `n` tokens at positions 0..n in `seq`, every layer; returns their cells.
fn store_seq(cache: &mut Cache, seq: i32, n: usize, seed: u64) -> Vec<u32> {
    let positions: Vec<i32> = (0..n as i32).collect();
    let k = values(seed, LAYERS * n * KV * D);
    let v = values(seed + 1, LAYERS * n * KV * D);
    cache
        .store(
            &Batch::for_seq(seq, &positions),
            Layers::All,
            &TensorRef::host_f32(&k),
            &TensorRef::host_f32(&v),
        )
        .unwrap()
}

/// The stored bytes of `cells`, bit for bit: K then V of every layer.
fn raw_rows(cache: &Cache, cells: &[u32]) -> Vec<u8> {
    let info = cache.info().unwrap();
    let mut all = Vec::new();
    for layer in 0..LAYERS as u32 {
        for (array, row) in [(KvArray::K, info.k_row_bytes), (KvArray::V, info.v_row_bytes)] {
            let mut out = vec![0u8; cells.len() * row as usize];
            cache.read_raw(layer, array, cells, &mut out).unwrap();
            all.extend_from_slice(&out);
        }
    }
    all
}

/// The smallest and largest positions of `seq`.
fn span(cache: &Cache, seq: i32) -> (Option<i32>, Option<i32>) {
    (cache.seq_pos_min(seq).unwrap(), cache.seq_pos_max(seq).unwrap())
}

/// Attention of one query at position `pos` of `seq` in `layer`.
fn attend(cache: &mut Cache, layer: u32, seq: i32, pos: i32) -> Vec<f32> {
    let q = values(100 + u64::from(layer), H * D);
    let mut out = vec![0f32; H * D];
    let at = [pos];
    cache
        .attention(
            layer,
            &Batch::for_seq(seq, &at),
            &TensorRef::host_f32(&q),
            &mut OutputRef::host_f32(&mut out),
            &AttentionParams::default(),
        )
        .unwrap();
    out
}

/// `cache` and `other` hold the same tokens of sequences 0..n_seqs in the
/// cells 0..n_cells, row for row and bit for bit.
fn same_cells(cache: &Cache, other: &Cache, n_seqs: i32, n_cells: u32) {
    assert_eq!(other.info().unwrap().used, cache.info().unwrap().used);
    for seq in 0..n_seqs {
        assert_eq!(span(other, seq), span(cache, seq), "sequence {seq}");
    }
    let all: Vec<u32> = (0..n_cells).collect();
    assert_eq!(raw_rows(other, &all), raw_rows(cache, &all));
}

#[test]
fn cell_layout_sequence_and_whole_cache_states() {
    let ctx = context();
    let mut cache = cell_cache(&ctx, 64);
    let (n0, n1) = (7usize, 5usize);
    let cells0 = store_seq(&mut cache, 0, n0, 1);
    let cells1 = store_seq(&mut cache, 1, n1, 11);
    assert_eq!(cache.info().unwrap().used, (n0 + n1) as u32);

    // Sequence 0 as bytes, loaded into sequence 2: its saved cells are taken,
    // so it goes to the lowest free cells, in the saved order.
    let state0 = cache.state_save(Some(0)).unwrap();
    assert_eq!(cache.state_size(Some(0)).unwrap(), state0.len() as u64);
    cache.state_load(Some(2), &state0).unwrap();
    assert_eq!(span(&cache, 2), (Some(0), Some(n0 as i32 - 1)));
    assert_eq!(cache.info().unwrap().used, (2 * n0 + n1) as u32);
    let free: Vec<u32> = (0..64u32)
        .filter(|c| !cells0.contains(c) && !cells1.contains(c))
        .take(n0)
        .collect();
    assert_eq!(raw_rows(&cache, &free), raw_rows(&cache, &cells0));
    // The loaded sequence attends as the saved one does.
    for layer in 0..LAYERS as u32 {
        close(
            &attend(&mut cache, layer, 2, n0 as i32 - 1),
            &attend(&mut cache, layer, 0, n0 as i32 - 1),
            1e-5,
        );
    }

    // The whole cache, into a fresh cache: the same cells.
    let whole = cache.state_save(None).unwrap();
    assert_eq!(cache.state_size(None).unwrap(), whole.len() as u64);
    assert!(whole.len() > state0.len());
    let mut fresh = cell_cache(&ctx, 64);
    fresh.state_load(None, &whole).unwrap();
    same_cells(&cache, &fresh, 3, (2 * n0 + n1) as u32);

    // Through a file, into a cache of another capacity.
    let dir = TempDir::new("cells");
    let file = dir.path("cache.kvrt");
    cache.state_save_file(None, &file).unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), whole);
    let mut from_file = cell_cache(&ctx, 32);
    from_file.state_load_file(None, &file).unwrap();
    same_cells(&cache, &from_file, 3, (2 * n0 + n1) as u32);

    // A sequence through a file, into an empty sequence of the fresh cache.
    let seq_file = dir.path("seq1.kvrt");
    cache.state_save_file(Some(1), &seq_file).unwrap();
    fresh.state_load_file(Some(3), &seq_file).unwrap();
    assert_eq!(span(&fresh, 3), (Some(0), Some(n1 as i32 - 1)));
    assert_eq!(fresh.info().unwrap().used, (2 * n0 + 2 * n1) as u32);
    assert_eq!(ctx.stats().unwrap().validation_errors, 0);
}

#[test]
fn cell_layout_host_swap() {
    let ctx = context();
    let mut cache = cell_cache(&ctx, 64);
    let cells0 = store_seq(&mut cache, 0, 6, 21);
    let cells1 = store_seq(&mut cache, 1, 9, 31);
    let rows1 = raw_rows(&cache, &cells1);
    let out1: Vec<Vec<f32>> = (0..LAYERS as u32).map(|l| attend(&mut cache, l, 1, 8)).collect();
    let used = cache.info().unwrap().used;

    // Out: sequence 1 leaves the cache; in: back to its cells, bit for bit.
    let swapped = cache.seq_swap_out(1).unwrap();
    assert_eq!(span(&cache, 1), (None, None));
    assert_eq!(cache.info().unwrap().used, used - 9);
    cache.seq_swap_in(1, &swapped).unwrap();
    assert_eq!(span(&cache, 1), (Some(0), Some(8)));
    assert_eq!(cache.info().unwrap().used, used);
    assert_eq!(raw_rows(&cache, &cells1), rows1);
    for layer in 0..LAYERS as u32 {
        assert_eq!(attend(&mut cache, layer, 1, 8), out1[layer as usize]);
    }

    // The same through a file, and into another sequence.
    let dir = TempDir::new("swap");
    let file = dir.path("seq1.kvrt");
    cache.seq_swap_out_file(1, &file).unwrap();
    assert_eq!(span(&cache, 1), (None, None));
    assert_eq!(std::fs::metadata(&file).unwrap().len(), swapped.len() as u64);
    cache.seq_swap_in_file(2, &file).unwrap();
    assert_eq!(span(&cache, 2), (Some(0), Some(8)));
    assert_eq!(raw_rows(&cache, &cells1), rows1);
    assert_eq!(span(&cache, 0), (Some(0), Some(5)));
    assert_eq!(cells0.len(), 6);
    assert_eq!(ctx.stats().unwrap().validation_errors, 0);
}

#[test]
fn paged_layout_swap_and_whole_cache_state() {
    let ctx = context();
    let mut cache = paged_cache(&ctx, 256);

    // Seq 0: a prompt of 40 tokens (2 full blocks and one of 8); seq 1: a
    // fork of it with a token of its own, which copies the shared last block.
    let n = 40;
    let ids: Vec<i32> = (0..n as i32).map(|t| 1000 + 7 * t).collect();
    let pos: Vec<i32> = (0..n as i32).collect();
    let admitted = cache.paged_admit(0, &ids, &pos, 0).unwrap();
    let k = values(41, LAYERS * n * KV * PD);
    let v = values(42, LAYERS * n * KV * PD);
    cache
        .write(
            &admitted.cells,
            Layers::All,
            &TensorRef::host_f32(&k),
            &TensorRef::host_f32(&v),
        )
        .unwrap();
    cache.paged_fork(0, 1).unwrap();
    let own = cache.paged_append(1, Some(&[5]), &[n as i32]).unwrap();
    let (k1, v1) = (values(43, LAYERS * KV * PD), values(44, LAYERS * KV * PD));
    cache
        .write(
            &own,
            Layers::All,
            &TensorRef::host_f32(&k1),
            &TensorRef::host_f32(&v1),
        )
        .unwrap();
    let s = cache.paged_stats().unwrap();
    assert_eq!((s.used_blocks, s.shared_blocks), (4, 2));
    let rows0 = raw_rows(&cache, &cache.paged_cells(0).unwrap());
    let rows1 = raw_rows(&cache, &cache.paged_cells(1).unwrap());
    assert_eq!(cache.paged_len(1).unwrap(), n as u32 + 1);

    // The whole cache into a new paged cache: the same rows in sequence
    // order, and the same sharing of whole blocks.
    let whole = cache.state_save(None).unwrap();
    let mut other = paged_cache(&ctx, 256);
    other.state_load(None, &whole).unwrap();
    let so = other.paged_stats().unwrap();
    assert_eq!(
        (so.used_blocks, so.shared_blocks),
        (s.used_blocks, s.shared_blocks)
    );
    assert_eq!(raw_rows(&other, &other.paged_cells(0).unwrap()), rows0);
    assert_eq!(raw_rows(&other, &other.paged_cells(1).unwrap()), rows1);
    assert_eq!(span(&other, 1), (Some(0), Some(n as i32)));

    // Swap seq 1 out: it empties and its own block returns to the pool.
    let swapped = cache.seq_swap_out(1).unwrap();
    assert_eq!(cache.paged_len(1).unwrap(), 0);
    let s = cache.paged_stats().unwrap();
    assert_eq!((s.used_blocks, s.shared_blocks), (3, 0));
    assert_eq!(s.free_blocks + s.cached_blocks + s.used_blocks, s.n_blocks);

    // Back in: appended into blocks of its own, the same rows in order.
    cache.seq_swap_in(1, &swapped).unwrap();
    assert_eq!(cache.paged_len(1).unwrap(), n as u32 + 1);
    assert_eq!(raw_rows(&cache, &cache.paged_cells(1).unwrap()), rows1);
    assert_eq!(raw_rows(&cache, &cache.paged_cells(0).unwrap()), rows0);
    let s = cache.paged_stats().unwrap();
    assert_eq!((s.used_blocks, s.shared_blocks), (6, 0));

    // A sequence state of the paged cache through a file.
    let dir = TempDir::new("paged");
    let file = dir.path("seq0.kvrt");
    cache.seq_swap_out_file(0, &file).unwrap();
    assert_eq!(cache.paged_len(0).unwrap(), 0);
    cache.seq_swap_in_file(2, &file).unwrap();
    assert_eq!(raw_rows(&cache, &cache.paged_cells(2).unwrap()), rows0);
    assert_eq!(ctx.stats().unwrap().validation_errors, 0);
}

#[test]
fn state_errors() {
    let ctx = context();
    let mut cache = cell_cache(&ctx, 32);
    store_seq(&mut cache, 0, 5, 51);
    store_seq(&mut cache, 1, 3, 61);
    let state = cache.state_save(Some(0)).unwrap();
    let used = cache.info().unwrap().used;

    // Malformed bytes: truncated, trailing, a flipped byte, nothing at all.
    let err = cache.state_load(Some(2), &state[..state.len() - 1]).unwrap_err();
    assert!(matches!(err, Error::CorruptState(_)), "{err}");
    assert!(!err.message().is_empty());
    let mut long = state.clone();
    long.push(0);
    assert!(matches!(
        cache.state_load(Some(2), &long),
        Err(Error::CorruptState(_))
    ));
    let mut flipped = state.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    assert!(matches!(
        cache.state_load(Some(2), &flipped),
        Err(Error::CorruptState(_))
    ));
    assert!(matches!(
        cache.state_load(Some(2), &[]),
        Err(Error::CorruptState(_))
    ));
    // All or nothing: the failed loads changed nothing.
    assert_eq!(span(&cache, 2), (None, None));
    assert_eq!(cache.info().unwrap().used, used);

    // A sequence state as a whole cache, a negative sequence, one out of range.
    assert!(matches!(
        cache.state_load(None, &state),
        Err(Error::InvalidArgument(_))
    ));
    let err = cache.state_load(Some(-1), &state).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(matches!(
        cache.state_save(Some(-2)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        cache.state_save(Some(9999)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(cache.seq_swap_out(-1), Err(Error::InvalidArgument(_))));

    // Swapping into a sequence that holds tokens; the sequence stays.
    let err = cache.seq_swap_in(1, &state).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert_eq!(span(&cache, 1), (Some(0), Some(2)));

    // A state of another geometry.
    let mut narrow = ctx.create_cache(&CacheDesc::new(1, 1, 1, 8, 32)).unwrap();
    assert!(matches!(
        narrow.state_load(Some(0), &state),
        Err(Error::InvalidArgument(_))
    ));

    // Paths: an interior NUL (refused before the library), an empty path, a
    // missing file, a directory.
    let dir = TempDir::new("errors");
    let err = cache.state_save_file(Some(0), "bad\0name.kvrt").unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(err.message().contains("NUL"), "{err}");
    assert!(matches!(
        cache.seq_swap_in_file(3, Path::new("a\0b")),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        cache.state_load_file(None, ""),
        Err(Error::InvalidArgument(_))
    ));
    let missing = dir.path("missing.kvrt");
    let err = cache.state_load_file(Some(2), &missing).unwrap_err();
    assert!(matches!(err, Error::Io(_)), "{err}");
    assert!(matches!(cache.seq_swap_in_file(2, &missing), Err(Error::Io(_))));
    assert!(matches!(
        cache.state_load_file(Some(2), &dir.0),
        Err(Error::Io(_))
    ));
    // Writing into a directory that does not exist fails and leaves the
    // sequence in the cache.
    let nowhere = dir.path("no/such/dir/seq.kvrt");
    assert!(matches!(
        cache.state_save_file(Some(0), &nowhere),
        Err(Error::Io(_))
    ));
    assert!(matches!(cache.seq_swap_out_file(0, &nowhere), Err(Error::Io(_))));
    assert_eq!(span(&cache, 0), (Some(0), Some(4)));

    // A truncated file, like truncated bytes.
    let short = dir.path("short.kvrt");
    std::fs::write(&short, &state[..state.len() / 2]).unwrap();
    assert!(matches!(
        cache.state_load_file(Some(2), &short),
        Err(Error::CorruptState(_))
    ));
    assert_eq!(cache.info().unwrap().used, used);
    assert_eq!(ctx.stats().unwrap().validation_errors, 0);
}

#[cfg(unix)]
#[test]
fn non_utf8_paths_on_unix() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let ctx = context();
    let mut cache = cell_cache(&ctx, 16);
    store_seq(&mut cache, 0, 4, 71);
    let dir = TempDir::new("bytes");
    let file = dir.0.join(OsStr::from_bytes(b"state-\xff.kvrt"));
    cache.state_save_file(Some(0), &file).unwrap();
    assert!(file.exists());
    cache.state_load_file(Some(1), &file).unwrap();
    assert_eq!(span(&cache, 1), (Some(0), Some(3)));
}

fn close(a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol, "element {i}: {x} vs {y}");
    }
}

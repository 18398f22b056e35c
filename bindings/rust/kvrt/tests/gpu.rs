//! Store, attend, shift and transfer on the device, checked against an f64
//! reference (f16 storage tolerance). Validation is on (KVRT_VALIDATION=1).

mod common;

use common::*;
use kvrt::{
    AttentionParams, Batch, CacheDesc, ElementType, KvArray, Layers, Layout, OutputRef, StaticLayoutDesc,
    StreamDesc, TensorRef,
};
use std::time::Duration;

const H: usize = 4; // query heads
const KV: usize = 2; // KV heads
const D: usize = 16; // head dim

fn close(a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol, "element {i}: {x} vs {y}");
    }
}

#[test]
fn store_attend_matches_reference() {
    let ctx = context();
    let mut cache = ctx
        .create_cache(&CacheDesc::new(2, H as u32, KV as u32, D as u32, 64))
        .unwrap();
    let n = 7;
    let positions: Vec<i32> = (0..n as i32).collect();
    let batch = Batch::for_seq(0, &positions);
    // Both layers at once: layer-major blocks.
    let k = values(1, 2 * n * KV * D);
    let v = values(2, 2 * n * KV * D);
    let cells = cache
        .store(
            &batch,
            Layers::All,
            &TensorRef::host_f32(&k),
            &TensorRef::host_f32(&v),
        )
        .unwrap();
    assert_eq!(cells.len(), n);
    assert_eq!(cache.info().unwrap().used, n as u32);
    assert_eq!(cache.seq_pos_max(0).unwrap(), Some(n as i32 - 1));
    assert_eq!(cache.seq_pos_min(1).unwrap(), None);

    for layer in 0..2u32 {
        let off = layer as usize * n * KV * D;
        let kl: Vec<f32> = k[off..off + n * KV * D].iter().map(|&x| f16_round(x)).collect();
        let vl: Vec<f32> = v[off..off + n * KV * D].iter().map(|&x| f16_round(x)).collect();
        let mut kr = vec![0f32; n * KV * D];
        let mut vr = vec![0f32; n * KV * D];
        cache.read(layer, &cells, Some(&mut kr), Some(&mut vr)).unwrap();
        close(&kr, &kl, 1e-6);
        close(&vr, &vl, 1e-6);

        let q = values(3 + u64::from(layer), H * D);
        let mut out = vec![0f32; H * D];
        let last = [n as i32 - 1];
        cache
            .attention(
                layer,
                &Batch::for_seq(0, &last),
                &TensorRef::host_f32(&q),
                &mut OutputRef::host_f32(&mut out),
                &AttentionParams::default(),
            )
            .unwrap();
        close(&out, &reference(&q, &kl, &vl, H, KV, D), 2e-3);
    }
    assert_eq!(ctx.stats().unwrap().validation_errors, 0);
}

#[test]
fn recorded_attention_into_buffer() {
    let ctx = context();
    let mut cache = ctx
        .create_cache(&CacheDesc::new(1, H as u32, KV as u32, D as u32, 32))
        .unwrap();
    let positions = [0, 1, 2, 3];
    let k = values(5, 4 * KV * D);
    let v = values(6, 4 * KV * D);
    let q = values(7, H * D);
    let out_buf = ctx.create_buffer((H * D * 4) as u64).unwrap();
    let mut stream = ctx
        .create_stream(&{
            let mut sd = StreamDesc::default();
            sd.timestamps = true;
            sd
        })
        .unwrap();
    {
        let mut rec = stream.begin().unwrap();
        let batch = Batch::for_seq(0, &positions);
        rec.store(
            &cache,
            &batch,
            Layers::One(0),
            &TensorRef::host_f32(&k),
            &TensorRef::host_f32(&v),
        )
        .unwrap();
        rec.attention(
            &cache,
            0,
            &Batch::for_seq(0, &positions[3..]),
            &TensorRef::host_f32(&q),
            &mut OutputRef::buffer(&out_buf, ElementType::F32),
            &AttentionParams::default(),
        )
        .unwrap();
        rec.submit().unwrap();
    }
    stream.wait(Duration::from_secs(60)).unwrap();
    let timings = stream.timings().unwrap();
    assert!(!timings.is_empty());
    let out: Vec<f32> = out_buf.download_vec(0, H * D).unwrap();
    let kr: Vec<f32> = k.iter().map(|&x| f16_round(x)).collect();
    let vr: Vec<f32> = v.iter().map(|&x| f16_round(x)).collect();
    close(&out, &reference(&q, &kr, &vr, H, KV, D), 2e-3);
    assert_eq!(cache.info().unwrap().used, 4);
    cache.clear().unwrap();
    assert_eq!(cache.info().unwrap().used, 0);
}

#[test]
fn dropped_recording_rolls_back() {
    let ctx = context();
    let cache = ctx.create_cache(&CacheDesc::new(1, 1, 1, 8, 32)).unwrap();
    let mut stream = ctx.create_stream(&StreamDesc::default()).unwrap();
    let data = vec![1f32; 8];
    {
        let mut rec = stream.begin().unwrap();
        let p = [0];
        rec.store(
            &cache,
            &Batch::for_seq(0, &p),
            Layers::One(0),
            &TensorRef::host_f32(&data),
            &TensorRef::host_f32(&data),
        )
        .unwrap();
        assert_eq!(cache.info().unwrap().used, 1);
        // Dropped without submitting.
    }
    assert_eq!(cache.info().unwrap().used, 0);
    // The stream works again.
    let buf = ctx.create_buffer(16).unwrap();
    let mut rec = stream.begin().unwrap();
    rec.fill(&buf, 0, 16, 0x3f80_0000).unwrap();
    rec.submit().unwrap();
    stream.wait(Duration::from_secs(60)).unwrap();
    assert_eq!(buf.download_vec::<f32>(0, 4).unwrap(), vec![1.0; 4]);
}

#[test]
fn shift_rotates_keys() {
    let ctx = context();
    let d = 8;
    let mut cache = ctx.create_cache(&CacheDesc::new(1, 1, 1, d as u32, 32)).unwrap();
    let n = 5;
    let positions: Vec<i32> = (0..n as i32).collect();
    let raw = values(11, n * d);
    let mut k = raw.clone();
    for t in 0..n {
        rope(&mut k[t * d..(t + 1) * d], t as i32);
    }
    let v = values(12, n * d);
    let cells = cache
        .store(
            &Batch::for_seq(0, &positions),
            Layers::One(0),
            &TensorRef::host_f32(&k),
            &TensorRef::host_f32(&v),
        )
        .unwrap();
    let delta = 3;
    cache.seq_add(0, 0, -1, delta).unwrap();
    assert_eq!(cache.info().unwrap().pending_shifts, n as u32);
    cache.apply_shifts().unwrap();
    assert_eq!(cache.seq_pos_max(0).unwrap(), Some(n as i32 - 1 + delta));
    let mut kr = vec![0f32; n * d];
    cache.read(0, &cells, Some(&mut kr), None).unwrap();
    let mut expect = raw.clone();
    for t in 0..n {
        rope(&mut expect[t * d..(t + 1) * d], t as i32 + delta);
    }
    close(&kr, &expect, 5e-3);

    // Context shift: keep 1, discard 2 of the 5 positions.
    let n_past = cache.context_shift(0, 1, 2).unwrap();
    // Positions 3..=7 after the shift: nothing below n_keep + n_discard = 3 is
    // dropped, and 3..=7 move left by 2.
    assert_eq!(n_past, 6);
    assert_eq!(cache.seq_pos_min(0).unwrap(), Some(1));
}

#[test]
fn static_window_and_transfer() {
    let ctx = context();
    let d = 8u32;
    let mut desc = CacheDesc::new(1, 1, 1, d, 0);
    desc.layout = Layout::Static;
    desc.static_layout = Some(StaticLayoutDesc::new(5));
    let mut stat = ctx.create_cache(&desc).unwrap();
    let positions = [0, 1, 2];
    let k = values(21, 3 * d as usize);
    let v = values(22, 3 * d as usize);
    stat.store(
        &Batch::for_seq(0, &positions),
        Layers::One(0),
        &TensorRef::host_f32(&k),
        &TensorRef::host_f32(&v),
    )
    .unwrap();
    {
        let w = stat.static_window(0, 0, 0, KvArray::K).unwrap();
        assert_eq!(w.rows, 4);
        assert_eq!(w.n_valid, 3);
        assert_eq!((w.pos_first, w.pos_last), (0, 2));
        assert_eq!(w.element_type, Some(ElementType::F16));
        let mut rows = vec![0u16; (w.bytes / 2) as usize];
        w.buffer.download(w.offset, &mut rows).unwrap();
        assert_eq!(rows.len(), 4 * d as usize);
    }
    let mut mask = [0f32; 5];
    stat.static_mask(0, &mut mask).unwrap();
    assert_eq!(mask[0], f32::NEG_INFINITY);
    assert_eq!(&mask[1..], &[0.0; 4]);
    // A graph of 2 new rows: its past is the window's last 3 rows (all
    // valid), then its own tokens, causal.
    let mut graph = [1f32; 10];
    let mut two = kvrt::GraphMask::new(2);
    two.masked_value = Some(-65535.0);
    stat.static_graph_mask(0, &two, &mut graph).unwrap();
    let m = -65535.0;
    assert_eq!(graph, [0.0, 0.0, 0.0, 0.0, m, 0.0, 0.0, 0.0, 0.0, 0.0]);
    let mut graph16 = [7u16; 10];
    stat.static_graph_mask_u16(0, 2, &mut graph16).unwrap();
    assert_eq!(
        graph16,
        [65535, 65535, 65535, 65535, 0, 65535, 65535, 65535, 65535, 65535]
    );
    stat.static_graph_mask_f16(0, &kvrt::GraphMask::default(), &mut graph16[..5])
        .unwrap();
    assert_eq!(&graph16[..5], &[0xFC00, 0, 0, 0, 0]);
    assert!(matches!(
        stat.static_graph_mask(0, &two, &mut graph[..9]),
        Err(kvrt::Error::InvalidArgument(_))
    ));
    assert_eq!(stat.static_stats(None).unwrap().rows_appended, 3);
    // Room for 2 rows after the window (R = 2: 8 rows for a window of 4):
    // the 3 valid rows slide to the region's start; a token a graph wrote
    // there is then placed with no copy.
    stat.static_make_room(0, 2).unwrap();
    assert_eq!(stat.static_stats(Some(0)).unwrap().slides, 1);
    stat.place(&Batch::for_seq(0, &[3])).unwrap();
    let w = stat.static_window(0, 0, 0, KvArray::K).unwrap();
    assert_eq!((w.n_valid, w.pos_last), (4, 3));
    assert_eq!(stat.static_stats(Some(0)).unwrap().slides, 1);
    assert!(matches!(
        stat.static_make_room(0, 5),
        Err(kvrt::Error::InvalidArgument(_))
    ));
    stat.seq_rm(0, 3, -1).unwrap(); // back to the 3 stored tokens
    assert!(matches!(
        stat.seq_add(0, 0, -1, 1),
        Err(kvrt::Error::Unsupported(_))
    ));

    // Static to cells, bit for bit.
    let mut cells = ctx.create_cache(&CacheDesc::new(1, 1, 1, d, 16)).unwrap();
    assert_eq!(stat.seq_transfer(0, &mut cells, 2).unwrap(), 3);
    assert_eq!(cells.seq_pos_max(2).unwrap(), Some(2));
    assert_eq!(cells.seq_transfer_within(2, 3).unwrap(), 3);

    // A rejected draft token: the newest row leaves the window.
    stat.seq_rm(0, 2, -1).unwrap();
    let w = stat.static_window(0, 0, 0, KvArray::K).unwrap();
    assert_eq!((w.n_valid, w.pos_first, w.pos_last), (2, 0, 1));
}

#[test]
fn smart_mask_ring() {
    let ctx = context();
    let d = 8u32;
    let mut desc = CacheDesc::new(1, 1, 1, d, 0);
    desc.layout = Layout::Static;
    desc.static_layout = Some(StaticLayoutDesc::smart_mask(5));
    let mut ring = ctx.create_cache(&desc).unwrap();
    let store = |ring: &mut kvrt::Cache, positions: &[i32]| {
        let n = positions.len() * d as usize;
        ring.store(
            &Batch::for_seq(0, positions),
            Layers::One(0),
            &TensorRef::host_f32(&values(31, n)),
            &TensorRef::host_f32(&values(32, n)),
        )
        .unwrap();
    };
    store(&mut ring, &[0, 1, 2]);
    let offset = ring.static_window(0, 0, 0, KvArray::K).unwrap().offset;
    // Right-padded while it fills: rows 0..2 valid, then a graph's 2 inputs, causal.
    let mut mask = [7u16; 12];
    ring.static_graph_mask_u16(0, 2, &mut mask).unwrap();
    assert_eq!(
        mask,
        [65535, 65535, 65535, 0, 65535, 0, 65535, 65535, 65535, 0, 65535, 65535]
    );
    // Three more wrap the ring: the window stays, the oldest row goes.
    store(&mut ring, &[3, 4, 5]);
    let w = ring.static_window(0, 0, 0, KvArray::K).unwrap();
    assert_eq!(w.offset, offset);
    assert_eq!((w.n_valid, w.pos_first, w.pos_last), (4, 2, 5));
    let mut decode = [1f32; 5];
    ring.static_mask(0, &mut decode).unwrap();
    assert_eq!(decode, [0.0; 5]);
    assert!(matches!(
        ring.static_make_room(0, 1),
        Err(kvrt::Error::InvalidArgument(_))
    ));
    // Any reserve but 0 or 1 is refused.
    let mut bad = desc.clone();
    let mut layout = StaticLayoutDesc::smart_mask(5);
    layout.reserve = 2.0;
    bad.static_layout = Some(layout);
    assert!(matches!(
        ctx.create_cache(&bad),
        Err(kvrt::Error::InvalidArgument(_))
    ));
}

#[cfg(unix)]
#[test]
fn exported_window_memory() {
    use std::os::fd::AsRawFd;
    let ctx = context();
    let d = 8u32;
    let mut desc = CacheDesc::new(1, 1, 1, d, 0);
    desc.layout = Layout::Static;
    desc.static_layout = Some(StaticLayoutDesc::smart_mask(5));
    desc.exportable = true;
    let ring = ctx.create_cache(&desc).unwrap();
    let w = ring.static_window(0, 0, 0, KvArray::V).unwrap();
    let e = w
        .buffer
        .export_memory(w.offset, kvrt::MemoryHandleType::OpaqueFd)
        .unwrap();
    assert!(e.fd.as_raw_fd() >= 0);
    assert!(e.contiguous_bytes >= w.bytes);
    assert!(e.offset + w.bytes <= e.memory_size);
    // Not exportable: refused.
    let plain = ctx.create_buffer(64).unwrap();
    assert!(matches!(
        plain.export_memory(0, kvrt::MemoryHandleType::OpaqueFd),
        Err(kvrt::Error::Unsupported(_))
    ));
    let buf = ctx.create_exportable_buffer(64).unwrap();
    let e = buf.export_memory(16, kvrt::MemoryHandleType::OpaqueFd).unwrap();
    assert_eq!((e.offset, e.contiguous_bytes), (16, 48));
}

#[test]
fn raw_read_and_write_back() {
    let ctx = context();
    let mut desc = CacheDesc::new(1, 1, 1, 32, 8);
    desc.type_k = ElementType::Q8_0;
    desc.type_v = ElementType::Q8_0;
    let mut cache = ctx.create_cache(&desc).unwrap();
    let k = values(31, 2 * 32);
    let cells = cache
        .store(
            &Batch::for_seq(0, &[0, 1]),
            Layers::One(0),
            &TensorRef::host_f32(&k),
            &TensorRef::host_f32(&k),
        )
        .unwrap();
    let info = cache.info().unwrap();
    assert_eq!(info.k_row_bytes, 34);
    let mut raw = vec![0u8; 2 * 34];
    cache.read_raw(0, KvArray::K, &cells, &mut raw).unwrap();
    let placed = cache.place(&Batch::for_seq(1, &[0, 1])).unwrap();
    let kq = TensorRef::host(&raw, ElementType::Q8_0);
    cache.write(&placed, Layers::One(0), &kq, &kq).unwrap();
    let mut again = vec![0u8; 2 * 34];
    cache.read_raw(0, KvArray::K, &placed, &mut again).unwrap();
    assert_eq!(raw, again);
    cache.seq_rm(0, -1, -1).unwrap();
    assert!(cache.compact(0.0, 0).unwrap() <= 2);
}

#[test]
fn memory_update_read() {
    use kvrt::experimental::{MemoryBatch, MemoryDesc, MemoryInit};
    let ctx = context();
    let mut desc = MemoryDesc::default();
    desc.n_layers = 1;
    desc.n_heads = 1;
    desc.n_slots = 4;
    desc.key_dim = 8;
    desc.keys = MemoryInit::Seed(7);
    assert!(desc.estimate().unwrap().device_bytes > 0);
    let mut mem = ctx.create_memory(&desc).unwrap();
    let wq = values(41, 8);
    let wv = values(42, 8);
    let mut out = vec![0f32; 8];
    let mut b = MemoryBatch::new(1, Layers::One(0));
    b.wq = Some(TensorRef::host_f32(&wq));
    b.wv = Some(TensorRef::host_f32(&wv));
    b.q = Some(TensorRef::host_f32(&wq));
    b.out = Some(OutputRef::host_f32(&mut out));
    mem.update_read(&mut b).unwrap();
    assert!(out.iter().any(|&x| x != 0.0));
    assert_eq!(mem.state(0, 0).unwrap().len(), 4 * 8);
    mem.seq_rm(0).unwrap();
    assert!(mem.state(0, 0).unwrap().iter().all(|&x| x == 0.0));
}

#[test]
fn objects_move_between_threads() {
    let ctx = context();
    let cache = ctx.create_cache(&CacheDesc::new(1, 1, 1, 8, 8)).unwrap();
    let buf = std::sync::Arc::new(ctx.create_buffer(64).unwrap());
    let b2 = buf.clone();
    let c2 = ctx.clone();
    let t = std::thread::spawn(move || {
        let mut cache = cache;
        cache.clear().unwrap();
        b2.upload(0, &[1u32; 4]).unwrap();
        c2.stats().unwrap().device_bytes
    });
    let mut back = [0u32; 4];
    let bytes = t.join().unwrap();
    buf.download(0, &mut back).unwrap();
    assert_eq!(back, [1; 4]);
    assert!(bytes > 0);
}

#[test]
fn devices_and_pipeline_cache() {
    let devices = kvrt::enumerate_devices().unwrap();
    assert!(!devices.is_empty());
    let ctx = context();
    let info = ctx.device_info().unwrap();
    assert!(!info.name.is_empty());
    let tuning = ctx.tuning().unwrap();
    assert!(tuning.starts_with(&format!("device {}\n", info.name)), "{tuning}");
    assert!(tuning.contains("\nattention.kernel "), "{tuning}");
    let data = ctx.pipeline_cache().unwrap();
    let again = kvrt::Context::builder().pipeline_cache(data).build().unwrap();
    assert_eq!(again.device_info().unwrap().name, info.name);
    assert!(kvrt::version_string().starts_with("0."));
}

#[test]
fn log_callback_receives_and_survives_panics() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    let ctx = kvrt::Context::builder()
        .log_callback(kvrt::LogLevel::Debug, move |_, _| {
            s.fetch_add(1, Ordering::SeqCst);
            panic!("a panic in the log callback must not cross into C");
        })
        .build()
        .unwrap();
    let _ = ctx.create_buffer(16).unwrap();
    drop(ctx);
    assert!(seen.load(Ordering::SeqCst) > 0);
}

// The shuffle kernels forced (lavapipe has subgroup shuffles): the same
// attention as the reference; asking for both variants is refused.
#[test]
fn shuffle_kernels_forced() {
    let both = kvrt::Context::builder()
        .shuffle_kernels(true)
        .portable_kernels(true)
        .build();
    assert!(matches!(both, Err(kvrt::Error::InvalidArgument(_))), "{both:?}");
    let ctx = match kvrt::Context::builder()
        .validation(true)
        .shuffle_kernels(true)
        .build()
    {
        Ok(ctx) => ctx,
        // A device without subgroup shuffles says so; nothing else is accepted.
        Err(kvrt::Error::Unsupported(_)) if std::env::var_os("KVRT_KERNELS").is_none() => return,
        Err(e) => panic!("{e}"),
    };
    attention_matches_reference(&ctx);
}

// The shared-memory tiled attention kernel forced for every call: the same
// attention as the reference; asking for it with another variant is refused.
#[test]
fn tiled_kernels_forced() {
    let both = kvrt::Context::builder()
        .tiled_kernels(true)
        .portable_kernels(true)
        .build();
    assert!(matches!(both, Err(kvrt::Error::InvalidArgument(_))), "{both:?}");
    let ctx = kvrt::Context::builder()
        .validation(true)
        .tiled_kernels(true)
        .build()
        .unwrap();
    attention_matches_reference(&ctx);
}

// Five stored tokens and one query, against the f64 reference.
fn attention_matches_reference(ctx: &kvrt::Context) {
    let mut cache = ctx
        .create_cache(&CacheDesc::new(1, H as u32, KV as u32, D as u32, 32))
        .unwrap();
    let n = 5;
    let positions: Vec<i32> = (0..n as i32).collect();
    let (k, v) = (values(7, n * KV * D), values(8, n * KV * D));
    cache
        .store(
            &Batch::for_seq(0, &positions),
            Layers::One(0),
            &TensorRef::host_f32(&k),
            &TensorRef::host_f32(&v),
        )
        .unwrap();
    let q = values(9, H * D);
    let mut out = vec![0f32; H * D];
    let last = [n as i32 - 1];
    cache
        .attention(
            0,
            &Batch::for_seq(0, &last),
            &TensorRef::host_f32(&q),
            &mut OutputRef::host_f32(&mut out),
            &AttentionParams::default(),
        )
        .unwrap();
    let (kr, vr): (Vec<f32>, Vec<f32>) = (
        k.iter().map(|&x| f16_round(x)).collect(),
        v.iter().map(|&x| f16_round(x)).collect(),
    );
    close(&out, &reference(&q, &kr, &vr, H, KV, D), 2e-3);
    assert_eq!(ctx.stats().unwrap().validation_errors, 0);
}

#[test]
fn tree_attention_sees_ancestors_and_accept_keeps_a_branch() {
    let ctx = context();
    let mut cache = ctx
        .create_cache(&CacheDesc::new(1, H as u32, KV as u32, D as u32, 64))
        .unwrap();
    let row = KV * D;
    // A prompt of 3 tokens, then a tree: two candidates for position 3
    // (tokens 0 and 1) and a child of the second at 4 (token 2).
    let prompt_pos = [0, 1, 2];
    let pk = values(40, 3 * row);
    let pv = values(41, 3 * row);
    let prompt_cells = cache
        .store(
            &Batch::for_seq(0, &prompt_pos),
            Layers::All,
            &TensorRef::host_f32(&pk),
            &TensorRef::host_f32(&pv),
        )
        .unwrap();
    let tree_pos = [3, 3, 4];
    let parents = [-1, -1, 1];
    let tk = values(42, 3 * row);
    let tv = values(43, 3 * row);
    let tree = Batch::for_seq(0, &tree_pos).with_parents(&parents).unwrap();
    let cells = cache
        .store(
            &tree,
            Layers::All,
            &TensorRef::host_f32(&tk),
            &TensorRef::host_f32(&tv),
        )
        .unwrap();
    assert_eq!(cache.info().unwrap().used, 6);

    // Each query sees the prompt and, of the tree, its ancestors and itself.
    let queries = tree.clone().with_cells(&cells).unwrap();
    let q = values(44, 3 * H * D);
    let mut out = vec![0f32; 3 * H * D];
    cache
        .attention(
            0,
            &queries,
            &TensorRef::host_f32(&q),
            &mut OutputRef::host_f32(&mut out),
            &AttentionParams::default(),
        )
        .unwrap();
    let rows = |seen: &[usize], src: &[f32]| -> Vec<f32> {
        seen.iter()
            .flat_map(|&t| src[t * row..(t + 1) * row].iter().map(|&x| f16_round(x)))
            .collect()
    };
    for (i, seen) in [vec![0usize], vec![1], vec![1, 2]].iter().enumerate() {
        let mut k = rows(&[0, 1, 2], &pk);
        k.extend(rows(seen, &tk));
        let mut v = rows(&[0, 1, 2], &pv);
        v.extend(rows(seen, &tv));
        let want = reference(&q[i * H * D..(i + 1) * H * D], &k, &v, H, KV, D);
        close(&out[i * H * D..(i + 1) * H * D], &want, 2e-3);
    }

    // A stale tree is refused and changes nothing; the right one keeps the
    // branch of token 2 and drops token 0.
    let wrong_cells = [cells[2], cells[1], cells[0]]; // positions 3 and 4 swapped
    let wrong = tree.clone().with_cells(&wrong_cells).unwrap();
    assert!(cache.tree_accept(&wrong, &[2]).is_err());
    assert_eq!(cache.info().unwrap().used, 6);
    assert!(tree.clone().with_cells(&cells[..2]).is_err());
    cache.tree_accept(&queries, &[2]).unwrap();
    assert_eq!(cache.info().unwrap().used, 5);
    assert_eq!(cache.seq_pos_max(0).unwrap(), Some(4));
    let mut kr = vec![0f32; 3 * row];
    cache.read(0, &prompt_cells, Some(&mut kr), None).unwrap();
    close(&kr, &rows(&[0, 1, 2], &pk), 1e-6);
    assert_eq!(ctx.stats().unwrap().validation_errors, 0);
}

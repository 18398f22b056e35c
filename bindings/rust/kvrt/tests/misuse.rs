//! Misuse returns errors: wrong lengths are caught before the library is
//! called (it could not check host memory), the rest by the library.

mod common;

use common::context;
use kvrt::{AttentionParams, Batch, CacheDesc, Error, Layers, OutputRef, StreamDesc, TensorRef};

#[test]
fn short_host_data_is_refused() {
    let ctx = context();
    let mut cache = ctx.create_cache(&CacheDesc::new(2, 2, 1, 8, 16)).unwrap();
    let p = [0, 1];
    let batch = Batch::for_seq(0, &p);
    let short = vec![0f32; 15]; // 2 tokens × 1 head × 8 needs 16
    let ok = vec![0f32; 16];
    let err = cache
        .store(
            &batch,
            Layers::One(0),
            &TensorRef::host_f32(&short),
            &TensorRef::host_f32(&ok),
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // All layers need two blocks.
    let err = cache
        .store(
            &batch,
            Layers::All,
            &TensorRef::host_f32(&ok),
            &TensorRef::host_f32(&ok),
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    // A stride that reaches past the end.
    let err = cache
        .store(
            &batch,
            Layers::One(0),
            &TensorRef::host_f32(&ok).with_row_stride(64),
            &TensorRef::host_f32(&ok),
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    assert_eq!(cache.info().unwrap().used, 0);

    // Attention: q needs 2 heads × 8, out the same.
    let q = vec![0f32; 8];
    let mut out = vec![0f32; 16];
    let err = cache
        .attention(
            0,
            &Batch::for_seq(0, &p[..1]),
            &TensorRef::host_f32(&q),
            &mut OutputRef::host_f32(&mut out),
            &AttentionParams::default(),
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    let q = vec![0f32; 16];
    let mut short_out = vec![0f32; 15];
    assert!(cache
        .attention(
            0,
            &Batch::for_seq(0, &p[..1]),
            &TensorRef::host_f32(&q),
            &mut OutputRef::host_f32(&mut short_out),
            &AttentionParams::default(),
        )
        .is_err());
    let mut params = AttentionParams::default();
    params.sinks = Some(vec![0.0; 3]);
    assert!(cache
        .attention(
            0,
            &Batch::for_seq(0, &p[..1]),
            &TensorRef::host_f32(&q),
            &mut OutputRef::host_f32(&mut out),
            &params,
        )
        .is_err());
}

#[test]
fn short_read_outputs_are_refused() {
    let ctx = context();
    let cache = ctx.create_cache(&CacheDesc::new(1, 1, 1, 8, 16)).unwrap();
    // The library checks each slice's size in bytes against what it writes,
    // and writes nothing when one is short.
    let mut k = vec![7f32; 7];
    assert!(matches!(
        cache.read(0, &[0], Some(&mut k), None),
        Err(Error::InvalidArgument(_))
    ));
    let mut k = vec![7f32; 8];
    let mut v = vec![7f32; 7];
    assert!(matches!(
        cache.read(0, &[0], Some(&mut k), Some(&mut v)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(k.iter().chain(&v).all(|&x| x == 7.0));
    let mut raw = vec![0u8; 3];
    assert!(matches!(
        cache.read_raw(0, kvrt::KvArray::K, &[0], &mut raw),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn library_errors_carry_messages() {
    let ctx = context();
    let mut cache = ctx.create_cache(&CacheDesc::new(1, 1, 1, 8, 2)).unwrap();
    let data = vec![0f32; 3 * 8];
    let p = [0, 1, 2];
    let err = cache
        .store(
            &Batch::for_seq(0, &p),
            Layers::One(0),
            &TensorRef::host_f32(&data),
            &TensorRef::host_f32(&data),
        )
        .unwrap_err();
    assert!(matches!(err, Error::CacheFull(_)), "{err}");
    assert_eq!(err.code(), kvrt::sys::KVRT_ERROR_CACHE_FULL);
    assert!(err.to_string().starts_with("KVRT_ERROR_CACHE_FULL"));
    let err = cache.seq_rm(9999, 0, -1).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    assert!(!err.message().is_empty());
    assert!(cache.seq_rm(0, 5, 2).is_err()); // reversed range
    assert!(matches!(
        ctx.create_cache(&CacheDesc::new(0, 1, 1, 8, 2)),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn descriptor_and_batch_lengths() {
    let mut desc = CacheDesc::new(2, 1, 1, 8, 4);
    desc.layer_windows = Some(vec![0]);
    assert!(matches!(desc.estimate(), Err(Error::InvalidArgument(_))));
    assert!(Batch::new(&[0, 1], &[0]).is_err());
    assert!(Batch::with_seq_id_counts(&[0, 1], &[1, 1], &[0]).is_err());
    desc.label = Some("a\0b".into());
    desc.layer_windows = None;
    assert!(desc.estimate().is_err());
}

#[test]
fn buffer_ranges_and_streams() {
    let ctx = context();
    let buf = ctx.create_buffer(16).unwrap();
    assert!(matches!(
        buf.upload(8, &[0u32; 4]),
        Err(Error::InvalidArgument(_))
    ));
    let mut out = [0u8; 17];
    assert!(buf.download(0, &mut out).is_err());
    assert!(matches!(ctx.create_buffer(0), Err(Error::InvalidArgument(_))));
    let mut stream = ctx.create_stream(&StreamDesc::default()).unwrap();
    // Timings of a stream without timestamps.
    assert!(matches!(stream.timings(), Err(Error::InvalidState(_))));
    let mut rec = stream.begin().unwrap();
    assert!(rec.fill(&buf, 2, 4, 0).is_err()); // not a multiple of 4
    assert!(rec.copy(&buf, 0, &buf, 4, 8).is_err()); // overlapping
    rec.submit().unwrap();
    stream.wait(std::time::Duration::from_secs(60)).unwrap();

    // Host outputs are refused in a recording.
    let cache = ctx.create_cache(&CacheDesc::new(1, 1, 1, 8, 4)).unwrap();
    let q = vec![0f32; 8];
    let mut o = vec![0f32; 8];
    let mut rec = stream.begin().unwrap();
    assert!(rec
        .attention(
            &cache,
            0,
            &Batch::for_seq(0, &[0]),
            &TensorRef::host_f32(&q),
            &mut OutputRef::host_f32(&mut o),
            &AttentionParams::default()
        )
        .is_err());
}

#[test]
fn element_types() {
    use kvrt::ElementType as T;
    for t in [T::F32, T::F16, T::Q8_0, T::Q4_0, T::U8Static, T::U16Static] {
        assert_eq!(T::from_name(t.name()).unwrap(), t);
        assert_eq!(T::from_raw(t.raw()), Some(t));
    }
    assert_eq!(T::Q4_0.row_bytes(64), Some(36));
    assert_eq!(T::Q4_0.row_bytes(48), None);
    assert!(T::from_name("nope").is_err());
    assert_eq!(T::from_raw(0), None);
}

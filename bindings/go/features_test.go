package kvrt_test

import (
	"errors"
	"math"
	"testing"
	"time"

	kvrt "github.com/kvrt/kvrt/bindings/go"
)

// refOpts are the attention options refAttentionOpts applies.
type refOpts struct {
	scale   float64   // 0 = 1/sqrt(dim)
	softcap float64   // 0 = off
	sinks   []float32 // per query head; nil = none
}

// refAttentionOpts is refAttention with a logit scale, soft-capping
// (cap * tanh(s / cap) of the scaled logit) and sink logits added to the
// softmax denominator only.
func refAttentionOpts(q []float32, keys, values [][]float64, heads, kvHeads, dim int, o refOpts) []float64 {
	out := make([]float64, heads*dim)
	group := heads / kvHeads
	scale := o.scale
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(dim))
	}
	for h := 0; h < heads; h++ {
		kv := h / group
		scores := make([]float64, len(keys))
		top := math.Inf(-1)
		for t := range keys {
			s := 0.0
			for d := 0; d < dim; d++ {
				s += float64(q[h*dim+d]) * keys[t][kv*dim+d]
			}
			s *= scale
			if o.softcap != 0 {
				s = o.softcap * math.Tanh(s/o.softcap)
			}
			scores[t] = s
			top = math.Max(top, s)
		}
		if o.sinks != nil {
			top = math.Max(top, float64(o.sinks[h]))
		}
		sum := 0.0
		for t := range scores {
			scores[t] = math.Exp(scores[t] - top)
			sum += scores[t]
		}
		if o.sinks != nil {
			sum += math.Exp(float64(o.sinks[h]) - top)
		}
		for d := 0; d < dim; d++ {
			for t := range keys {
				out[h*dim+d] += scores[t] / sum * values[t][kv*dim+d]
			}
		}
	}
	return out
}

// rotateKeys rotates every KV head row of each token's K by delta(token).
func rotateKeys(keys [][]float64, dim int, delta func(tok int) int) {
	for tok, row := range keys {
		for h := 0; h < len(row)/dim; h++ {
			ropeShift(row[h*dim:(h+1)*dim], delta(tok))
		}
	}
}

func attend(t *testing.T, c *kvrt.Cache, layer int32, seq, pos int32, q []float32, params *kvrt.AttentionParams) []float32 {
	t.Helper()
	out := make([]float32, int(c.Heads())*int(c.HeadDimV()))
	must(t, c.Attention(nil, layer, kvrt.SeqBatch(seq, pos, 1), kvrt.HostF32(q), kvrt.Output{F32: out}, params))
	return out
}

func TestEstimateMemory(t *testing.T) {
	opts := kvrt.MemoryOptions{Layers: 2, Heads: 2, Slots: 8, KeyDim: 16, MaxSeqs: 3}
	free, err := kvrt.EstimateMemory(opts)
	must(t, err)
	if free.DeviceBytes == 0 || free.StateBytesPerSeq < 2*2*8*16*4 || free.MaxBindingBytes != 128<<20 {
		t.Fatalf("estimate without a context %+v", free)
	}
	ctx := newContext(t)
	e, err := ctx.EstimateMemory(opts)
	must(t, err)
	if e.DeviceBytes == 0 || e.StateBytesPerSeq != free.StateBytesPerSeq || e.MaxBindingBytes > 128<<20 {
		t.Fatalf("estimate %+v (without a context %+v)", e, free)
	}
	// More sequences need more state.
	more := opts
	more.MaxSeqs = 6
	e2, err := ctx.EstimateMemory(more)
	must(t, err)
	if e2.DeviceBytes <= e.DeviceBytes {
		t.Fatalf("6 sequences: %d bytes, 3: %d", e2.DeviceBytes, e.DeviceBytes)
	}
	if _, err := ctx.EstimateMemory(kvrt.MemoryOptions{}); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("zero sizes: %v", err)
	}
	short := opts
	short.Keys = &kvrt.MemoryInit{F32: make([]float32, 3)}
	if _, err := kvrt.EstimateMemory(short); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("short initial keys: %v", err)
	}
	m, err := ctx.NewMemory(opts)
	must(t, err)
	must(t, m.Close())
	must(t, ctx.Close())
	if _, err := ctx.EstimateMemory(opts); !errors.Is(err, kvrt.ErrInvalidHandle) {
		t.Fatalf("closed context: %v", err)
	}
}

// Place then Write layer by layer, each layer with its own data.
func TestPlaceWrite(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, smallCache())
	const n = 5
	cells, err := c.Place(kvrt.SeqBatch(0, 0, n))
	must(t, err)
	if len(cells) != n {
		t.Fatalf("%d cells", len(cells))
	}
	if info, _ := c.Info(); info.Used != n {
		t.Fatalf("used %d after Place", info.Used)
	}
	layerKey := func(l int) func(tok, h, d int) float32 {
		return func(tok, h, d int) float32 { return keyOf(tok+3*l, h, d) }
	}
	layerValue := func(l int) func(tok, h, d int) float32 {
		return func(tok, h, d int) float32 { return valueOf(tok, h, d) - float32(4*l) }
	}
	for l := 0; l < 2; l++ {
		must(t, c.Write(nil, cells, int32(l), kvrt.HostF32(rows(0, n, nKVHeads, headDim, layerKey(l))),
			kvrt.HostF32(rows(0, n, nKVHeads, headDim, layerValue(l)))))
	}
	q := rows(1, 1, nHeads, headDim, queryOf)
	for l := 0; l < 2; l++ {
		k := make([]float32, n*nKVHeads*headDim)
		v := make([]float32, n*nKVHeads*headDim)
		must(t, c.Read(int32(l), cells, k, v))
		wk, wv := rows(0, n, nKVHeads, headDim, layerKey(l)), rows(0, n, nKVHeads, headDim, layerValue(l))
		for i := range k {
			if k[i] != wk[i] || v[i] != wv[i] {
				t.Fatalf("layer %d value %d: %v %v, want %v %v", l, i, k[i], v[i], wk[i], wv[i])
			}
		}
		out := attend(t, c, int32(l), 0, n-1, q, nil)
		want := refAttention(q, tokenRows(0, n, nKVHeads, headDim, layerKey(l)),
			tokenRows(0, n, nKVHeads, headDim, layerValue(l)), nHeads, nKVHeads, headDim)
		if d := maxDiff(out, want); d > 2e-3 {
			t.Errorf("layer %d: max diff %g", l, d)
		}
	}
	if err := c.Write(nil, cells, 2, kvrt.HostF32(make([]float32, n*nKVHeads*headDim)),
		kvrt.HostF32(make([]float32, n*nKVHeads*headDim))); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("layer out of range: %v", err)
	}
}

// SeqDiv divides positions (SelfExtend) and rotates K by the change.
func TestSeqDiv(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, smallCache())
	const n = 8
	storeTokens(t, c, nil, 0, 0, n)
	must(t, c.SeqDiv(0, 0, -1, 2))
	if p, err := c.SeqPosMax(0); err != nil || p != (n-1)/2 {
		t.Fatalf("SeqPosMax after SeqDiv = %d, %v", p, err)
	}
	if p, err := c.SeqPosMin(0); err != nil || p != 0 {
		t.Fatalf("SeqPosMin after SeqDiv = %d, %v", p, err)
	}
	if info, _ := c.Info(); info.PendingShifts == 0 {
		t.Fatal("no pending shift after SeqDiv")
	}
	keys := tokenRows(0, n, nKVHeads, headDim, keyOf)
	rotateKeys(keys, headDim, func(tok int) int { return tok/2 - tok })
	q := rows(2, 1, nHeads, headDim, queryOf)
	out := attend(t, c, 0, 0, (n-1)/2, q, nil)
	if d := maxDiff(out, refAttention(q, keys, tokenRows(0, n, nKVHeads, headDim, valueOf),
		nHeads, nKVHeads, headDim)); d > 1e-2 {
		t.Fatalf("after SeqDiv: max diff %g", d)
	}
	if err := c.SeqDiv(0, 0, -1, 0); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("SeqDiv by 0: %v", err)
	}
}

func TestStreamTimings(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, smallCache())
	s, err := ctx.NewStream(kvrt.StreamOptions{Timestamps: true, Label: "timed"})
	if errors.Is(err, kvrt.ErrUnsupported) {
		t.Skip("no timestamps on this device")
	}
	must(t, err)
	defer s.Close()
	buf, err := ctx.NewBuffer(kvrt.BufferOptions{Size: 4 * nHeads * headDim})
	must(t, err)
	defer buf.Close()
	must(t, s.Begin())
	must(t, s.Fill(buf, 0, buf.Size(), 0))
	storeTokens(t, c, s, 0, 0, 4)
	must(t, c.Attention(s, 1, kvrt.SeqBatch(0, 3, 1), kvrt.HostF32(rows(0, 1, nHeads, headDim, queryOf)),
		kvrt.Output{Buffer: buf}, nil))
	must(t, s.Submit())
	must(t, s.Wait(time.Minute))
	ts, err := s.Timings()
	must(t, err)
	if len(ts) < 3 {
		t.Fatalf("%d timings: %+v", len(ts), ts)
	}
	for _, tm := range ts {
		if tm.Label == "" || tm.Time < 0 {
			t.Fatalf("timing %+v", tm)
		}
	}
	// A stream without timestamps has none to give.
	plain, err := ctx.NewStream(kvrt.StreamOptions{})
	must(t, err)
	defer plain.Close()
	if _, err := plain.Timings(); !errors.Is(err, kvrt.ErrInvalidState) {
		t.Fatalf("Timings without timestamps: %v", err)
	}
}

// Compact and the memory calls, recorded into a stream.
func TestCompactAndMemoryInStream(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, smallCache())
	s, err := ctx.NewStream(kvrt.StreamOptions{})
	must(t, err)
	defer s.Close()
	const n = 8
	cells := storeTokens(t, c, nil, 0, 0, n)
	must(t, c.SeqRm(0, 0, 4)) // holes below the last four tokens
	must(t, s.Begin())
	moved, err := c.Compact(s, 0, 0)
	must(t, err)
	must(t, s.Submit())
	must(t, s.Wait(time.Minute))
	info, err := c.Info()
	must(t, err)
	if moved == 0 || info.Used != n-4 || info.Fragmentation != 0 {
		t.Fatalf("moved %d, info %+v (cells were %v)", moved, info, cells)
	}
	q := rows(0, 1, nHeads, headDim, queryOf)
	out := attend(t, c, 0, 0, n-1, q, nil)
	if d := maxDiff(out, refAttention(q, tokenRows(4, n-4, nKVHeads, headDim, keyOf),
		tokenRows(4, n-4, nKVHeads, headDim, valueOf), nHeads, nKVHeads, headDim)); d > 2e-3 {
		t.Fatalf("after Compact: max diff %g", d)
	}

	// The same memory updates, synchronous and recorded, give the same state.
	const heads, slots, dim, tokens = 2, 4, 8, 3
	opts := kvrt.MemoryOptions{Layers: 1, Heads: heads, Slots: slots, KeyDim: dim, MaxSeqs: 3,
		Keys: &kvrt.MemoryInit{Source: kvrt.SourceSeed, Seed: 7}}
	sync, err := ctx.NewMemory(opts)
	must(t, err)
	defer sync.Close()
	rec, err := ctx.NewMemory(opts)
	must(t, err)
	defer rec.Close()
	wq := rows(0, tokens, heads, dim, queryOf)
	wv := rows(0, tokens, heads, dim, valueOf)
	upd := kvrt.MemoryBatch{NTokens: tokens, WQ: &kvrt.Tensor{F32: wq}, WV: &kvrt.Tensor{F32: wv}}
	must(t, sync.Update(nil, upd))
	want := make([]float32, heads*dim)
	must(t, sync.Read(nil, kvrt.MemoryBatch{NTokens: 1, Q: &kvrt.Tensor{F32: wq[:heads*dim]},
		Out: &kvrt.Output{F32: want}}))

	out2, err := ctx.NewBuffer(kvrt.BufferOptions{Size: 4 * heads * dim})
	must(t, err)
	defer out2.Close()
	must(t, s.Begin())
	must(t, rec.Update(s, upd))
	must(t, rec.SeqCp(s, 0, 1))
	must(t, rec.SeqRm(s, 0))
	must(t, rec.Read(s, kvrt.MemoryBatch{NTokens: 1, SeqIDs: []int32{1}, Q: &kvrt.Tensor{F32: wq[:heads*dim]},
		Out: &kvrt.Output{Buffer: out2}}))
	must(t, s.Submit())
	must(t, s.Wait(time.Minute))
	got := make([]float32, heads*dim)
	must(t, out2.DownloadF32(0, got))
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-5 {
			t.Fatalf("recorded read %v, synchronous %v", got, want)
		}
	}
	st1, err := rec.State(1, 0)
	must(t, err)
	ref, err := sync.State(0, 0)
	must(t, err)
	for i := range ref {
		if math.Abs(float64(st1[i]-ref[i])) > 1e-5 {
			t.Fatalf("state of the copy differs at %d: %v vs %v", i, st1[i], ref[i])
		}
	}
	if st0, _ := rec.State(0, 0); st0[0] != 0 {
		t.Fatal("SeqRm in a stream kept the state")
	}
}

func TestQ8Cache(t *testing.T) {
	ctx := newContext(t)
	const dim, n = 32, 7
	c := newCache(t, ctx, kvrt.CacheOptions{Layers: 1, Heads: nHeads, KVHeads: nKVHeads, HeadDimK: dim,
		Capacity: 32, MaxSeqs: 1, TypeK: kvrt.TypeQ8_0, TypeV: kvrt.TypeQ8_0})
	if c.TypeK() != kvrt.TypeQ8_0 || c.TypeV() != kvrt.TypeQ8_0 {
		t.Fatalf("types %v %v", c.TypeK(), c.TypeV())
	}
	k, v := rows(0, n, nKVHeads, dim, keyOf), rows(0, n, nKVHeads, dim, valueOf)
	cells, err := c.Store(nil, kvrt.SeqBatch(0, 0, n), 0, kvrt.HostF32(k), kvrt.HostF32(v))
	must(t, err)
	// Dequantized values lie within half a step (max/127) of the originals.
	rk, rv := make([]float32, len(k)), make([]float32, len(v))
	must(t, c.Read(0, cells, rk, rv))
	for i := range k {
		if math.Abs(float64(rk[i]-k[i])) > 0.5/127*0.375+1e-3 || math.Abs(float64(rv[i]-v[i])) > 0.5/127*12+1e-2 {
			t.Fatalf("value %d: %v %v, want %v %v", i, rk[i], rv[i], k[i], v[i])
		}
	}
	q := rows(0, 1, nHeads, dim, queryOf)
	out := attend(t, c, 0, 0, n-1, q, nil)
	if d := maxDiff(out, refAttention(q, tokenRows(0, n, nKVHeads, dim, keyOf), tokenRows(0, n, nKVHeads, dim, valueOf),
		nHeads, nKVHeads, dim)); d > 0.05 {
		t.Fatalf("q8_0 attention: max diff %g", d)
	}
	info, err := c.Info()
	must(t, err)
	if info.KRowBytes != nKVHeads*kvrt.TypeQ8_0.RowBytes(dim) || info.VRowBytes != info.KRowBytes {
		t.Fatalf("row bytes %+v", info)
	}
	raw := make([]byte, uint64(n)*info.KRowBytes)
	must(t, c.ReadRaw(0, kvrt.ArrayK, cells, raw))
	if err := c.ReadRaw(0, kvrt.ArrayK, cells, raw[:len(raw)-1]); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("ReadRaw one byte short: %v", err)
	}
	// The raw blocks stored into a second cache read back the same.
	c2 := newCache(t, ctx, kvrt.CacheOptions{Layers: 1, Heads: nHeads, KVHeads: nKVHeads, HeadDimK: dim,
		Capacity: 32, MaxSeqs: 1, TypeK: kvrt.TypeQ8_0, TypeV: kvrt.TypeQ8_0})
	cells2, err := c2.Store(nil, kvrt.SeqBatch(0, 0, n), 0, kvrt.Tensor{Raw: raw, Type: kvrt.TypeQ8_0}, kvrt.HostF32(v))
	must(t, err)
	rk2 := make([]float32, len(k))
	must(t, c2.Read(0, cells2, rk2, nil))
	for i := range rk {
		if rk2[i] != rk[i] {
			t.Fatalf("raw round trip %d: %v vs %v", i, rk2[i], rk[i])
		}
	}
}

// A static-scale type: values that are multiples of the scale are exact.
func TestStaticScaleCache(t *testing.T) {
	ctx := newContext(t)
	const n = 6
	c := newCache(t, ctx, kvrt.CacheOptions{Layers: 1, Heads: nHeads, KVHeads: nKVHeads, HeadDimK: headDim,
		Capacity: 16, MaxSeqs: 1, TypeK: kvrt.TypeU8Static, TypeV: kvrt.TypeU16Static,
		Scales: &kvrt.StaticScales{KScales: []float32{1.0 / 8}, KZeroPoints: []int32{128},
			VScales: []float32{1.0 / 8}, VZeroPoints: []int32{1000}}})
	k, v := rows(0, n, nKVHeads, headDim, keyOf), rows(0, n, nKVHeads, headDim, valueOf)
	cells, err := c.Store(nil, kvrt.SeqBatch(0, 0, n), 0, kvrt.HostF32(k), kvrt.HostF32(v))
	must(t, err)
	rk, rv := make([]float32, len(k)), make([]float32, len(v))
	must(t, c.Read(0, cells, rk, rv))
	for i := range k {
		if rk[i] != k[i] || rv[i] != v[i] {
			t.Fatalf("value %d: %v %v, want %v %v", i, rk[i], rv[i], k[i], v[i])
		}
	}
	raw := make([]byte, n*nKVHeads*headDim)
	must(t, c.ReadRaw(0, kvrt.ArrayK, cells, raw))
	for i, x := range k {
		if want := byte(int(x*8) + 128); raw[i] != want {
			t.Fatalf("code %d: %d, want %d", i, raw[i], want)
		}
	}
	q := rows(0, 1, nHeads, headDim, queryOf)
	out := attend(t, c, 0, 0, n-1, q, nil)
	if d := maxDiff(out, refAttention(q, tokenRows(0, n, nKVHeads, headDim, keyOf),
		tokenRows(0, n, nKVHeads, headDim, valueOf), nHeads, nKVHeads, headDim)); d > 2e-3 {
		t.Fatalf("static-scale attention: max diff %g", d)
	}
	if _, err := ctx.NewCache(kvrt.CacheOptions{Layers: 1, Heads: 1, KVHeads: 1, HeadDimK: 8, Capacity: 4,
		TypeK: kvrt.TypeU8Static}); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("static-scale type without scales: %v", err)
	}
}

// Deferred RoPE: K is stored unrotated and rotated by its current position
// at attention; shifts change positions only.
func TestDeferredRoPE(t *testing.T) {
	ctx := newContext(t)
	opts := smallCache()
	opts.DeferredRoPE = true
	opts.RoPE = &kvrt.RoPE{Mode: kvrt.RoPENormal, FreqBase: 10000}
	c := newCache(t, ctx, opts)
	const n, delta = 6, 5
	storeTokens(t, c, nil, 0, 0, n)
	values := tokenRows(0, n, nKVHeads, headDim, valueOf)
	q := rows(1, 1, nHeads, headDim, queryOf)
	check := func(what string, shift int) {
		t.Helper()
		keys := tokenRows(0, n, nKVHeads, headDim, keyOf)
		rotateKeys(keys, headDim, func(tok int) int { return tok + shift })
		out := attend(t, c, 1, 0, int32(n-1+shift), q, nil)
		if d := maxDiff(out, refAttention(q, keys, values, nHeads, nKVHeads, headDim)); d > 1e-2 {
			t.Fatalf("%s: max diff %g", what, d)
		}
	}
	check("stored", 0)
	must(t, c.SeqAdd(0, 0, -1, delta))
	if p, _ := c.SeqPosMax(0); p != n-1+delta {
		t.Fatalf("SeqPosMax after SeqAdd = %d", p)
	}
	check("after SeqAdd", delta)
	// The stored K is still the unrotated one.
	k := make([]float32, nKVHeads*headDim)
	must(t, c.Read(1, []uint32{0}, k, nil))
	for i, want := range rows(0, 1, nKVHeads, headDim, keyOf) {
		if k[i] != want {
			t.Fatalf("stored K %d: %v, want %v", i, k[i], want)
		}
	}
}

// A sliding window on one layer, and NKeep positions visible past it.
func TestSlidingWindow(t *testing.T) {
	ctx := newContext(t)
	opts := smallCache()
	const window, n = 3, 8
	opts.LayerWindows = []uint32{0, window}
	c := newCache(t, ctx, opts)
	storeTokens(t, c, nil, 0, 0, n)
	keys := tokenRows(0, n, nKVHeads, headDim, keyOf)
	values := tokenRows(0, n, nKVHeads, headDim, valueOf)
	q := rows(0, 1, nHeads, headDim, queryOf)
	for _, tc := range []struct {
		layer  int32
		params *kvrt.AttentionParams
		seen   []int
	}{
		{0, nil, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{1, nil, []int{5, 6, 7}},
		{1, &kvrt.AttentionParams{NKeep: 2}, []int{0, 1, 5, 6, 7}},
	} {
		var kk, vv [][]float64
		for _, tok := range tc.seen {
			kk, vv = append(kk, keys[tok]), append(vv, values[tok])
		}
		out := attend(t, c, tc.layer, 0, n-1, q, tc.params)
		if d := maxDiff(out, refAttention(q, kk, vv, nHeads, nKVHeads, headDim)); d > 2e-3 {
			t.Errorf("layer %d, params %+v: max diff %g", tc.layer, tc.params, d)
		}
	}
	opts.LayerWindows = []uint32{1}
	if _, err := ctx.NewCache(opts); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("LayerWindows of the wrong length: %v", err)
	}
}

func TestAttentionParams(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, smallCache())
	const n = 7
	storeTokens(t, c, nil, 0, 0, n)
	keys := tokenRows(0, n, nKVHeads, headDim, keyOf)
	values := tokenRows(0, n, nKVHeads, headDim, valueOf)
	q := rows(2, 1, nHeads, headDim, queryOf)
	sinks := []float32{-1, 0, 0.5, 2}
	for _, tc := range []struct {
		name   string
		params kvrt.AttentionParams
		ref    refOpts
	}{
		{"scale", kvrt.AttentionParams{Scale: 0.9}, refOpts{scale: 0.9}},
		{"softcap", kvrt.AttentionParams{Scale: 0.9, Softcap: 0.5}, refOpts{scale: 0.9, softcap: 0.5}},
		{"sinks", kvrt.AttentionParams{Sinks: sinks}, refOpts{sinks: sinks}},
		{"all", kvrt.AttentionParams{Scale: 0.7, Softcap: 1, Sinks: sinks}, refOpts{scale: 0.7, softcap: 1, sinks: sinks}},
	} {
		out := attend(t, c, 0, 0, n-1, q, &tc.params)
		if d := maxDiff(out, refAttentionOpts(q, keys, values, nHeads, nKVHeads, headDim, tc.ref)); d > 2e-3 {
			t.Errorf("%s: max diff %g", tc.name, d)
		}
	}
	// The options change the result: a large scale sharpens the softmax.
	plain := attend(t, c, 0, 0, n-1, q, nil)
	sharp := attend(t, c, 0, 0, n-1, q, &kvrt.AttentionParams{Scale: 4})
	if maxDiff(sharp, refAttention(q, keys, values, nHeads, nKVHeads, headDim)) < 1e-2 || plain[0] == sharp[0] {
		t.Fatal("Scale had no effect")
	}
	if err := c.Attention(nil, 0, kvrt.SeqBatch(0, n-1, 1), kvrt.HostF32(q),
		kvrt.Output{F32: make([]float32, nHeads*headDim)}, &kvrt.AttentionParams{Sinks: sinks[:2]}); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("Sinks of the wrong length: %v", err)
	}
}

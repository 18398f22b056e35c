package kvrt_test

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	kvrt "github.com/kvrt/kvrt/bindings/go"
)

// newContext creates a context whose log errors fail the test, and checks at
// the end that the validation layer (on with KVRT_VALIDATION=1) saw nothing.
func newContext(t *testing.T) *kvrt.Context {
	t.Helper()
	ctx, err := kvrt.NewContext(kvrt.ContextOptions{
		Log: func(level kvrt.LogLevel, msg string) {
			if level >= kvrt.LogError {
				t.Errorf("kvrt log: %s", msg)
			}
		},
	})
	if err != nil {
		t.Fatalf("NewContext: %v", err)
	}
	t.Cleanup(func() {
		st, err := ctx.Stats()
		if err != nil {
			if !errors.Is(err, kvrt.ErrInvalidHandle) { // closed by the test
				t.Errorf("Stats: %v", err)
			}
		} else if st.ValidationErrors != 0 {
			t.Errorf("%d validation errors", st.ValidationErrors)
		}
		if err := ctx.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return ctx
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Made-up projections, multiples of 1/8 that f16 holds exactly.
func keyOf(tok, head, d int) float32 { return float32((tok*3+head*5+d)%7-3) / 8 }
func valueOf(tok, head, d int) float32 {
	return float32(tok-2) + float32(head)/2 + float32(d)/8
}
func queryOf(tok, h, d int) float32 { return float32((tok+h+2*d)%5-2) / 4 }

// rows builds packed rows [token][head][dim] of f.
func rows(first, n, heads, dim int, f func(tok, head, d int) float32) []float32 {
	out := make([]float32, 0, n*heads*dim)
	for t := first; t < first+n; t++ {
		for h := 0; h < heads; h++ {
			for d := 0; d < dim; d++ {
				out = append(out, f(t, h, d))
			}
		}
	}
	return out
}

// refAttention is the f64 reference: for each query head h (KV head
// h/(heads/kvHeads)), softmax(q.k/sqrt(dim)) over the given keys, times V.
func refAttention(q []float32, keys, values [][]float64, heads, kvHeads, dim int) []float64 {
	out := make([]float64, heads*dim)
	group := heads / kvHeads
	for h := 0; h < heads; h++ {
		kv := h / group
		scores := make([]float64, len(keys))
		top := math.Inf(-1)
		for t := range keys {
			s := 0.0
			for d := 0; d < dim; d++ {
				s += float64(q[h*dim+d]) * keys[t][kv*dim+d]
			}
			scores[t] = s / math.Sqrt(float64(dim))
			top = math.Max(top, scores[t])
		}
		sum := 0.0
		for t := range scores {
			scores[t] = math.Exp(scores[t] - top)
			sum += scores[t]
		}
		for d := 0; d < dim; d++ {
			for t := range keys {
				out[h*dim+d] += scores[t] / sum * values[t][kv*dim+d]
			}
		}
	}
	return out
}

func maxDiff(got []float32, want []float64) float64 {
	m := 0.0
	for i := range want {
		m = math.Max(m, math.Abs(float64(got[i])-want[i]))
	}
	return m
}

func tokenRows(first, n, heads, dim int, f func(tok, head, d int) float32) [][]float64 {
	var out [][]float64
	for t := first; t < first+n; t++ {
		r := rows(t, 1, heads, dim, f)
		row := make([]float64, len(r))
		for i, v := range r {
			row[i] = float64(v)
		}
		out = append(out, row)
	}
	return out
}

const (
	nHeads   = 4
	nKVHeads = 2
	headDim  = 16
)

func newCache(t *testing.T, ctx *kvrt.Context, opts kvrt.CacheOptions) *kvrt.Cache {
	t.Helper()
	c, err := ctx.NewCache(opts)
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func smallCache() kvrt.CacheOptions {
	return kvrt.CacheOptions{Layers: 2, Heads: nHeads, KVHeads: nKVHeads, HeadDimK: headDim, Capacity: 64, MaxSeqs: 4}
}

func storeTokens(t *testing.T, c *kvrt.Cache, s *kvrt.Stream, seq int32, first, n int) []uint32 {
	t.Helper()
	// Both layers, packed, layer-major.
	k := append(rows(first, n, nKVHeads, headDim, keyOf), rows(first, n, nKVHeads, headDim, keyOf)...)
	v := append(rows(first, n, nKVHeads, headDim, valueOf), rows(first, n, nKVHeads, headDim, valueOf)...)
	cells, err := c.Store(s, kvrt.SeqBatch(seq, int32(first), n), kvrt.AllLayers, kvrt.HostF32(k), kvrt.HostF32(v))
	must(t, err)
	return cells
}

func TestVersion(t *testing.T) {
	if kvrt.VersionString() == "" || kvrt.Version() == 0 {
		t.Fatalf("version %q %d", kvrt.VersionString(), kvrt.Version())
	}
	if typ, err := kvrt.ParseType("Q8_0"); err != nil || typ != kvrt.TypeQ8_0 || typ.String() != "q8_0" {
		t.Fatalf("ParseType: %v %v", typ, err)
	}
	if _, err := kvrt.ParseType("nope"); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("ParseType(nope): %v", err)
	}
	if kvrt.TypeF16.RowBytes(8) != 16 || kvrt.TypeQ4_0.RowBytes(64) != 36 {
		t.Fatal("RowBytes")
	}
}

func TestDevicesAndInfo(t *testing.T) {
	devs, err := kvrt.Devices()
	must(t, err)
	if len(devs) == 0 {
		t.Fatal("no devices")
	}
	ctx := newContext(t)
	info, err := ctx.DeviceInfo()
	must(t, err)
	if info.Name == "" || info.MaxStorageBufferRange == 0 {
		t.Fatalf("device info %+v", info)
	}
	if _, err := ctx.PipelineCache(); err != nil {
		t.Fatal(err)
	}
	tuning, err := ctx.Tuning()
	must(t, err)
	if !strings.Contains(tuning, "device "+info.Name+"\n") || !strings.Contains(tuning, "\nattention.kernel ") {
		t.Fatalf("tuning text %q", tuning)
	}
}

func TestAttentionMatchesReference(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, smallCache())
	const n = 9
	storeTokens(t, c, nil, 1, 0, n)
	info, err := c.Info()
	must(t, err)
	if info.Used != n || info.Capacity != 64 {
		t.Fatalf("info %+v", info)
	}
	keys := tokenRows(0, n, nKVHeads, headDim, keyOf)
	values := tokenRows(0, n, nKVHeads, headDim, valueOf)
	for layer := int32(0); layer < 2; layer++ {
		// Two queries at positions 4 and 8: causal masks differ.
		q := rows(0, 2, nHeads, headDim, queryOf)
		out := make([]float32, 2*nHeads*headDim)
		must(t, c.Attention(nil, layer, kvrt.Batch{Positions: []int32{4, 8}, SeqIDs: []int32{1, 1}},
			kvrt.HostF32(q), kvrt.Output{F32: out}, nil))
		for i, pos := range []int{4, 8} {
			want := refAttention(q[i*nHeads*headDim:], keys[:pos+1], values[:pos+1], nHeads, nKVHeads, headDim)
			if d := maxDiff(out[i*nHeads*headDim:], want); d > 2e-3 {
				t.Errorf("layer %d query %d: max diff %g", layer, i, d)
			}
		}
	}
	// Sequence ops.
	if p, err := c.SeqPosMax(1); err != nil || p != n-1 {
		t.Fatalf("SeqPosMax = %d, %v", p, err)
	}
	must(t, c.SeqCp(1, 2, 0, 4))
	if p, _ := c.SeqPosMax(2); p != 3 {
		t.Fatalf("SeqPosMax(2) after SeqCp = %d", p)
	}
	must(t, c.SeqRm(1, 5, -1))
	if p, _ := c.SeqPosMax(1); p != 4 {
		t.Fatalf("SeqPosMax after SeqRm = %d", p)
	}
	must(t, c.SeqKeep(2))
	if p, _ := c.SeqPosMax(1); p != -1 {
		t.Fatalf("SeqPosMax(1) after SeqKeep = %d", p)
	}
	if _, err := c.Compact(nil, 0, 0); err != nil {
		t.Fatal(err)
	}
	must(t, c.Clear())
	if info, _ := c.Info(); info.Used != 0 {
		t.Fatalf("used %d after Clear", info.Used)
	}
}

// ropeShift rotates one head row by delta positions (normal mode, base 10000).
func ropeShift(row []float64, delta int) {
	dim := len(row)
	for i := 0; i < dim; i += 2 {
		theta := float64(delta) * math.Pow(10000, -float64(i)/float64(dim))
		c, s := math.Cos(theta), math.Sin(theta)
		x, y := row[i], row[i+1]
		row[i], row[i+1] = x*c-y*s, x*s+y*c
	}
}

func TestContextShift(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, smallCache())
	const n = 12
	storeTokens(t, c, nil, 0, 0, n)
	nPast, err := c.ContextShift(0, 2, 4)
	must(t, err)
	if nPast != n-4 {
		t.Fatalf("nPast = %d", nPast)
	}
	if info, _ := c.Info(); info.PendingShifts == 0 {
		t.Fatal("no pending shift")
	}
	// Reference: tokens 0,1 kept; tokens 6..11 moved to positions 2..7, their
	// K rotated by -4.
	keys := tokenRows(0, n, nKVHeads, headDim, keyOf)
	values := tokenRows(0, n, nKVHeads, headDim, valueOf)
	var kk, vv [][]float64
	for tok := 0; tok < n; tok++ {
		if tok >= 2 && tok < 6 {
			continue
		}
		if tok >= 6 {
			for h := 0; h < nKVHeads; h++ {
				ropeShift(keys[tok][h*headDim:(h+1)*headDim], -4)
			}
		}
		kk, vv = append(kk, keys[tok]), append(vv, values[tok])
	}
	q := rows(3, 1, nHeads, headDim, queryOf)
	out := make([]float32, nHeads*headDim)
	must(t, c.Attention(nil, 1, kvrt.SeqBatch(0, nPast-1, 1), kvrt.HostF32(q), kvrt.Output{F32: out}, nil))
	if d := maxDiff(out, refAttention(q, kk, vv, nHeads, nKVHeads, headDim)); d > 1e-2 {
		t.Fatalf("after shift: max diff %g", d)
	}
	if info, _ := c.Info(); info.PendingShifts != 0 {
		t.Fatal("shift still pending after attention")
	}
	re, err := c.DiscardForReevaluation(0, 2, 2)
	must(t, err)
	if re.Count <= 0 || re.DstPos != 2 {
		t.Fatalf("reevaluation %+v", re)
	}
}

func TestStreamRecording(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, smallCache())
	s, err := ctx.NewStream(kvrt.StreamOptions{Label: "test"})
	must(t, err)
	defer s.Close()
	out, err := ctx.NewBuffer(kvrt.BufferOptions{Size: 4 * nHeads * headDim, Label: "out"})
	must(t, err)
	defer out.Close()
	qbuf, err := ctx.NewBuffer(kvrt.BufferOptions{Size: 4 * nHeads * headDim})
	must(t, err)
	q := rows(0, 1, nHeads, headDim, queryOf)
	must(t, qbuf.UploadF32(0, q))

	must(t, s.Begin())
	storeTokens(t, c, s, 0, 0, 6)
	must(t, s.Fill(out, 0, out.Size(), 0x7fc00000))
	must(t, c.Attention(s, 0, kvrt.SeqBatch(0, 5, 1), kvrt.Tensor{Buffer: qbuf}, kvrt.Output{Buffer: out}, nil))
	must(t, s.Submit())
	must(t, s.Wait(time.Minute))
	got := make([]float32, nHeads*headDim)
	must(t, out.DownloadF32(0, got))
	want := refAttention(q, tokenRows(0, 6, nKVHeads, headDim, keyOf), tokenRows(0, 6, nKVHeads, headDim, valueOf),
		nHeads, nKVHeads, headDim)
	if d := maxDiff(got, want); d > 2e-3 {
		t.Fatalf("stream attention: max diff %g", d)
	}
	// Copy, and submitting an idle stream.
	dst, err := ctx.NewBuffer(kvrt.BufferOptions{Size: out.Size()})
	must(t, err)
	must(t, s.Begin())
	must(t, s.Copy(out, 0, dst, 0, out.Size()))
	must(t, s.Submit())
	must(t, s.Wait(time.Minute))
	got2 := make([]float32, len(got))
	must(t, dst.DownloadF32(0, got2))
	if got2[3] != got[3] {
		t.Fatal("copy differs")
	}
	if err := s.Submit(); !errors.Is(err, kvrt.ErrInvalidState) {
		t.Fatalf("Submit of idle stream: %v", err)
	}
}

func TestReadRaw(t *testing.T) {
	ctx := newContext(t)
	opts := smallCache()
	a := newCache(t, ctx, opts)
	cells := storeTokens(t, a, nil, 0, 0, 3)
	info, err := a.Info()
	must(t, err)
	if info.KRowBytes != 2*nKVHeads*headDim {
		t.Fatalf("KRowBytes %d", info.KRowBytes)
	}
	raw := make([]byte, 3*info.KRowBytes)
	must(t, a.ReadRaw(1, kvrt.ArrayK, cells, raw))
	// f16 bits of the values (exact multiples of 1/8).
	want := rows(0, 3, nKVHeads, headDim, keyOf)
	for i, v := range want {
		bits := uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
		if got := f16ToF32(bits); got != v {
			t.Fatalf("raw value %d: %v, want %v", i, got, v)
		}
	}
	// Store the raw rows into another cache and read them back.
	b := newCache(t, ctx, opts)
	vals := rows(0, 3, nKVHeads, headDim, valueOf)
	bc, err := b.Store(nil, kvrt.SeqBatch(0, 0, 3), 1, kvrt.Tensor{Raw: raw, Type: kvrt.TypeF16}, kvrt.HostF32(vals))
	must(t, err)
	k := make([]float32, len(want))
	v := make([]float32, len(vals))
	must(t, b.Read(1, bc, k, v))
	for i := range want {
		if k[i] != want[i] || v[i] != vals[i] {
			t.Fatalf("read back %d: %v %v", i, k[i], v[i])
		}
	}
	if err := a.ReadRaw(1, kvrt.ArrayK, cells, raw[:5]); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("ReadRaw into a short slice: %v", err)
	}
}

func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := int(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0:
		v := float32(mant) / 1024 * float32(math.Pow(2, -14))
		if sign != 0 {
			return -v
		}
		return v
	case exp == 31:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | uint32(exp-15+127)<<23 | mant<<13)
}

func TestStaticSmartMask(t *testing.T) {
	ctx := newContext(t)
	const seqLen = 5
	c := newCache(t, ctx, kvrt.CacheOptions{Layers: 1, Heads: 1, KVHeads: 1, HeadDimK: 8,
		Static: &kvrt.StaticLayout{SeqLen: seqLen, Style: kvrt.StyleSmartMask}})
	store := func(first, n int) {
		k := rows(first, n, 1, 8, keyOf)
		v := rows(first, n, 1, 8, valueOf)
		_, err := c.Store(nil, kvrt.SeqBatch(0, int32(first), n), 0, kvrt.HostF32(k), kvrt.HostF32(v))
		must(t, err)
	}
	store(0, 3)
	w0, err := c.StaticWindow(0, 0, 0, kvrt.ArrayK)
	must(t, err)
	// Right-padded while the ring fills, then a graph's 2 inputs, causal.
	graph := make([]uint16, 2*(seqLen-1+2))
	must(t, c.StaticGraphMaskU16(0, 2, graph))
	want := []uint16{65535, 65535, 65535, 0, 65535, 0, 65535, 65535, 65535, 0, 65535, 65535}
	for i := range want {
		if graph[i] != want[i] {
			t.Fatalf("smart-mask graph mask %v, want %v", graph, want)
		}
	}
	// Three more wrap the ring: the window stays where it was, rows 0 and 1
	// hold positions 4 and 5.
	store(3, 3)
	w, err := c.StaticWindow(0, 0, 0, kvrt.ArrayK)
	must(t, err)
	if w.Offset != w0.Offset || w.NValid != 4 || w.PosFirst != 2 || w.PosLast != 5 {
		t.Fatalf("ring window %+v, first %+v", w, w0)
	}
	got := make([]uint16, w.Rows*8)
	must(t, w.Buffer.DownloadF16(w.Offset, got))
	k := rows(4, 2, 1, 8, keyOf)
	for i, want := range k {
		if f := f16ToF32(got[i]); f != want {
			t.Fatalf("ring row value %d: %v, want %v", i, f, want)
		}
	}
	if err := c.StaticMakeRoom(0, 1); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("room in a ring: %v", err)
	}
	_, err = ctx.NewCache(kvrt.CacheOptions{Layers: 1, Heads: 1, KVHeads: 1, HeadDimK: 8,
		Static: &kvrt.StaticLayout{SeqLen: seqLen, Reserve: 2, Style: kvrt.StyleSmartMask}})
	if !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("a ring with reserve 2: %v", err)
	}
}

func TestExportMemory(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, kvrt.CacheOptions{Layers: 1, Heads: 1, KVHeads: 1, HeadDimK: 8, Exportable: true,
		Static: &kvrt.StaticLayout{SeqLen: 5, Style: kvrt.StyleSmartMask}})
	w, err := c.StaticWindow(0, 0, 0, kvrt.ArrayV)
	must(t, err)
	e, err := w.Buffer.ExportMemory(w.Offset, kvrt.HandleOpaqueFD)
	must(t, err)
	defer syscall.Close(e.FD)
	if e.FD < 0 || e.ContiguousBytes < w.Bytes || e.Offset+w.Bytes > e.MemorySize {
		t.Fatalf("exported %+v for a window of %d bytes", e, w.Bytes)
	}
	plain, err := ctx.NewBuffer(kvrt.BufferOptions{Size: 64})
	must(t, err)
	defer plain.Close()
	if _, err := plain.ExportMemory(0, kvrt.HandleOpaqueFD); !errors.Is(err, kvrt.ErrUnsupported) {
		t.Fatalf("a plain buffer exported: %v", err)
	}
	b, err := ctx.NewBuffer(kvrt.BufferOptions{Size: 64, Exportable: true})
	must(t, err)
	defer b.Close()
	e2, err := b.ExportMemory(16, kvrt.HandleOpaqueFD)
	must(t, err)
	defer syscall.Close(e2.FD)
	if e2.Offset != 16 || e2.ContiguousBytes != 48 {
		t.Fatalf("exported %+v", e2)
	}
}

func TestStaticLayout(t *testing.T) {
	ctx := newContext(t)
	const seqLen = 6
	c := newCache(t, ctx, kvrt.CacheOptions{Layers: 1, Heads: 2, KVHeads: 1, HeadDimK: 8,
		Static: &kvrt.StaticLayout{SeqLen: seqLen}})
	k := rows(0, 3, 1, 8, keyOf)
	v := rows(0, 3, 1, 8, valueOf)
	_, err := c.Store(nil, kvrt.SeqBatch(0, 0, 3), 0, kvrt.HostF32(k), kvrt.HostF32(v))
	must(t, err)
	w, err := c.StaticWindow(0, 0, 0, kvrt.ArrayK)
	must(t, err)
	if w.Rows != seqLen-1 || w.NValid != 3 || w.PosFirst != 0 || w.PosLast != 2 || w.Type != kvrt.TypeF16 ||
		w.RowStride != 16 {
		t.Fatalf("window %+v", w)
	}
	// The window's last 3 rows are the keys, as f16.
	got := make([]uint16, w.Rows*8)
	must(t, w.Buffer.DownloadF16(w.Offset, got))
	for i, want := range k {
		if f := f16ToF32(got[(int(w.Rows)-3)*8+i]); f != want {
			t.Fatalf("window value %d: %v, want %v", i, f, want)
		}
	}
	must(t, w.Buffer.Close()) // the cache's: a no-op
	mask := make([]float32, seqLen)
	must(t, c.StaticMask(0, mask))
	for i, m := range mask {
		pad := i < seqLen-1-3
		if pad != math.IsInf(float64(m), -1) || (!pad && m != 0) {
			t.Fatalf("mask %v", mask)
		}
	}
	mask16 := make([]uint16, seqLen)
	must(t, c.StaticMaskF16(0, mask16))
	if mask16[0] != 0xFC00 || mask16[seqLen-1] != 0 {
		t.Fatalf("f16 mask %x", mask16)
	}
	if err := c.StaticMask(0, mask[:2]); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("short mask: %v", err)
	}
	// A graph of 2 new rows: its past is the window's last seqLen-2 rows, of
	// which the last 3 are valid, then its own tokens, causal.
	graph := make([]float32, 2*seqLen)
	must(t, c.StaticGraphMask(0, kvrt.GraphMask{NNew: 2, Finite: true, MaskedValue: -65535}, graph))
	for j := 0; j < 2; j++ {
		for i := 0; i < seqLen; i++ {
			past := seqLen - 2
			attend := (i < past && i >= past-3) || (i >= past && i-past <= j)
			if got := graph[j*seqLen+i]; (attend && got != 0) || (!attend && got != -65535) {
				t.Fatalf("graph mask row %d: %v", j, graph[j*seqLen:(j+1)*seqLen])
			}
		}
	}
	graph16 := make([]uint16, 2*seqLen)
	must(t, c.StaticGraphMaskU16(0, 2, graph16))
	if graph16[0] != 0 || graph16[seqLen-1] != 0 || graph16[2*seqLen-1] != 65535 {
		t.Fatalf("u16 graph mask %v", graph16)
	}
	must(t, c.StaticGraphMaskF16(0, kvrt.GraphMask{}, graph16[:seqLen]))
	if graph16[0] != 0xFC00 || graph16[seqLen-1] != 0 {
		t.Fatalf("f16 graph mask %x", graph16[:seqLen])
	}
	if err := c.StaticGraphMask(0, kvrt.GraphMask{NNew: 2}, graph[:seqLen]); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("short graph mask: %v", err)
	}
	st, err := c.StaticStats(-1)
	must(t, err)
	if st.RowsAppended != 3 {
		t.Fatalf("stats %+v", st)
	}
	// Room for 2 rows after the window (R = 2: 10 rows for a window of 5);
	// a graph writes token 3's key there, and Place takes it with no copy.
	must(t, c.StaticMakeRoom(0, 2))
	w, err = c.StaticWindow(0, 0, 0, kvrt.ArrayK)
	must(t, err)
	written := make([]uint16, 8)
	for i := range written {
		written[i] = 0x3C00 + uint16(i) // 1.0, 1.0009..., distinct halves
	}
	must(t, w.Buffer.UploadF16(w.Offset+w.Bytes, written))
	_, err = c.Place(kvrt.SeqBatch(0, 3, 1))
	must(t, err)
	w, err = c.StaticWindow(0, 0, 0, kvrt.ArrayK)
	must(t, err)
	got = make([]uint16, w.Rows*8)
	must(t, w.Buffer.DownloadF16(w.Offset, got))
	if w.NValid != 4 || w.PosLast != 3 || got[(w.Rows-1)*8] != 0x3C00 || got[(w.Rows-1)*8+7] != 0x3C07 {
		t.Fatalf("window after a graph's row: %+v, last row %x", w, got[(w.Rows-1)*8:])
	}
	if err := c.StaticMakeRoom(0, 6); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("room beyond the region: %v", err)
	}
	must(t, c.SeqRm(0, 3, -1)) // back to the 3 stored tokens
	if err := c.SeqAdd(0, 0, -1, 1); !errors.Is(err, kvrt.ErrUnsupported) {
		t.Fatalf("SeqAdd on a static cache: %v", err)
	}
	// Transfer into a cell cache gives the same attention.
	cells := newCache(t, ctx, kvrt.CacheOptions{Layers: 1, Heads: 2, KVHeads: 1, HeadDimK: 8, Capacity: 32, MaxSeqs: 1})
	n, err := c.SeqTransfer(0, cells, 0)
	must(t, err)
	if n != 3 {
		t.Fatalf("transferred %d", n)
	}
	q := rows(0, 1, 2, 8, queryOf)
	o1, o2 := make([]float32, 16), make([]float32, 16)
	must(t, c.Attention(nil, 0, kvrt.SeqBatch(0, 2, 1), kvrt.HostF32(q), kvrt.Output{F32: o1}, nil))
	must(t, cells.Attention(nil, 0, kvrt.SeqBatch(0, 2, 1), kvrt.HostF32(q), kvrt.Output{F32: o2}, nil))
	for i := range o1 {
		if o1[i] != o2[i] {
			t.Fatalf("static vs cells: %v vs %v", o1, o2)
		}
	}
	// A rejected draft token: the newest row leaves the window.
	must(t, c.SeqRm(0, 2, -1))
	w2, err := c.StaticWindow(0, 0, 0, kvrt.ArrayK)
	must(t, err)
	if w2.NValid != 2 || w2.PosFirst != 0 || w2.PosLast != 1 {
		t.Fatalf("window after removing the newest row: %+v", w2)
	}
	// Closing the cache invalidates its windows' buffer.
	must(t, c.Close())
	if err := w.Buffer.DownloadF16(0, got); !errors.Is(err, kvrt.ErrInvalidHandle) {
		t.Fatalf("window buffer after cache Close: %v", err)
	}
}

func TestMemory(t *testing.T) {
	ctx := newContext(t)
	const layers, heads, slots, dim = 1, 2, 4, 8
	mk := make([]float32, layers*heads*slots*dim)
	for i := range mk {
		mk[i] = float32(i%5-2) / 4
	}
	m, err := ctx.NewMemory(kvrt.MemoryOptions{Layers: layers, Heads: heads, Slots: slots, KeyDim: dim,
		Keys: &kvrt.MemoryInit{F32: mk}})
	must(t, err)
	defer m.Close()
	const n = 3
	wq := rows(0, n, heads, dim, queryOf)
	wv := rows(0, n, heads, dim, valueOf)
	must(t, m.Update(nil, kvrt.MemoryBatch{NTokens: n, WQ: &kvrt.Tensor{F32: wq}, WV: &kvrt.Tensor{F32: wv}}))
	// Reference: MV += softmax(MK wq) (outer) wv, per head.
	mv := make([]float64, heads*slots*dim)
	for tok := 0; tok < n; tok++ {
		for h := 0; h < heads; h++ {
			ww := make([]float64, slots)
			top, sum := math.Inf(-1), 0.0
			for s := 0; s < slots; s++ {
				for d := 0; d < dim; d++ {
					ww[s] += float64(mk[(h*slots+s)*dim+d]) * float64(wq[(tok*heads+h)*dim+d])
				}
				top = math.Max(top, ww[s])
			}
			for s := range ww {
				ww[s] = math.Exp(ww[s] - top)
				sum += ww[s]
			}
			for s := 0; s < slots; s++ {
				for d := 0; d < dim; d++ {
					mv[(h*slots+s)*dim+d] += ww[s] / sum * float64(wv[(tok*heads+h)*dim+d])
				}
			}
		}
	}
	state, err := m.State(0, 0)
	must(t, err)
	if d := maxDiff(state, mv); d > 1e-4 {
		t.Fatalf("state: max diff %g", d)
	}
	out := make([]float32, heads*dim)
	must(t, m.Read(nil, kvrt.MemoryBatch{NTokens: 1, Q: &kvrt.Tensor{F32: wq[:heads*dim]}, Out: &kvrt.Output{F32: out}}))
	if out[0] == 0 && out[1] == 0 {
		t.Fatal("read gave zeros")
	}
	must(t, m.SeqRm(nil, 0))
	if state, _ := m.State(0, 0); state[0] != 0 {
		t.Fatal("SeqRm kept the state")
	}
	if err := m.Update(nil, kvrt.MemoryBatch{NTokens: n, WQ: &kvrt.Tensor{F32: wq[:3]}, WV: &kvrt.Tensor{F32: wv}}); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("short WQ: %v", err)
	}
}

func TestMisuse(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, smallCache())
	// Host data shorter than the call reads: refused before any C call.
	_, err := c.Store(nil, kvrt.SeqBatch(0, 0, 2), 0, kvrt.HostF32(make([]float32, 5)), kvrt.HostF32(make([]float32, 64)))
	var kerr *kvrt.Error
	if !errors.Is(err, kvrt.ErrInvalidArgument) || !errors.As(err, &kerr) || kerr.Op != "kvrt_cache_store" {
		t.Fatalf("short k: %v", err)
	}
	if _, err := c.Store(nil, kvrt.Batch{Positions: []int32{0, 1}, SeqIDs: []int32{0}}, 0,
		kvrt.HostF32(make([]float32, 64)), kvrt.HostF32(make([]float32, 64))); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("batch lengths: %v", err)
	}
	if err := c.Attention(nil, 0, kvrt.SeqBatch(0, 0, 1), kvrt.HostF32(make([]float32, 64)),
		kvrt.Output{F32: make([]float32, 3)}, nil); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("short out: %v", err)
	}
	// Read outputs shorter than the cells need: the library refuses them
	// (it gets each slice's size) and writes nothing; an empty slice that is
	// not nil is refused too.
	cells := storeTokens(t, c, nil, 0, 0, 2)
	k, v := make([]float32, 2*nKVHeads*headDim), make([]float32, 2*nKVHeads*headDim-1)
	for i := range v {
		k[i], v[i] = 7, 7
	}
	if err := c.Read(0, cells, k, v); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("short v: %v", err)
	}
	for i := range v {
		if k[i] != 7 || v[i] != 7 {
			t.Fatalf("a refused Read wrote value %d", i)
		}
	}
	if err := c.Read(0, cells, []float32{}, nil); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("empty k: %v", err)
	}
	// An error from the library carries its detail message.
	err = c.SeqRm(99, 0, -1)
	if !errors.Is(err, kvrt.ErrInvalidArgument) || !errors.As(err, &kerr) || kerr.Message == "" {
		t.Fatalf("unknown sequence: %#v", err)
	}
	if errors.Is(err, kvrt.ErrCacheFull) {
		t.Fatal("errors.Is matched the wrong code")
	}
	// Cache full.
	small := newCache(t, ctx, kvrt.CacheOptions{Layers: 1, Heads: 1, KVHeads: 1, HeadDimK: 8, Capacity: 2})
	if _, err := small.Store(nil, kvrt.SeqBatch(0, 0, 3), 0, kvrt.HostF32(make([]float32, 24)),
		kvrt.HostF32(make([]float32, 24))); !errors.Is(err, kvrt.ErrCacheFull) {
		t.Fatalf("overfull store: %v", err)
	}
	// Closed objects, double Close.
	must(t, c.Close())
	must(t, c.Close())
	if _, err := c.Info(); !errors.Is(err, kvrt.ErrInvalidHandle) {
		t.Fatalf("Info after Close: %v", err)
	}
	// A stream of another context.
	other := newContext(t)
	s, err := other.NewStream(kvrt.StreamOptions{})
	must(t, err)
	must(t, s.Begin())
	if err := small.ApplyShifts(s); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("foreign stream: %v", err)
	}
	// Closing a context invalidates its objects.
	buf, err := other.NewBuffer(kvrt.BufferOptions{Size: 64})
	must(t, err)
	must(t, other.Close())
	must(t, other.Close())
	if err := buf.Upload(0, []byte{1, 2, 3, 4}); !errors.Is(err, kvrt.ErrInvalidHandle) {
		t.Fatalf("Upload after context Close: %v", err)
	}
	if err := s.Submit(); !errors.Is(err, kvrt.ErrInvalidHandle) {
		t.Fatalf("Submit after context Close: %v", err)
	}
	must(t, buf.Close())
	must(t, s.Close())
	if _, err := other.NewCache(smallCache()); !errors.Is(err, kvrt.ErrInvalidHandle) {
		t.Fatalf("NewCache on a closed context: %v", err)
	}
	// Out of range in the buffer.
	b2, err := ctx.NewBuffer(kvrt.BufferOptions{Size: 8})
	must(t, err)
	if err := b2.Upload(4, make([]byte, 8)); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("upload past the end: %v", err)
	}
	if _, err := ctx.NewBuffer(kvrt.BufferOptions{}); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("size 0: %v", err)
	}
}

// Goroutines on separate caches of one context, each with its own stream or
// synchronous calls (kvrt.h, "Threading"); run under -race.
func TestConcurrentCaches(t *testing.T) {
	ctx := newContext(t)
	const workers, steps = 4, 6
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c, err := ctx.NewCache(smallCache())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			var s *kvrt.Stream
			if w%2 == 1 {
				if s, err = ctx.NewStream(kvrt.StreamOptions{}); err != nil {
					t.Error(err)
					return
				}
				defer s.Close()
			}
			for step := 0; step < steps; step++ {
				k := append(rows(step, 1, nKVHeads, headDim, keyOf), rows(step, 1, nKVHeads, headDim, keyOf)...)
				v := append(rows(step, 1, nKVHeads, headDim, valueOf), rows(step, 1, nKVHeads, headDim, valueOf)...)
				if s != nil {
					if err := s.Begin(); err != nil {
						t.Error(err)
						return
					}
				}
				if _, err := c.Store(s, kvrt.SeqBatch(int32(w%4), int32(step), 1), kvrt.AllLayers,
					kvrt.HostF32(k), kvrt.HostF32(v)); err != nil {
					t.Error(err)
					return
				}
				if s != nil {
					if err := s.Submit(); err != nil {
						t.Error(err)
						return
					}
					if err := s.Wait(time.Minute); err != nil {
						t.Error(err)
						return
					}
				}
				q := rows(step, 1, nHeads, headDim, queryOf)
				out := make([]float32, nHeads*headDim)
				if err := c.Attention(nil, int32(step%2), kvrt.SeqBatch(int32(w%4), int32(step), 1), kvrt.HostF32(q),
					kvrt.Output{F32: out}, nil); err != nil {
					t.Error(err)
					return
				}
				want := refAttention(q, tokenRows(0, step+1, nKVHeads, headDim, keyOf),
					tokenRows(0, step+1, nKVHeads, headDim, valueOf), nHeads, nKVHeads, headDim)
				if d := maxDiff(out, want); d > 2e-3 {
					t.Errorf("worker %d step %d: max diff %g", w, step, d)
				}
				if _, err := ctx.Stats(); err != nil {
					t.Error(err)
				}
			}
		}(w)
	}
	// Meanwhile, one cache shared by goroutines: its calls are serialized.
	shared, err := ctx.NewCache(smallCache())
	must(t, err)
	defer shared.Close()
	var stored atomic.Int32
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 4; i++ {
				k := make([]float32, 2*nKVHeads*headDim)
				if _, err := shared.Store(nil, kvrt.SeqBatch(int32(g), int32(i), 1), kvrt.AllLayers,
					kvrt.HostF32(k), kvrt.HostF32(k)); err != nil {
					t.Error(err)
					return
				}
				stored.Add(1)
				if _, err := shared.Info(); err != nil {
					t.Error(err)
				}
			}
		}(g)
	}
	wg.Wait()
	if info, _ := shared.Info(); info.Used != uint32(stored.Load()) {
		t.Fatalf("shared cache holds %d cells, %d stored", info.Used, stored.Load())
	}
}

func TestLogCallback(t *testing.T) {
	var calls atomic.Int32
	ctx, err := kvrt.NewContext(kvrt.ContextOptions{
		LogLevel: kvrt.LogDebug,
		Log: func(level kvrt.LogLevel, msg string) {
			calls.Add(1)
			panic("a panic in the log function must not reach C")
		},
	})
	must(t, err)
	// Destroying a buffer a cache owns is logged as a warning.
	c, err := ctx.NewCache(kvrt.CacheOptions{Layers: 1, Heads: 1, KVHeads: 1, HeadDimK: 8,
		Static: &kvrt.StaticLayout{SeqLen: 4}})
	must(t, err)
	_, err = c.Store(nil, kvrt.SeqBatch(0, 0, 1), 0, kvrt.HostF32(make([]float32, 8)), kvrt.HostF32(make([]float32, 8)))
	must(t, err)
	must(t, ctx.Close())
	if calls.Load() == 0 {
		t.Error("no log message at debug level")
	}
}

// TestShuffleKernels forces the subgroup-shuffle kernels (lavapipe has
// them) and checks attention against the reference; both variants at once
// are refused.
func TestShuffleKernels(t *testing.T) {
	if _, err := kvrt.NewContext(kvrt.ContextOptions{ShuffleKernels: true, PortableKernels: true}); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("both variants: %v", err)
	}
	ctx, err := kvrt.NewContext(kvrt.ContextOptions{ShuffleKernels: true})
	if errors.Is(err, kvrt.ErrUnsupported) {
		t.Skip("the device has no subgroup shuffles")
	}
	must(t, err)
	defer ctx.Close()
	checkAttentionAgainstReference(t, ctx)
}

// TestTiledKernels forces the shared-memory tiled attention kernel and
// checks attention against the reference; with another variant it is
// refused.
func TestTiledKernels(t *testing.T) {
	if _, err := kvrt.NewContext(kvrt.ContextOptions{TiledKernels: true, ShuffleKernels: true}); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("two variants: %v", err)
	}
	ctx, err := kvrt.NewContext(kvrt.ContextOptions{TiledKernels: true})
	must(t, err)
	defer ctx.Close()
	checkAttentionAgainstReference(t, ctx)
}

// checkAttentionAgainstReference stores six tokens and checks one query's
// attention against the reference.
func checkAttentionAgainstReference(t *testing.T, ctx *kvrt.Context) {
	t.Helper()
	c := newCache(t, ctx, smallCache())
	const n = 6
	storeTokens(t, c, nil, 0, 0, n)
	keys := tokenRows(0, n, nKVHeads, headDim, keyOf)
	values := tokenRows(0, n, nKVHeads, headDim, valueOf)
	q := rows(0, 1, nHeads, headDim, queryOf)
	out := make([]float32, nHeads*headDim)
	must(t, c.Attention(nil, 0, kvrt.Batch{Positions: []int32{n - 1}, SeqIDs: []int32{0}}, kvrt.HostF32(q), kvrt.Output{F32: out}, nil))
	want := refAttention(q, keys, values, nHeads, nKVHeads, headDim)
	if d := maxDiff(out, want); d > 2e-3 {
		t.Errorf("max diff %g", d)
	}
}

func TestTreeAttention(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, smallCache())
	storeTokens(t, c, nil, 0, 0, 3)
	// Two candidates for position 3 (rows of tokens 3 and 4) and a child of
	// the second at position 4 (row 5).
	tree := kvrt.Batch{Positions: []int32{3, 3, 4}, SeqIDs: []int32{0, 0, 0}, Parents: []int32{-1, -1, 1}}
	k := append(rows(3, 3, nKVHeads, headDim, keyOf), rows(3, 3, nKVHeads, headDim, keyOf)...)
	v := append(rows(3, 3, nKVHeads, headDim, valueOf), rows(3, 3, nKVHeads, headDim, valueOf)...)
	cells, err := c.Store(nil, tree, kvrt.AllLayers, kvrt.HostF32(k), kvrt.HostF32(v))
	must(t, err)
	tree.Cells = cells

	keys := tokenRows(0, 6, nKVHeads, headDim, keyOf)
	values := tokenRows(0, 6, nKVHeads, headDim, valueOf)
	q := rows(10, 3, nHeads, headDim, queryOf)
	out := make([]float32, 3*nHeads*headDim)
	must(t, c.Attention(nil, 0, tree, kvrt.HostF32(q), kvrt.Output{F32: out}, nil))
	// Each query sees the prompt and, of the tree, its ancestors and itself.
	for i, seen := range [][]int{{0, 1, 2, 3}, {0, 1, 2, 4}, {0, 1, 2, 4, 5}} {
		var ks, vs [][]float64
		for _, r := range seen {
			ks = append(ks, keys[r])
			vs = append(vs, values[r])
		}
		want := refAttention(q[i*nHeads*headDim:], ks, vs, nHeads, nKVHeads, headDim)
		if d := maxDiff(out[i*nHeads*headDim:], want); d > 2e-3 {
			t.Errorf("tree query %d: max diff %g", i, d)
		}
	}

	// A stale tree is refused and changes nothing; the right one keeps the
	// branch of token 2 and drops token 0.
	stale := tree
	stale.Cells = []uint32{cells[2], cells[1], cells[0]} // positions 3 and 4 swapped
	if err := c.TreeAccept(stale, []int32{2}); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("TreeAccept of a stale tree: %v", err)
	}
	if info, _ := c.Info(); info.Used != 6 {
		t.Fatalf("used %d after a refused TreeAccept", info.Used)
	}
	must(t, c.TreeAccept(tree, []int32{2}))
	if info, _ := c.Info(); info.Used != 5 {
		t.Fatalf("used %d after TreeAccept", info.Used)
	}
	if p, _ := c.SeqPosMax(0); p != 4 {
		t.Fatalf("SeqPosMax after TreeAccept = %d", p)
	}
}

// Handles are pointer-typed values that Go keeps in its heap (unsafe.Pointer
// fields): the collector must never take one for a pointer of its own. kvrt
// gives out addresses in space it reserved and never maps, so collections
// with many live and many destroyed handles pass, and every live handle
// still works afterwards.
func TestHandlesAndTheCollector(t *testing.T) {
	ctx := newContext(t)
	var live []*kvrt.Buffer
	for round := 0; round < 20; round++ {
		var batch []*kvrt.Buffer
		for i := 0; i < 100; i++ {
			b, err := ctx.NewBuffer(kvrt.BufferOptions{Size: 64})
			must(t, err)
			batch = append(batch, b)
		}
		for _, b := range batch[:90] {
			must(t, b.Close())
		}
		live = append(live, batch[90:]...)
		runtime.GC()
	}
	word := []byte{1, 2, 3, 4}
	for i, b := range live {
		word[0] = byte(i)
		must(t, b.Upload(0, word))
		got := make([]byte, 4)
		must(t, b.Download(0, got))
		if got[0] != byte(i) || got[3] != 4 {
			t.Fatalf("buffer %d reads %v", i, got)
		}
		must(t, b.Close())
	}
	runtime.GC()
}

package kvrt_test

import (
	"errors"
	"math"
	"testing"

	kvrt "github.com/kvrt/kvrt/bindings/go"
)

// The window group drops the windowed layer's rows that no later query sees,
// keeps the first NKeep positions, and refuses what would need dropped rows.
func TestWindowGroup(t *testing.T) {
	ctx := newContext(t)
	const window, nKeep, n = 16, 2, 100
	opts := smallCache()
	opts.Capacity = 128
	opts.MaxSeqs = 1
	opts.LayerWindows = []uint32{0, window}
	opts.WindowGroup = &kvrt.WindowGroupOptions{NKeep: nKeep}
	c := newCache(t, ctx, opts)
	cells := make([]uint32, 0, n)
	for pos := 0; pos < n; pos++ {
		cells = append(cells, storeTokens(t, c, nil, 0, pos, 1)...)
	}
	// The last batch dropped the positions <= 99 - 16 = 83 from n_keep on.
	wmin, err := c.SeqWindowPosMin(0)
	must(t, err)
	pmin, err := c.SeqPosMin(0)
	must(t, err)
	if wmin != n-window || pmin != 0 {
		t.Fatalf("SeqWindowPosMin %d (want %d), SeqPosMin %d (want 0)", wmin, n-window, pmin)
	}

	// Position 50: layer 0 still holds it, the windowed layer 1 dropped it;
	// positions below NKeep and inside the window stay readable in both.
	k := make([]float32, nKVHeads*headDim)
	v := make([]float32, nKVHeads*headDim)
	must(t, c.Read(0, cells[50:51], k, v))
	if want := rows(50, 1, nKVHeads, headDim, keyOf); k[1] != want[1] {
		t.Fatalf("layer 0, position 50: K %v, want %v", k[1], want[1])
	}
	if err := c.Read(1, cells[50:51], k, v); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("reading a dropped row of the windowed layer: %v", err)
	}
	for _, pos := range []int{0, nKeep - 1, n - window, n - 1} {
		if err := c.Read(1, cells[pos:pos+1], k, v); err != nil {
			t.Fatalf("reading position %d of the windowed layer: %v", pos, err)
		}
		if want := rows(pos, 1, nKVHeads, headDim, valueOf); v[3] != want[3] {
			t.Fatalf("layer 1, position %d: V %v, want %v", pos, v[3], want[3])
		}
	}

	// Going on at 90 needs rows from 75 on, which were dropped (90 < 84 + 15).
	must(t, c.SeqRm(0, 90, -1))
	before, _ := c.Info()
	kk, vv := rows(90, 1, nKVHeads, headDim, keyOf), rows(90, 1, nKVHeads, headDim, valueOf)
	_, err = c.Store(nil, kvrt.SeqBatch(0, 90, 1), kvrt.AllLayers, kvrt.HostF32(append(kk, kk...)),
		kvrt.HostF32(append(vv, vv...)))
	if !errors.Is(err, kvrt.ErrInvalidState) {
		t.Fatalf("storing position 90 over dropped rows: %v", err)
	}
	if after, _ := c.Info(); after.Used != before.Used || before.Used != 90 {
		t.Fatalf("used %d before the failed store, %d after", before.Used, after.Used)
	}

	// A state keeps exactly what the group holds: loaded back, the window
	// still starts at 84.
	state, err := c.StateSave(-1)
	if err != nil {
		t.Fatalf("StateSave with a window group: %v", err)
	}
	if err := c.StateLoad(-1, state); err != nil {
		t.Fatalf("StateLoad with a window group: %v", err)
	}
	if p, err := c.SeqWindowPosMin(0); err != nil || p != 84 {
		t.Fatalf("SeqWindowPosMin after a load: %d, %v", p, err)
	}

	// Without a window group, SeqWindowPosMin is SeqPosMin.
	plain := newCache(t, ctx, smallCache())
	storeTokens(t, plain, nil, 0, 3, 5)
	if p, err := plain.SeqWindowPosMin(0); err != nil || p != 3 {
		t.Fatalf("SeqWindowPosMin without a window group: %d, %v", p, err)
	}
}

// A window group needs a windowed layer.
func TestWindowGroupWithoutWindows(t *testing.T) {
	ctx := newContext(t)
	opts := smallCache()
	opts.WindowGroup = &kvrt.WindowGroupOptions{}
	if _, err := ctx.NewCache(opts); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("no LayerWindows: %v", err)
	}
	opts.LayerWindows = []uint32{0, 0}
	if _, err := ctx.NewCache(opts); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("LayerWindows all 0: %v", err)
	}
}

// The group makes the windowed layers' memory follow the windows, not the
// capacity.
func TestWindowGroupMemory(t *testing.T) {
	ctx := newContext(t)
	opts := kvrt.CacheOptions{Layers: 4, Heads: nHeads, KVHeads: nKVHeads, HeadDimK: headDim,
		Capacity: 4096, MaxSeqs: 2, LayerWindows: []uint32{0, 64, 0, 64}}
	full, err := newCache(t, ctx, opts).Info()
	must(t, err)
	opts.WindowGroup = &kvrt.WindowGroupOptions{}
	grouped, err := newCache(t, ctx, opts).Info()
	must(t, err)
	t.Logf("device bytes: %d without the group, %d with it", full.DeviceBytes, grouped.DeviceBytes)
	if grouped.DeviceBytes >= full.DeviceBytes {
		t.Fatalf("device bytes with the group %d, without %d", grouped.DeviceBytes, full.DeviceBytes)
	}
}

// pagedWindowRow is the K (kv 0) or V (kv 1) row of the token id at pos in
// layer: a function of the five.
func pagedWindowRow(id, pos, layer, kv int) []float32 {
	out := make([]float32, nKVHeads*headDim)
	for e := range out {
		out[e] = float32(math.Sin(0.37*float64(id) + 1.3*float64(pos) + 2.1*float64(layer) + 0.71*float64(e) + 0.5*float64(kv)))
	}
	return out
}

// pagedWindowWrite writes the rows of tokens ids at positions to cells, every
// layer.
func pagedWindowWrite(t *testing.T, c *kvrt.Cache, cells []uint32, ids, positions []int32) {
	t.Helper()
	if len(cells) != len(ids) {
		t.Fatalf("%d cells for %d tokens", len(cells), len(ids))
	}
	for l := 0; l < int(c.Layers()); l++ {
		var k, v []float32
		for i := range ids {
			k = append(k, pagedWindowRow(int(ids[i]), int(positions[i]), l, 0)...)
			v = append(v, pagedWindowRow(int(ids[i]), int(positions[i]), l, 1)...)
		}
		must(t, c.Write(nil, cells, int32(l), kvrt.HostF32(k), kvrt.HostF32(v)))
	}
}

// pagedWindowRun admits a 40-token prompt into sequence 0, forks it into 1,
// appends positions 40..44 to 1 one at a time, admits the prompt plus one
// token into 2, and returns n_cached of that admit and the attention of
// sequences 0, 1 and 2 at their next positions (40, 45, 41) in every layer.
func pagedWindowRun(t *testing.T, c *kvrt.Cache) (uint32, [][]float32) {
	t.Helper()
	const n = 40
	ids, pos := make([]int32, n+1), make([]int32, n+1)
	for i := range ids {
		ids[i], pos[i] = int32(1000+i), int32(i)
	}
	n0, cells0, err := c.PagedAdmit(0, ids[:n], pos[:n], 0)
	must(t, err)
	if n0 != 0 {
		t.Fatalf("first admit: %d cached", n0)
	}
	pagedWindowWrite(t, c, cells0[n0:], ids[n0:n], pos[n0:n])

	must(t, c.PagedFork(0, 1))
	for p := int32(n); p < n+5; p++ {
		id, at := []int32{2000 + p}, []int32{p}
		cells, err := c.PagedAppend(nil, 1, id, at)
		must(t, err)
		pagedWindowWrite(t, c, cells, id, at)
	}

	n2, cells2, err := c.PagedAdmit(2, ids, pos, 0)
	must(t, err)
	pagedWindowWrite(t, c, cells2[n2:], ids[n2:], pos[n2:])

	var outs [][]float32
	for _, sp := range []struct{ seq, next int32 }{{0, n}, {1, n + 5}, {2, n + 1}} {
		for l := 0; l < int(c.Layers()); l++ {
			q := make([]float32, nHeads*headDim)
			for i := range q {
				q[i] = float32(math.Cos(0.9*float64(sp.seq) + 1.7*float64(l) + 0.43*float64(i)))
			}
			out := make([]float32, nHeads*headDim)
			if err := c.Attention(nil, int32(l), kvrt.SeqBatch(sp.seq, sp.next, 1), kvrt.HostF32(q), kvrt.Output{F32: out}, nil); err != nil {
				t.Fatalf("attention of sequence %d at %d, layer %d: %v", sp.seq, sp.next, l, err)
			}
			outs = append(outs, out)
		}
	}
	return n2, outs
}

// A window group on a paged cache: prefix sharing, a fork and appends give
// the same attention as the plain paged cache, in less device memory.
func TestPagedWindowGroup(t *testing.T) {
	ctx := newContext(t)
	windows := []uint32{8, 0, 12}
	opts := kvrt.CacheOptions{Layers: uint32(len(windows)), Heads: nHeads, KVHeads: nKVHeads, HeadDimK: headDim,
		Capacity: 64 * pagedBlock, MaxSeqs: 4, LayerWindows: windows, Layout: kvrt.LayoutPaged,
		Paged: &kvrt.PagedLayout{BlockSize: pagedBlock}}
	plain := newCache(t, ctx, opts)
	opts.WindowGroup = &kvrt.WindowGroupOptions{NKeep: 2}
	grouped := newCache(t, ctx, opts)

	nGrouped, outGrouped := pagedWindowRun(t, grouped)
	nPlain, outPlain := pagedWindowRun(t, plain)
	// Sequence 0 still holds every row of the prompt: its two full blocks map.
	if nGrouped != 32 || nPlain != 32 {
		t.Fatalf("n_cached of the second admit: %d with the group, %d without (want 32)", nGrouped, nPlain)
	}

	for i := range outPlain {
		seq, layer := i/len(windows), i%len(windows)
		want := make([]float64, len(outPlain[i]))
		var errSum, norm float64
		for j, x := range outPlain[i] {
			want[j] = float64(x)
			d := float64(outGrouped[i][j]) - float64(x)
			errSum += d * d
			norm += float64(x) * float64(x)
		}
		if d, nmse := maxDiff(outGrouped[i], want), errSum/norm; d > 1e-5 || nmse > 1e-10 {
			t.Fatalf("sequence %d, layer %d: max abs diff %g, NMSE %g", seq, layer, d, nmse)
		}
	}

	gi, err := grouped.Info()
	must(t, err)
	pi, err := plain.Info()
	must(t, err)
	if gi.DeviceBytes >= pi.DeviceBytes {
		t.Fatalf("device bytes with the group %d, without %d", gi.DeviceBytes, pi.DeviceBytes)
	}

	// Appending position 44 dropped positions 2..32 (44 - 12) of sequence 1.
	wmin, err := grouped.SeqWindowPosMin(1)
	must(t, err)
	if wmin != 33 {
		t.Fatalf("SeqWindowPosMin(1) %d, want 33", wmin)
	}
}

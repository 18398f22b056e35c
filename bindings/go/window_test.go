package kvrt_test

import (
	"errors"
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

	if _, err := c.StateSave(0); !errors.Is(err, kvrt.ErrUnsupported) {
		t.Fatalf("StateSave with a window group: %v", err)
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

package kvrt_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	kvrt "github.com/kvrt/kvrt/bindings/go"
)

const pagedBlock = 16

func pagedCache() kvrt.CacheOptions {
	o := smallCache()
	o.Capacity = 8 * pagedBlock
	o.Paged = &kvrt.PagedLayout{BlockSize: pagedBlock}
	return o
}

// prompt returns the ids and positions of tokens first..first+n-1.
func prompt(first, n int) (ids, pos []int32) {
	for t := first; t < first+n; t++ {
		ids = append(ids, int32(100+t))
		pos = append(pos, int32(t))
	}
	return ids, pos
}

// writeTokens writes the rows of tokens first.. (every layer, layer l's rows
// being those of token + 1000*l) into cells.
func writeTokens(t *testing.T, c *kvrt.Cache, s *kvrt.Stream, cells []uint32, first int) {
	t.Helper()
	n := len(cells)
	var k, v []float32
	for l := 0; l < int(c.Layers()); l++ {
		k = append(k, rows(first+1000*l, n, nKVHeads, headDim, keyOf)...)
		v = append(v, rows(first+1000*l, n, nKVHeads, headDim, valueOf)...)
	}
	must(t, c.Write(s, cells, kvrt.AllLayers, kvrt.HostF32(k), kvrt.HostF32(v)))
}

// readLayers reads K and V of cells in every layer.
func readLayers(t *testing.T, c *kvrt.Cache, cells []uint32) (k, v []float32) {
	t.Helper()
	for l := 0; l < int(c.Layers()); l++ {
		kl := make([]float32, len(cells)*nKVHeads*headDim)
		vl := make([]float32, len(cells)*nKVHeads*headDim)
		must(t, c.Read(int32(l), cells, kl, vl))
		k, v = append(k, kl...), append(v, vl...)
	}
	return k, v
}

func checkStats(t *testing.T, c *kvrt.Cache) kvrt.PagedStats {
	t.Helper()
	st, err := c.PagedStats()
	must(t, err)
	if st.BlockSize != pagedBlock || st.NBlocks != 8 || st.FreeBlocks+st.CachedBlocks+st.UsedBlocks != st.NBlocks {
		t.Fatalf("stats %+v", st)
	}
	return st
}

// Prefix sharing, forks and copy-on-write, with the rows checked.
func TestPagedSharing(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, pagedCache())
	ids, pos := prompt(0, 40)
	const salt = 7

	n0, cells0, err := c.PagedAdmit(0, ids, pos, salt)
	must(t, err)
	if n0 != 0 || len(cells0) != 40 {
		t.Fatalf("first admit: %d cached, %d cells", n0, len(cells0))
	}
	writeTokens(t, c, nil, cells0, 0)
	got, err := c.PagedCells(0)
	must(t, err)
	if !slices.Equal(got, cells0) {
		t.Fatalf("PagedCells(0) %v, admit gave %v", got, cells0)
	}

	// The same prompt: its two full blocks are mapped, the partial one is not.
	n1, cells1, err := c.PagedAdmit(1, ids, pos, salt)
	must(t, err)
	if n1 != 2*pagedBlock || !slices.Equal(cells1[:32], cells0[:32]) || cells1[32] == cells0[32] {
		t.Fatalf("second admit: %d cached, cells %v vs %v", n1, cells1, cells0)
	}
	writeTokens(t, c, nil, cells1[n1:], int(n1))
	before := checkStats(t, c)
	if before.SharedBlocks != 2 || before.UsedBlocks != 4 || before.RegisteredBlocks != 2 {
		t.Fatalf("stats after the second admit %+v", before)
	}

	// Another salt, or sharing off, maps nothing.
	n3, _, err := c.PagedAdmit(3, ids, pos, salt+1)
	must(t, err)
	if n3 != 0 {
		t.Fatalf("admit under another salt: %d cached", n3)
	}
	must(t, c.SeqRm(3, -1, -1))
	must(t, c.PagedSetSharing(3, false))
	n3, _, err = c.PagedAdmit(3, ids, pos, salt)
	must(t, err)
	if n3 != 0 {
		t.Fatalf("admit with sharing off: %d cached", n3)
	}
	must(t, c.SeqRm(3, -1, -1))
	must(t, c.PagedSetSharing(3, true))

	// A fork shares every block, the partial last one too.
	must(t, c.PagedFork(0, 2))
	forked := checkStats(t, c)
	if forked.SharedBlocks <= before.SharedBlocks {
		t.Fatalf("shared blocks %d after the fork, %d before", forked.SharedBlocks, before.SharedBlocks)
	}
	cells2, err := c.PagedCells(2)
	must(t, err)
	if !slices.Equal(cells2, cells0) {
		t.Fatalf("fork's cells %v, source's %v", cells2, cells0)
	}

	// Appending to the fork copies its partly filled last block.
	aid, apos := prompt(40, 1)
	added, err := c.PagedAppend(nil, 2, aid, apos)
	must(t, err)
	writeTokens(t, c, nil, added, 40)
	cells2, err = c.PagedCells(2)
	must(t, err)
	if len(cells2) != 41 || cells2[40] != added[0] || !slices.Equal(cells2[:32], cells0[:32]) {
		t.Fatalf("fork's cells after the append %v (appended %v)", cells2, added)
	}
	for i := 32; i < 40; i++ {
		if cells2[i] == cells0[i] || cells2[i]/pagedBlock != cells2[40]/pagedBlock {
			t.Fatalf("token %d of the fork in cell %d, source's in %d, appended in %d", i, cells2[i], cells0[i], cells2[40])
		}
	}
	if got, err := c.PagedCells(0); err != nil || !slices.Equal(got, cells0) {
		t.Fatalf("source's cells after the fork's append: %v, %v", got, err)
	}

	// The copy holds the source's rows, every layer, K and V.
	k0, v0 := readLayers(t, c, cells0)
	k2, v2 := readLayers(t, c, cells2[:40])
	if !slices.Equal(k0, k2) || !slices.Equal(v0, v2) {
		t.Fatal("the fork's rows differ from the source's")
	}
	var wantK []float32
	for l := 0; l < 2; l++ {
		wantK = append(wantK, rows(1000*l, 40, nKVHeads, headDim, keyOf)...)
	}
	if !slices.Equal(k0, wantK) {
		t.Fatal("the source's K differs from what was written")
	}

	// Attention of both sequences at position 39 sees the same tokens.
	q := rows(0, 1, nHeads, headDim, queryOf)
	o0, o2 := make([]float32, nHeads*headDim), make([]float32, nHeads*headDim)
	must(t, c.Attention(nil, 1, kvrt.SeqBatch(0, 39, 1), kvrt.HostF32(q), kvrt.Output{F32: o0}, nil))
	must(t, c.Attention(nil, 1, kvrt.SeqBatch(2, 39, 1), kvrt.HostF32(q), kvrt.Output{F32: o2}, nil))
	want := make([]float64, len(o0))
	for i, x := range o0 {
		want[i] = float64(x)
	}
	if d := maxDiff(o2, want); d > 1e-5 {
		t.Fatalf("attention of the fork differs from the source's by %g", d)
	}

	// A copy-on-write recorded into a stream, ids unknown.
	must(t, c.PagedFork(0, 3))
	s, err := ctx.NewStream(kvrt.StreamOptions{})
	must(t, err)
	defer s.Close()
	must(t, s.Begin())
	added, err = c.PagedAppend(s, 3, nil, apos)
	must(t, err)
	writeTokens(t, c, s, added, 40)
	must(t, s.Submit())
	must(t, s.Wait(time.Minute))
	cells3, err := c.PagedCells(3)
	must(t, err)
	if cells3[32] == cells0[32] {
		t.Fatalf("no copy-on-write through the stream: %v", cells3)
	}
	k3, _ := readLayers(t, c, cells3[:40])
	if !slices.Equal(k3, k0) {
		t.Fatal("the copy recorded into the stream differs from the source")
	}

	// Clearing the registry: nothing is mapped any more.
	must(t, c.SeqRm(1, -1, -1))
	must(t, c.PagedClearRegistry())
	if st := checkStats(t, c); st.RegisteredBlocks != 0 {
		t.Fatalf("stats after PagedClearRegistry %+v", st)
	}
	n1, _, err = c.PagedAdmit(1, ids, pos, salt)
	must(t, err)
	if n1 != 0 {
		t.Fatalf("admit after PagedClearRegistry: %d cached", n1)
	}
}

func TestPagedErrors(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, pagedCache())
	ids, pos := prompt(0, 3)
	if _, _, err := c.PagedAdmit(0, ids, pos[:2], 0); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("admit with 3 ids and 2 positions: %v", err)
	}
	if _, err := c.PagedAppend(nil, 0, ids[:1], pos); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("append with 1 id and 3 positions: %v", err)
	}
	_, _, err := c.PagedAdmit(0, ids, pos, 0)
	must(t, err)
	if _, _, err := c.PagedAdmit(0, ids, pos, 0); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("admit into a non-empty sequence: %v", err)
	}
	if _, _, err := c.PagedAdmit(1, []int32{-1}, []int32{0}, 0); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("admit of a negative id: %v", err)
	}
	if err := c.PagedFork(0, 0); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("fork into itself: %v", err)
	}
	if _, err := c.PagedCells(99); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("cells of a sequence out of range: %v", err)
	}
	if cells, err := c.PagedCells(1); err != nil || cells == nil || len(cells) != 0 {
		t.Fatalf("cells of an empty sequence: %v, %v", cells, err)
	}
	if _, _, err := c.PagedAdmit(1, make([]int32, 9*pagedBlock), make([]int32, 9*pagedBlock), 0); !errors.Is(err, kvrt.ErrCacheFull) {
		t.Fatalf("admit of more than the cache holds: %v", err)
	}
	if err := c.SeqDiv(0, 0, -1, 2); !errors.Is(err, kvrt.ErrUnsupported) {
		t.Fatalf("SeqDiv on a paged cache: %v", err)
	}

	// The Paged* methods on a cell cache.
	cellCache := newCache(t, ctx, smallCache())
	if _, _, err := cellCache.PagedAdmit(0, ids, pos, 0); !errors.Is(err, kvrt.ErrUnsupported) {
		t.Fatalf("PagedAdmit on a cell cache: %v", err)
	}
	if _, err := cellCache.PagedAppend(nil, 0, nil, pos); !errors.Is(err, kvrt.ErrUnsupported) {
		t.Fatalf("PagedAppend on a cell cache: %v", err)
	}
	for name, err := range map[string]error{
		"PagedFork":          cellCache.PagedFork(0, 1),
		"PagedSetSharing":    cellCache.PagedSetSharing(0, false),
		"PagedClearRegistry": cellCache.PagedClearRegistry(),
	} {
		if !errors.Is(err, kvrt.ErrUnsupported) {
			t.Fatalf("%s on a cell cache: %v", name, err)
		}
	}
	if _, err := cellCache.PagedCells(0); !errors.Is(err, kvrt.ErrUnsupported) {
		t.Fatalf("PagedCells on a cell cache: %v", err)
	}
	if _, err := cellCache.PagedStats(); !errors.Is(err, kvrt.ErrUnsupported) {
		t.Fatalf("PagedStats on a cell cache: %v", err)
	}

	// Closed caches.
	must(t, c.Close())
	if _, err := c.PagedStats(); !errors.Is(err, kvrt.ErrInvalidHandle) {
		t.Fatalf("PagedStats after Close: %v", err)
	}
}

// The layout follows Paged as it follows Static; contradictions are refused.
func TestPagedLayoutOptions(t *testing.T) {
	ctx := newContext(t)
	o := smallCache()
	o.Layout = kvrt.LayoutPaged // no PagedLayout: blocks of 16
	c := newCache(t, ctx, o)
	st, err := c.PagedStats()
	must(t, err)
	if st.BlockSize != 16 || st.NBlocks != o.Capacity/16 || st.FreeBlocks != st.NBlocks {
		t.Fatalf("stats %+v", st)
	}
	o = smallCache()
	o.Paged = &kvrt.PagedLayout{BlockSize: 32}
	c = newCache(t, ctx, o)
	if st, err := c.PagedStats(); err != nil || st.BlockSize != 32 || st.NBlocks != 2 {
		t.Fatalf("block size 32: %+v, %v", st, err)
	}
	for name, bad := range map[string]kvrt.CacheOptions{
		"cell layout with Paged": func() kvrt.CacheOptions {
			o := pagedCache()
			o.Layout = kvrt.LayoutCells
			return o
		}(),
		"Static and Paged": func() kvrt.CacheOptions {
			o := pagedCache()
			o.Capacity = 0
			o.Static = &kvrt.StaticLayout{SeqLen: 4}
			return o
		}(),
		"block size 24": func() kvrt.CacheOptions {
			o := pagedCache()
			o.Paged.BlockSize = 24
			return o
		}(),
		"capacity not a multiple of the block size": func() kvrt.CacheOptions {
			o := pagedCache()
			o.Capacity = 40
			return o
		}(),
	} {
		if _, err := ctx.NewCache(bad); !errors.Is(err, kvrt.ErrInvalidArgument) {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := ctx.EstimateCache(bad); !errors.Is(err, kvrt.ErrInvalidArgument) {
			t.Fatalf("EstimateCache, %s: %v", name, err)
		}
	}
}

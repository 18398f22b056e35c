package kvrt_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	kvrt "github.com/kvrt/kvrt/bindings/go"
)

// rawRows reads the stored bytes of K and V of cells in every layer.
func rawRows(t *testing.T, c *kvrt.Cache, cells []uint32) []byte {
	t.Helper()
	info, err := c.Info()
	must(t, err)
	var out []byte
	for l := 0; l < int(c.Layers()); l++ {
		k := make([]byte, uint64(len(cells))*info.KRowBytes)
		v := make([]byte, uint64(len(cells))*info.VRowBytes)
		must(t, c.ReadRaw(int32(l), kvrt.ArrayK, cells, k))
		must(t, c.ReadRaw(int32(l), kvrt.ArrayV, cells, v))
		out = append(append(out, k...), v...)
	}
	return out
}

// seqRange returns the smallest and largest position of seq.
func seqRange(t *testing.T, c *kvrt.Cache, seq int32) (int32, int32) {
	t.Helper()
	lo, err := c.SeqPosMin(seq)
	must(t, err)
	hi, err := c.SeqPosMax(seq)
	must(t, err)
	return lo, hi
}

// lowestFree returns the n lowest cells of 0..capacity-1 not in used.
func lowestFree(capacity uint32, n int, used ...[]uint32) []uint32 {
	var out []uint32
	for cell := uint32(0); cell < capacity && len(out) < n; cell++ {
		taken := false
		for _, u := range used {
			taken = taken || slices.Contains(u, cell)
		}
		if !taken {
			out = append(out, cell)
		}
	}
	return out
}

func used(t *testing.T, c *kvrt.Cache) uint32 {
	t.Helper()
	info, err := c.Info()
	must(t, err)
	return info.Used
}

// Sequence and whole-cache states of a cell cache, in memory and in files.
func TestStateCells(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, smallCache())
	cells0 := storeTokens(t, c, nil, 0, 0, 5)
	cells1 := storeTokens(t, c, nil, 1, 10, 3)
	rows0 := rawRows(t, c, cells0)

	// Sequence 0 loaded into sequence 2: its saved cells are taken, so it
	// goes to the lowest free ones.
	st0, err := c.StateSave(0)
	must(t, err)
	if len(st0) == 0 {
		t.Fatal("empty sequence state")
	}
	must(t, c.StateLoad(2, st0))
	cells2 := lowestFree(64, 5, cells0, cells1)
	if got := rawRows(t, c, cells2); !bytes.Equal(got, rows0) {
		t.Fatal("rows of the loaded sequence differ from the saved sequence's")
	}
	if lo, hi := seqRange(t, c, 2); lo != 0 || hi != 4 {
		t.Fatalf("loaded sequence spans positions %d..%d", lo, hi)
	}
	if n := used(t, c); n != 13 {
		t.Fatalf("%d cells used after the load, want 13", n)
	}
	// Attention of the copy equals the source's.
	q := rows(0, 1, nHeads, headDim, queryOf)
	if a0, a2 := attend(t, c, 1, 0, 4, q, nil), attend(t, c, 1, 2, 4, q, nil); !slices.Equal(a0, a2) {
		t.Fatalf("attention of the loaded sequence %v, of the source %v", a2, a0)
	}
	// Saving again gives the same state: the saved cells and sequence ids
	// are those of sequence 0 again.
	if again, err := c.StateSave(0); err != nil || !bytes.Equal(again, st0) {
		t.Fatalf("a second save of sequence 0 differs (%v)", err)
	}

	// The whole cache into a fresh cache: the same cells, rows and positions.
	all, err := c.StateSave(kvrt.WholeCache)
	must(t, err)
	fresh := newCache(t, ctx, smallCache())
	must(t, fresh.StateLoad(kvrt.WholeCache, all))
	every := slices.Concat(cells0, cells1, cells2)
	want := rawRows(t, c, every)
	if !bytes.Equal(rawRows(t, fresh, every), want) {
		t.Fatal("rows of the loaded whole-cache state differ")
	}
	if n := used(t, fresh); n != 13 {
		t.Fatalf("%d cells used after the whole-cache load, want 13", n)
	}
	for seq := int32(0); seq < 3; seq++ {
		lo, hi := seqRange(t, c, seq)
		if flo, fhi := seqRange(t, fresh, seq); flo != lo || fhi != hi {
			t.Fatalf("sequence %d spans %d..%d after the load, %d..%d before", seq, flo, fhi, lo, hi)
		}
	}

	// Files: the whole cache and one sequence, each the bytes of StateSave.
	dir := t.TempDir()
	allPath, seqPath := filepath.Join(dir, "all.kvrt"), filepath.Join(dir, "seq1.kvrt")
	must(t, c.StateSaveFile(kvrt.WholeCache, allPath))
	must(t, c.StateSaveFile(1, seqPath))
	if b, err := os.ReadFile(allPath); err != nil || !bytes.Equal(b, all) {
		t.Fatalf("the whole-cache file differs from StateSave's bytes (%v)", err)
	}
	fromFile := newCache(t, ctx, smallCache())
	must(t, fromFile.StateLoadFile(kvrt.WholeCache, allPath))
	if !bytes.Equal(rawRows(t, fromFile, every), want) {
		t.Fatal("rows of the whole-cache state loaded from the file differ")
	}
	// Sequence 1's saved cells are free in an emptied cache: it returns to them.
	must(t, fresh.Clear())
	must(t, fresh.StateLoadFile(3, seqPath))
	if !bytes.Equal(rawRows(t, fresh, cells1), rawRows(t, c, cells1)) {
		t.Fatal("rows of the sequence loaded from the file differ")
	}
	if lo, hi := seqRange(t, fresh, 3); lo != 10 || hi != 12 {
		t.Fatalf("sequence loaded from the file spans %d..%d", lo, hi)
	}
}

// Host swap in a cell cache: the sequence returns to its cells, and
// attention gives the same outputs, bit for bit.
func TestSwapCells(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, smallCache())
	storeTokens(t, c, nil, 0, 0, 4)
	cells1 := storeTokens(t, c, nil, 1, 0, 6)
	q := rows(3, 1, nHeads, headDim, queryOf)
	before := attend(t, c, 0, 1, 5, q, nil)
	rows1 := rawRows(t, c, cells1)

	data, err := c.SeqSwapOut(1)
	must(t, err)
	if _, hi := seqRange(t, c, 1); hi != -1 || used(t, c) != 4 {
		t.Fatalf("after the swap out: largest position %d, %d cells used", hi, used(t, c))
	}
	must(t, c.SeqSwapIn(1, data))
	if used(t, c) != 10 || !bytes.Equal(rawRows(t, c, cells1), rows1) {
		t.Fatal("the swapped-in sequence is not back in its cells")
	}
	if after := attend(t, c, 0, 1, 5, q, nil); !slices.Equal(after, before) {
		t.Fatalf("attention after the swap %v, before %v", after, before)
	}

	// Through a file.
	path := filepath.Join(t.TempDir(), "swap.kvrt")
	must(t, c.SeqSwapOutFile(1, path))
	if _, hi := seqRange(t, c, 1); hi != -1 {
		t.Fatal("the sequence stayed after SeqSwapOutFile")
	}
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("the swap file differs from SeqSwapOut's bytes (%v)", err)
	}
	must(t, c.SeqSwapInFile(1, path))
	if after := attend(t, c, 0, 1, 5, q, nil); !slices.Equal(after, before) {
		t.Fatalf("attention after the swap through a file %v, before %v", after, before)
	}
}

// States of a paged cache: swap of a fork, and a whole-cache load that keeps
// the sharing.
func TestStatePaged(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, pagedCache())
	ids, pos := prompt(0, 40)
	_, cells0, err := c.PagedAdmit(0, ids, pos, 7)
	must(t, err)
	writeTokens(t, c, nil, cells0, 0)
	must(t, c.PagedFork(0, 1))
	aid, apos := prompt(40, 1)
	added, err := c.PagedAppend(nil, 1, aid, apos)
	must(t, err)
	writeTokens(t, c, nil, added, 40)
	cells1, err := c.PagedCells(1)
	must(t, err)
	rows0, rows1 := rawRows(t, c, cells0), rawRows(t, c, cells1)
	shared := checkStats(t, c)
	if shared.UsedBlocks != 4 || shared.SharedBlocks != 2 {
		t.Fatalf("stats after the fork's append %+v", shared)
	}

	// The whole cache into a new paged cache keeps the block counts.
	all, err := c.StateSave(kvrt.WholeCache)
	must(t, err)
	copied := newCache(t, ctx, pagedCache())
	must(t, copied.StateLoad(kvrt.WholeCache, all))
	if st := checkStats(t, copied); st.UsedBlocks != shared.UsedBlocks || st.SharedBlocks != shared.SharedBlocks {
		t.Fatalf("stats after the whole-cache load %+v, before %+v", st, shared)
	}
	for seq, want := range map[int32][]byte{0: rows0, 1: rows1} {
		cells, err := copied.PagedCells(seq)
		must(t, err)
		if !bytes.Equal(rawRows(t, copied, cells), want) {
			t.Fatalf("rows of sequence %d differ after the whole-cache load", seq)
		}
	}

	// Swapping the fork out frees its own block.
	data, err := c.SeqSwapOut(1)
	must(t, err)
	if cells, err := c.PagedCells(1); err != nil || len(cells) != 0 {
		t.Fatalf("cells of the swapped-out sequence: %v, %v", cells, err)
	}
	if st := checkStats(t, c); st.UsedBlocks >= shared.UsedBlocks || st.SharedBlocks != 0 {
		t.Fatalf("stats after the swap out %+v, before %+v", st, shared)
	}
	if got := rawRows(t, c, cells0); !bytes.Equal(got, rows0) {
		t.Fatal("the swap out changed the rows of sequence 0")
	}

	// Back in: the same rows in append order, in blocks of its own.
	must(t, c.SeqSwapIn(1, data))
	back, err := c.PagedCells(1)
	must(t, err)
	if len(back) != len(cells1) || !bytes.Equal(rawRows(t, c, back), rows1) {
		t.Fatalf("the swapped-in sequence has %d cells, %d before, or other rows", len(back), len(cells1))
	}
	if lo, hi := seqRange(t, c, 1); lo != 0 || hi != 40 {
		t.Fatalf("swapped-in sequence spans %d..%d", lo, hi)
	}
	if st := checkStats(t, c); st.UsedBlocks != 6 {
		t.Fatalf("stats after the swap in %+v", st)
	}
}

func TestStateErrors(t *testing.T) {
	ctx := newContext(t)
	c := newCache(t, ctx, smallCache())
	storeTokens(t, c, nil, 0, 0, 5)
	storeTokens(t, c, nil, 1, 0, 2)
	st, err := c.StateSave(0)
	must(t, err)
	all, err := c.StateSave(kvrt.WholeCache)
	must(t, err)

	// Malformed bytes, and nothing loaded.
	flipped := slices.Clone(st)
	flipped[len(flipped)/2] ^= 1
	for name, data := range map[string][]byte{
		"truncated":     st[:len(st)-1],
		"header only":   st[:8],
		"empty":         nil,
		"trailing byte": append(slices.Clone(st), 0),
		"bit flip":      flipped,
	} {
		if err := c.StateLoad(2, data); !errors.Is(err, kvrt.ErrCorruptState) {
			t.Fatalf("load of a %s state: %v", name, err)
		}
		if err := c.SeqSwapIn(2, data); !errors.Is(err, kvrt.ErrCorruptState) {
			t.Fatalf("swap in of a %s state: %v", name, err)
		}
	}
	if _, hi := seqRange(t, c, 2); hi != -1 || used(t, c) != 7 {
		t.Fatal("a failed load changed the cache")
	}

	// Arguments.
	if err := c.SeqSwapIn(1, st); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("swap into a sequence that holds tokens: %v", err)
	}
	if _, err := c.SeqSwapOut(kvrt.WholeCache); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("swap out of the whole cache: %v", err)
	}
	if _, err := c.StateSave(99); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("save of a sequence out of range: %v", err)
	}
	if err := c.StateLoad(kvrt.WholeCache, st); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("sequence state loaded as a whole cache: %v", err)
	}
	if err := c.StateLoad(2, all); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("whole-cache state loaded into a sequence: %v", err)
	}
	other := smallCache()
	other.Layers = 3
	if err := newCache(t, ctx, other).StateLoad(0, st); !errors.Is(err, kvrt.ErrInvalidArgument) {
		t.Fatalf("state loaded into a cache of another geometry: %v", err)
	}
	if _, hi := seqRange(t, c, 1); hi != 1 {
		t.Fatal("a failed swap in changed the sequence")
	}

	// Paths: NUL bytes are refused, missing files are I/O errors.
	dir := t.TempDir()
	nul := filepath.Join(dir, "a\x00b")
	for name, err := range map[string]error{
		"StateSaveFile":  c.StateSaveFile(0, nul),
		"StateLoadFile":  c.StateLoadFile(2, nul),
		"SeqSwapOutFile": c.SeqSwapOutFile(0, nul),
		"SeqSwapInFile":  c.SeqSwapInFile(2, nul),
		"empty path":     c.StateSaveFile(0, ""),
	} {
		if !errors.Is(err, kvrt.ErrInvalidArgument) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a path with a NUL byte wrote its prefix: %v", err)
	}
	missing := filepath.Join(dir, "missing.kvrt")
	if err := c.StateLoadFile(2, missing); !errors.Is(err, kvrt.ErrIO) {
		t.Fatalf("load of a missing file: %v", err)
	}
	if err := c.SeqSwapInFile(2, missing); !errors.Is(err, kvrt.ErrIO) {
		t.Fatalf("swap in of a missing file: %v", err)
	}
	if err := c.SeqSwapOutFile(0, filepath.Join(dir, "no", "such", "dir")); !errors.Is(err, kvrt.ErrIO) {
		t.Fatalf("swap out into a missing folder: %v", err)
	}
	if lo, hi := seqRange(t, c, 0); lo != 0 || hi != 4 {
		t.Fatal("a failed swap out removed the sequence")
	}
	truncated := filepath.Join(dir, "truncated.kvrt")
	must(t, os.WriteFile(truncated, st[:len(st)-3], 0o600))
	if err := c.StateLoadFile(2, truncated); !errors.Is(err, kvrt.ErrCorruptState) {
		t.Fatalf("load of a truncated file: %v", err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 1 {
		t.Fatalf("files left in the folder: %v, %v", entries, err)
	}

	// Closed caches.
	must(t, c.Close())
	if _, err := c.StateSave(0); !errors.Is(err, kvrt.ErrInvalidHandle) {
		t.Fatalf("StateSave after Close: %v", err)
	}
	if err := c.StateLoad(0, st); !errors.Is(err, kvrt.ErrInvalidHandle) {
		t.Fatalf("StateLoad after Close: %v", err)
	}
	if err := c.StateLoadFile(0, missing); !errors.Is(err, kvrt.ErrInvalidHandle) {
		t.Fatalf("StateLoadFile after Close: %v", err)
	}
}

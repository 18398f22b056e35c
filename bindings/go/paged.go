package kvrt

// #include "kvrt_go.h"
import "C"

// PagedAdmit starts the empty sequence seq with a prompt (kvrt_cache_paged_admit):
// token ids (>= 0) and positions, one each per token, under salt (what else
// decides K and V: model, adapter, RoPE parameters; prompts with different
// salts never share). With sharing on (the default) it maps the longest run
// of registered blocks matching the prompt's start, always leaving at least
// one token to compute. It returns nCached, how many leading tokens are
// cached (a multiple of the block size), and the cell of every token: write
// the rows of tokens nCached.. with Write (every layer); the others may be
// read. Metadata only: nothing is recorded on the device. It fails with an
// error matching ErrInvalidArgument when the slices differ in length, seq is
// out of range or not empty, or an id or position is negative, and with
// ErrCacheFull when free and cached blocks are too few; nothing changes then.
func (c *Cache) PagedAdmit(seq int32, tokenIDs, positions []int32, salt uint64) (nCached uint32, cells []uint32, err error) {
	const op = "kvrt_cache_paged_admit"
	if len(tokenIDs) != len(positions) {
		return 0, nil, argError(op, "%d token ids but %d positions", len(tokenIDs), len(positions))
	}
	n := len(positions)
	cells = make([]uint32, n)
	ip, pp, cp := slicePtr(tokenIDs), slicePtr(positions), slicePtr(cells)
	var nc C.uint32_t
	err = c.meta(op, func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_paged_admit(h, C.int32_t(seq), C.uint32_t(n), (*C.int32_t)(ip), (*C.int32_t)(pp),
			C.uint64_t(salt), &nc, (*C.uint32_t)(cp))
	})
	if err != nil {
		return 0, nil, err
	}
	return uint32(nc), cells, nil
}

// PagedAppend appends tokens to the end of seq (kvrt_cache_paged_append) and
// returns their cells; write their rows with Write. tokenIDs is nil when the
// ids are unknown (the blocks they fill are then never registered), else it
// has one id per position. If the sequence's last block is partly filled and
// shared, it is first copied to a new block (every layer, K and V), recorded
// into s, or done and waited for when s is nil; the sequence's earlier
// tokens in that block then lie in other cells (see PagedCells). It fails
// with an error matching ErrInvalidArgument when tokenIDs and positions
// differ in length, seq is out of range or an id or position is negative,
// ErrInvalidState when s is not recording, ErrCacheFull when no block is
// left, and with the device errors of Store; nothing changes then. If the
// stream's work is dropped or its submission fails, the sequence is cut back
// as kvrt_paged.h says.
func (c *Cache) PagedAppend(s *Stream, seq int32, tokenIDs, positions []int32) ([]uint32, error) {
	const op = "kvrt_cache_paged_append"
	if tokenIDs != nil && len(tokenIDs) != len(positions) {
		return nil, argError(op, "%d token ids but %d positions", len(tokenIDs), len(positions))
	}
	n := len(positions)
	cells := make([]uint32, n)
	ip, pp, cp := slicePtr(tokenIDs), slicePtr(positions), slicePtr(cells)
	err := c.run(op, s, nil, func(h C.kvrt_cache, sh C.kvrt_stream) C.kvrt_result {
		return C.kvrt_cache_paged_append(h, sh, C.int32_t(seq), C.uint32_t(n), (*C.int32_t)(ip), (*C.int32_t)(pp),
			(*C.uint32_t)(cp))
	})
	if err != nil {
		return nil, err
	}
	return cells, nil
}

// PagedFork makes the empty sequence dst a copy of src (kvrt_cache_paged_fork):
// the same block table, every block shared, the same tokens and salt; no
// data moves, and the first append into a shared, partly filled block copies
// it. It fails with an error matching ErrInvalidArgument when a sequence is
// out of range, src == dst or dst is not empty.
func (c *Cache) PagedFork(src, dst int32) error {
	return c.meta("kvrt_cache_paged_fork", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_paged_fork(h, C.int32_t(src), C.int32_t(dst))
	})
}

// PagedSetSharing turns prefix sharing of seq on or off (on by default)
// (kvrt_cache_paged_set_sharing). Off, the sequence never maps registered
// blocks in PagedAdmit and never registers the blocks it fills, so no other
// sequence can map its contents; blocks it registered earlier stay
// registered, and its forks share its blocks whatever the setting. A removed
// sequence keeps its setting. It fails with an error matching
// ErrInvalidArgument when seq is out of range.
func (c *Cache) PagedSetSharing(seq int32, on bool) error {
	var enabled C.uint32_t
	if on {
		enabled = 1
	}
	return c.meta("kvrt_cache_paged_set_sharing", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_paged_set_sharing(h, C.int32_t(seq), enabled)
	})
}

// PagedClearRegistry unregisters every block (kvrt_cache_paged_clear_registry):
// cached blocks become free and no later PagedAdmit maps what was stored
// before; blocks in use stay as they are.
func (c *Cache) PagedClearRegistry() error {
	return c.meta("kvrt_cache_paged_clear_registry", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_paged_clear_registry(h)
	})
}

// PagedCells returns the cell of every token of seq, in append order
// (kvrt_cache_paged_get_cells); they hold until the sequence's next append
// or shift. It fails with an error matching ErrInvalidArgument when seq is
// out of range.
func (c *Cache) PagedCells(seq int32) ([]uint32, error) {
	const op = "kvrt_cache_paged_get_cells"
	var cells []uint32
	// Both calls under one lock, so the length cannot change in between.
	err := c.meta(op, func(h C.kvrt_cache) C.kvrt_result {
		var n C.uint32_t
		if r := C.kvrt_cache_paged_get_cells(h, C.int32_t(seq), 0, 0, nil, &n); r != C.KVRT_SUCCESS || n == 0 {
			return r
		}
		cells = make([]uint32, n)
		r := C.kvrt_cache_paged_get_cells(h, C.int32_t(seq), 0, n, (*C.uint32_t)(slicePtr(cells)), &n)
		cells = cells[:min(int(n), len(cells))]
		return r
	})
	if err != nil {
		return nil, err
	}
	if cells == nil {
		cells = []uint32{}
	}
	return cells, nil
}

// PagedStats are the block counts of a paged cache (kvrt_paged_stats):
// FreeBlocks + CachedBlocks + UsedBlocks = NBlocks.
type PagedStats struct {
	BlockSize        uint32 // tokens per block
	NBlocks          uint32 // Capacity / BlockSize
	FreeBlocks       uint32 // used by no sequence and not registered
	CachedBlocks     uint32 // used by no sequence, registered: reusable by PagedAdmit
	UsedBlocks       uint32 // in some sequence's block table
	RegisteredBlocks uint32 // in the prefix registry (cached or used)
	SharedBlocks     uint32 // in more than one block table entry
}

// PagedStats reads the block counts (kvrt_cache_paged_get_stats).
func (c *Cache) PagedStats() (PagedStats, error) {
	st := C.go_paged_stats_init()
	err := c.meta("kvrt_cache_paged_get_stats", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_paged_get_stats(h, &st)
	})
	if err != nil {
		return PagedStats{}, err
	}
	return PagedStats{uint32(st.block_size), uint32(st.n_blocks), uint32(st.free_blocks), uint32(st.cached_blocks),
		uint32(st.used_blocks), uint32(st.registered_blocks), uint32(st.shared_blocks)}, nil
}

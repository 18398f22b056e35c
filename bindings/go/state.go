package kvrt

// #include "kvrt_go.h"
import "C"

import (
	"math"
	"runtime"
	"strings"
	"unsafe"
)

// WholeCache as a sequence argument of the state methods selects every cell
// of the cache instead of one sequence (-1 in kvrt_state.h).
const WholeCache = -1

// StateSave saves the state of sequence seq, or of the whole cache when seq
// is WholeCache, and returns it (kvrt_cache_state_save). Pending RoPE shifts
// are applied first. The size query and the save run under one lock of the
// cache, so the state is of one moment. It fails with an error matching
// ErrInvalidArgument when seq is out of range, and with the device errors of
// ReadRaw.
func (c *Cache) StateSave(seq int32) ([]byte, error) {
	return c.saveBytes("kvrt_cache_state_save", func(h C.kvrt_cache, data unsafe.Pointer, size *C.uint64_t) C.kvrt_result {
		return C.kvrt_cache_state_save(h, C.int32_t(seq), data, size)
	})
}

// StateLoad loads a state saved by StateSave or SeqSwapOut
// (kvrt_cache_state_load). With seq WholeCache, data must be a whole-cache
// state, which replaces every cell of the cache (into the saved cells when
// the cache has them, else into the lowest cells in the saved order). With
// seq >= 0, data must be a sequence state, which replaces the tokens of
// sequence seq, whatever sequence it was saved from: into the saved cells
// when they are all free, else into the lowest cells that were free before
// the call, and only when those are too few also into the sequence's own. In
// a paged cache each sequence is appended in position order into blocks of
// its own (see PagedLayout). Pending shifts of the cells that stay are kept.
//
// The load is all or nothing: a failure leaves the cache as it was. It fails
// with an error matching ErrCorruptState when data is malformed (truncated,
// trailing bytes, a bad magic or checksum), ErrUnsupported for a newer
// format version, ErrInvalidArgument when seq is out of range, the state is
// of the other kind (sequence or whole cache) or of another geometry or RoPE
// mode, or names sequences the cache does not have, ErrCacheFull when the
// cells do not fit, and with the device errors of Store. data is read only
// during the call.
func (c *Cache) StateLoad(seq int32, data []byte) error {
	p := slicePtr(data)
	return c.meta("kvrt_cache_state_load", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_state_load(h, C.int32_t(seq), p, C.uint64_t(len(data)))
	})
}

// StateSaveFile saves the state of sequence seq, or of the whole cache when
// seq is WholeCache, into the file path (kvrt_cache_state_save_file). The
// file is replaced atomically: the bytes go to a temporary file beside it,
// which is flushed to the disk and renamed over path, so that a failure at
// any point leaves either the old file or the new one. It fails like
// StateSave, with an error matching ErrInvalidArgument for an empty path or
// one that contains a NUL byte, and with ErrIO when the file cannot be
// written.
func (c *Cache) StateSaveFile(seq int32, path string) error {
	return c.pathCall("kvrt_cache_state_save_file", path, func(h C.kvrt_cache, p *C.char) C.kvrt_result {
		return C.kvrt_cache_state_save_file(h, C.int32_t(seq), p)
	})
}

// StateLoadFile loads the state in the file path as StateLoad loads bytes
// (kvrt_cache_state_load_file). It fails like StateLoad, with an error
// matching ErrInvalidArgument for an empty path or one that contains a NUL
// byte, and with ErrIO when the file cannot be read.
func (c *Cache) StateLoadFile(seq int32, path string) error {
	return c.pathCall("kvrt_cache_state_load_file", path, func(h C.kvrt_cache, p *C.char) C.kvrt_result {
		return C.kvrt_cache_state_load_file(h, C.int32_t(seq), p)
	})
}

// SeqSwapOut moves sequence seq out of the cache into host memory
// (kvrt_cache_seq_swap_out): it saves the sequence's state, as StateSave
// does, then removes the sequence, as SeqRm(seq, -1, -1) does, and returns
// the state. The cell and paged layouts allocate their rows up front, so
// this frees the sequence's cells (or blocks) for other sequences but
// returns no device memory. SeqSwapIn brings the sequence back. It fails
// like StateSave, and with an error matching ErrInvalidArgument for a
// negative seq; on failure the sequence stays in the cache.
func (c *Cache) SeqSwapOut(seq int32) ([]byte, error) {
	return c.saveBytes("kvrt_cache_seq_swap_out", func(h C.kvrt_cache, data unsafe.Pointer, size *C.uint64_t) C.kvrt_result {
		return C.kvrt_cache_seq_swap_out(h, C.int32_t(seq), data, size)
	})
}

// SeqSwapOutFile is SeqSwapOut into the file path, written atomically as
// StateSaveFile writes it (kvrt_cache_seq_swap_out_file). It fails like
// both; on failure the sequence stays in the cache.
func (c *Cache) SeqSwapOutFile(seq int32, path string) error {
	return c.pathCall("kvrt_cache_seq_swap_out_file", path, func(h C.kvrt_cache, p *C.char) C.kvrt_result {
		return C.kvrt_cache_seq_swap_out_file(h, C.int32_t(seq), p)
	})
}

// SeqSwapIn brings a sequence swapped out by SeqSwapOut (or any sequence
// state) back into sequence seq, which must hold no token
// (kvrt_cache_seq_swap_in); it then loads as StateLoad(seq, data) does. In
// the cell layout, when the sequence's cells are still free it returns to
// them, and attention gives the same outputs, bit for bit, as before the
// swap; in the paged layout it is appended into blocks the pool chooses (the
// same rows, in other cells). It fails like StateLoad, and with an error
// matching ErrInvalidArgument for a negative seq or a sequence that holds
// tokens.
func (c *Cache) SeqSwapIn(seq int32, data []byte) error {
	p := slicePtr(data)
	return c.meta("kvrt_cache_seq_swap_in", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_seq_swap_in(h, C.int32_t(seq), p, C.uint64_t(len(data)))
	})
}

// SeqSwapInFile is SeqSwapIn from the file path
// (kvrt_cache_seq_swap_in_file). It fails like SeqSwapIn and like
// StateLoadFile.
func (c *Cache) SeqSwapInFile(seq int32, path string) error {
	return c.pathCall("kvrt_cache_seq_swap_in_file", path, func(h C.kvrt_cache, p *C.char) C.kvrt_result {
		return C.kvrt_cache_seq_swap_in_file(h, C.int32_t(seq), p)
	})
}

// saveBytes runs a save function of kvrt_state.h twice under one lock of the
// cache: with data NULL for the size, then into a slice of that size.
func (c *Cache) saveBytes(op string, f func(h C.kvrt_cache, data unsafe.Pointer, size *C.uint64_t) C.kvrt_result) ([]byte, error) {
	g, err := lockObjs(op, c.o.ctx, c.o)
	if err != nil {
		return nil, err
	}
	defer g.unlock()
	defer runtime.KeepAlive(c)
	h := C.kvrt_cache(c.o.h)
	size := new(C.uint64_t)
	if err := call(op, func() C.kvrt_result { return f(h, nil, size) }); err != nil {
		return nil, err
	}
	n := uint64(*size)
	if n >= math.MaxInt {
		return nil, &Error{Op: op, Code: ErrOutOfHostMemory, Message: "the state does not fit in a Go slice"}
	}
	// At least one byte, so that data is never NULL (a NULL data is a size
	// query).
	out := make([]byte, max(n, 1))
	if err := call(op, func() C.kvrt_result { return f(h, unsafe.Pointer(&out[0]), size) }); err != nil {
		return nil, err
	}
	return out[:min(uint64(*size), n)], nil
}

// pathCall runs f with path as a C string, freed after the call. A path with
// a NUL byte is refused: C would read it cut short, as another path.
func (c *Cache) pathCall(op, path string, f func(h C.kvrt_cache, p *C.char) C.kvrt_result) error {
	if strings.IndexByte(path, 0) >= 0 {
		return argError(op, "the path %q contains a NUL byte", path)
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	return c.meta(op, func(h C.kvrt_cache) C.kvrt_result { return f(h, cs) })
}

package kvrt

// #include "kvrt_go.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// StaticWindow is where one window of a LayoutStatic cache lies
// (kvrt_static_window): the [1,1,S-1,D] past tensor a static graph binds.
type StaticWindow struct {
	// Buffer holds the window. It belongs to the cache: valid until the cache
	// is closed, and its Close does nothing.
	Buffer    *Buffer
	Offset    uint64  // bytes to the window's first row
	RowStride uint64  // bytes between rows
	Bytes     uint64  // (S-1) * RowStride
	Rows      uint32  // S-1
	NValid    uint32  // valid rows: the window's last NValid rows
	PosFirst  int32   // position of the first valid row; -1 when empty
	PosLast   int32   // position of the last valid row; -1 when empty
	Type      Type    // the array's stored type
	Scale     float32 // static-scale types: value = Scale * (q - ZeroPoint)
	ZeroPoint int32
}

// StaticWindow describes the current window of seq for (layer, kvHead,
// array) (kvrt_cache_static_get_window). The offset moves with every append:
// ask again after each Store.
func (c *Cache) StaticWindow(seq int32, layer int32, kvHead uint32, array KVArray) (StaticWindow, error) {
	const op = "kvrt_cache_static_get_window"
	w := C.go_static_window_init()
	var out StaticWindow
	err := c.meta(op, func(h C.kvrt_cache) C.kvrt_result {
		r := C.kvrt_cache_static_get_window(h, C.int32_t(seq), C.int32_t(layer), C.uint32_t(kvHead),
			C.kvrt_kv_array(array), &w)
		if r == C.KVRT_SUCCESS {
			out.Buffer = c.windowBuffer(unsafe.Pointer(w.buffer)) // c.o is locked
		}
		return r
	})
	if err != nil {
		return StaticWindow{}, err
	}
	out.Offset, out.RowStride, out.Bytes = uint64(w.offset), uint64(w.row_stride), uint64(w.bytes)
	out.Rows, out.NValid = uint32(w.rows), uint32(w.n_valid)
	out.PosFirst, out.PosLast = int32(w.pos_first), int32(w.pos_last)
	out.Type, out.Scale, out.ZeroPoint = Type(w.element_type), float32(w.scale), int32(w.zero_point)
	return out, nil
}

// windowBuffer returns the Buffer wrapping a window's buffer handle, made once.
func (c *Cache) windowBuffer(h unsafe.Pointer) *Buffer {
	if b, ok := c.winBufs[h]; ok {
		return b
	}
	if c.winBufs == nil {
		c.winBufs = map[unsafe.Pointer]*Buffer{}
	}
	var size C.uint64_t
	C.kvrt_buffer_get_size(C.kvrt_buffer(h), &size)
	o := &objState{h: h, what: "buffer", borrowed: true, destroy: func(unsafe.Pointer) {}}
	c.o.ctx.register(o)
	c.o.deps = append(c.o.deps, o)
	b := &Buffer{ctx: c.ctx, o: o, size: uint64(size)}
	c.winBufs[h] = b
	return b
}

// StaticMask writes the attention mask of seq's next step as f32
// (kvrt_cache_static_get_mask): S entries, 0 for valid rows and the new
// token, -Inf for padding; out must hold S values.
func (c *Cache) StaticMask(seq int32, out []float32) error {
	p := slicePtr(out)
	return c.meta("kvrt_cache_static_get_mask", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_static_get_mask(h, C.int32_t(seq), C.KVRT_TYPE_F32, p, C.uint64_t(4*len(out)))
	})
}

// StaticMaskF16 is StaticMask with f16 entries (0x0000 and 0xFC00).
func (c *Cache) StaticMaskF16(seq int32, out []uint16) error {
	p := slicePtr(out)
	return c.meta("kvrt_cache_static_get_mask", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_static_get_mask(h, C.int32_t(seq), C.KVRT_TYPE_F16, p, C.uint64_t(2*len(out)))
	})
}

// GraphMask describes the mask a static graph takes (kvrt_static_mask_desc,
// less its format, which the method that writes it names). A graph of NNew
// new rows per step binds the window's last S-NNew rows as its past, at the
// window's Offset + (NNew-1)*RowStride; its mask is NNew rows of S entries:
// the past (left-padded), then the step's own tokens, causal.
type GraphMask struct {
	// NNew is the number of new tokens per step: 1 (or 0) for a decode graph,
	// N for an AR-N graph (at most S-1).
	NNew uint32
	// Finite makes the masked entries of f32 and f16 masks MaskedValue
	// (finite and below 0, such as -65535) instead of -Inf.
	Finite      bool
	MaskedValue float32
}

func (c *Cache) graphMask(seq int32, m GraphMask, format C.kvrt_mask_format, p unsafe.Pointer, bytes int) error {
	d := C.go_static_mask_desc_init()
	d.format = format
	d.n_new = C.uint32_t(m.NNew)
	if m.Finite {
		d.flags = C.KVRT_MASK_FINITE
		d.masked_value = C.float(m.MaskedValue)
	}
	return c.meta("kvrt_cache_static_get_graph_mask", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_static_get_graph_mask(h, C.int32_t(seq), &d, p, C.uint64_t(bytes))
	})
}

// StaticGraphMask writes the mask of a static graph for seq's next step as
// f32 (kvrt_cache_static_get_graph_mask, KVRT_MASK_F32): 0 attend, -Inf or
// m.MaskedValue masked; out must hold NNew*S values (NNew*(S-1+NNew) with
// StyleSmartMask).
func (c *Cache) StaticGraphMask(seq int32, m GraphMask, out []float32) error {
	return c.graphMask(seq, m, C.KVRT_MASK_F32, slicePtr(out), 4*len(out))
}

// StaticGraphMaskF16 is StaticGraphMask with f16 entries (KVRT_MASK_F16):
// 0x0000 attend, 0xFC00 or m.MaskedValue rounded to half masked.
func (c *Cache) StaticGraphMaskF16(seq int32, m GraphMask, out []uint16) error {
	return c.graphMask(seq, m, C.KVRT_MASK_F16, slicePtr(out), 2*len(out))
}

// StaticGraphMaskU16 writes the mask of a graph of nNew new rows as uint16
// (KVRT_MASK_U16): 65535 attend, 0 masked.
func (c *Cache) StaticGraphMaskU16(seq int32, nNew uint32, out []uint16) error {
	return c.graphMask(seq, GraphMask{NNew: nNew}, C.KVRT_MASK_U16, slicePtr(out), 2*len(out))
}

// StaticMakeRoom makes room for nRows rows right after seq's window, where a
// graph writes its tokens' rows in place; Place then takes the accepted ones
// with no copy (kvrt_cache_static_make_room). Where the region lacks the
// room it first slides the window's valid rows to the region's start
// (synchronously); ask for the windows after it.
func (c *Cache) StaticMakeRoom(seq int32, nRows uint32) error {
	return c.meta("kvrt_cache_static_make_room", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_static_make_room(h, C.int32_t(seq), C.uint32_t(nRows))
	})
}

// StaticStats are the counters of the windows' movement (kvrt_static_stats).
type StaticStats struct {
	RowsAppended uint64 // tokens appended
	Slides       uint64 // slides that copied rows
	RowsMoved    uint64 // rows copied per (layer, KV head, K|V) region
	BytesMoved   uint64 // device bytes copied by slides
}

// StaticStats reads the counters of seq, or of every sequence when seq < 0
// (kvrt_cache_static_get_stats).
func (c *Cache) StaticStats(seq int32) (StaticStats, error) {
	st := C.go_static_stats_init()
	err := c.meta("kvrt_cache_static_get_stats", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_static_get_stats(h, C.int32_t(seq), &st)
	})
	runtime.KeepAlive(c)
	return StaticStats{uint64(st.rows_appended), uint64(st.slides), uint64(st.rows_moved), uint64(st.bytes_moved)}, err
}

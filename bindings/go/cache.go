package kvrt

// #include "kvrt_go.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// Layout is how a cache arranges its rows (kvrt_layout).
type Layout int32

// The layouts.
const (
	LayoutDefault Layout = C.KVRT_LAYOUT_DEFAULT // LayoutCells
	LayoutCells   Layout = C.KVRT_LAYOUT_CELLS   // any cell holds any token of any sequences
	LayoutStatic  Layout = C.KVRT_LAYOUT_STATIC  // padded per-sequence windows of NPU/DSP graphs
	LayoutPaged   Layout = C.KVRT_LAYOUT_PAGED   // block tables, prefix sharing, copy-on-write (see Cache.PagedAdmit)
)

// RoPEMode is the pairing of rotated dimensions (kvrt_rope_mode).
type RoPEMode int32

// The RoPE modes.
const (
	RoPENormal RoPEMode = C.KVRT_ROPE_MODE_NORMAL // pairs (2i, 2i+1)
	RoPENeox   RoPEMode = C.KVRT_ROPE_MODE_NEOX   // pairs (i, i + n_rot/2)
)

// RoPE is the model's rotary embedding (kvrt_rope_desc), used when kvrt
// rotates K itself (shifts, deferred RoPE). Zero fields take the defaults of
// kvrt.h: all of HeadDimK rotated, base 10000, no scaling.
type RoPE struct {
	Mode       RoPEMode
	NRot       uint32  // rotated dimensions; 0 = HeadDimK
	FreqBase   float32 // 0 = 10000
	FreqScale  float32 // 0 = 1
	ExtFactor  float32 // YaRN extrapolation mix; 0 = off
	AttnFactor float32 // YaRN magnitude; 0 = 1
	BetaFast   float32 // 0 = 32
	BetaSlow   float32 // 0 = 1
	NCtxOrig   uint32  // YaRN original context; 0 = none
}

// StaticStyle says how a static layout's windows take new rows
// (kvrt_static_style).
type StaticStyle int32

const (
	// StyleShiftPointer: the window slides through a region of
	// ceil(R*(S-1)) rows, left-padded, new rows after it (the default).
	StyleShiftPointer StaticStyle = C.KVRT_STATIC_STYLE_SHIFT_POINTER
	// StyleSmartMask: the window is the whole region of S-1 rows and never
	// moves; new rows go to a ring position, right-padded while it fills,
	// the mask opening from the left (the style of ExecuTorch's and
	// Qualcomm's static runtimes). Reserve must be 0 or 1.
	StyleSmartMask StaticStyle = C.KVRT_STATIC_STYLE_SMART_MASK
)

// StaticLayout gives the sizes and style of a LayoutStatic cache
// (kvrt_static_layout_desc, and a chained kvrt_static_style_desc for
// StyleSmartMask).
type StaticLayout struct {
	SeqLen  uint32      // S >= 2: the graph's sequence length; windows hold S-1 rows
	Reserve float64     // R >= 1: rows reserved per window, as a multiple of S-1; 0 = 2 (1 for StyleSmartMask)
	Style   StaticStyle // how the windows take new rows; 0 = StyleShiftPointer
}

// PagedLayout gives the block size of a LayoutPaged cache
// (kvrt_paged_layout_desc); without it the block size is 16.
//
// The paged layout (kvrt/kvrt_paged.h) makes the cells a pool of blocks of
// BlockSize tokens: block b is cells b*BlockSize .. b*BlockSize+BlockSize-1
// of every layer, so Write, Read, ReadRaw and Attention take cells as in the
// cell layout. Each sequence has a block table. Full blocks of a sequence
// with sharing on are registered under their exact token ids, positions and
// salt, and Cache.PagedAdmit maps them into a new sequence whose prompt
// starts with the same tokens (prefix sharing). Cache.PagedFork shares every
// block; the first append into a shared, partly filled block copies it
// (copy-on-write), so a sequence's cells hold only until its next append or
// shift. Store and Place work too (ids unknown: their blocks are never
// registered). Token trees work when the tree is its sequence's last tokens
// (see kvrt_paged.h). State save/load, swap and SeqTransfer work as in the
// cell layout (a loaded sequence gets blocks of its own, never registered).
// SeqDiv, ContextShift and DiscardForReevaluation fail with an error
// matching ErrUnsupported, as the Paged* methods do on caches of other
// layouts.
type PagedLayout struct {
	BlockSize uint32 // tokens per block: 16, 32 or 64; 0 = 16
}

// WindowGroupOptions keeps the windowed layers (LayerWindows[l] > 0) of a
// cell-layout cache in a group of cells of their own
// (kvrt_window_layout_desc), so their memory follows the windows of the
// sequences rather than the capacity (models that interleave local and
// global layers, such as Gemma and Mistral).
//
// Cells keep their meaning: Store, Place and Write return and take the
// cache's cells, and every sequence operation applies to both groups. When a
// batch is placed, the group drops, for each of its sequences, the rows at
// positions no query at or after the batch's lowest position can see
// (position <= lowest - W, W the largest window), except positions below
// NKeep. Afterwards:
//   - placing a token, or attending in a windowed layer, at a position whose
//     window reaches dropped rows fails with an error matching
//     ErrInvalidState and changes nothing: after removing a sequence's tail
//     from p0 on, go on at p0 only when p0 >= Cache.SeqWindowPosMin + W - 1;
//     otherwise remove the sequence's positions from NKeep on and evaluate
//     them again;
//   - reading dropped rows of a windowed layer (Read, ReadRaw) fails with an
//     error matching ErrInvalidArgument, and writing them is skipped;
//   - Attention with AttentionParams.NKeep above NKeep in a windowed layer
//     fails with an error matching ErrInvalidArgument;
//   - a state (StateSave, SeqSwapOut) keeps exactly the rows the group holds
//     and loads into a cache with the same windowed layers and a window
//     group (a state without a group loads too, if the group has a cell for
//     each of its cells); SeqTransfer fails with an error matching
//     ErrUnsupported.
//
// A store or place fails with an error matching ErrCacheFull, placing
// nothing, when the group lacks a cell for each token: size it for
// MaxSeqs * (W + NKeep) plus the largest batch. NewCache fails with an error
// matching ErrInvalidArgument when no layer has a window or Cells exceeds
// the capacity, and with one matching ErrUnsupported for the static layout.
type WindowGroupOptions struct {
	// Cells of the group; 0 = min(Capacity, MaxSeqs * (W + NKeep) + 512).
	// At most the capacity.
	Cells uint32
	// NKeep: positions below it are never dropped (attention sinks).
	NKeep uint32
}

// StaticScales are the quantization of static-scale K/V types
// (kvrt_static_scales_desc): value = scale * (q - zero point). Each slice has
// 1 entry (all layers) or Layers entries; K ones when TypeK is static-scale,
// V ones when TypeV is.
type StaticScales struct {
	KScales     []float32
	KZeroPoints []int32
	VScales     []float32
	VZeroPoints []int32
}

// CacheOptions configures Context.NewCache (kvrt_cache_desc). Zero fields
// take the defaults of KVRT_CACHE_DESC_INIT: f16 K and V, the cell layout,
// 64 sequences.
type CacheOptions struct {
	Layers   uint32
	Heads    uint32 // query heads; a multiple of KVHeads
	KVHeads  uint32
	HeadDimK uint32
	HeadDimV uint32 // 0 = HeadDimK
	Capacity uint32 // cells (tokens); 0 with LayoutStatic, a multiple of the block size with LayoutPaged
	MaxSeqs  uint32 // sequence ids are 0..MaxSeqs-1; 0 = 64 (1 with LayoutStatic)
	TypeK    Type   // stored type of K; 0 = TypeF16
	TypeV    Type   // stored type of V; 0 = TypeF16
	// Layout of the rows; LayoutDefault becomes LayoutStatic when Static is
	// set and LayoutPaged when Paged is set. Static or Paged with another
	// layout, or both at once, is refused.
	Layout Layout
	// LayerWindows is the sliding window of each layer (Layers entries, 0 =
	// full attention), or nil for none. Windowed layers store rows for every
	// cell unless WindowGroup is set.
	LayerWindows []uint32
	Label        string // debug name for Vulkan tools
	// DeferredRoPE stores K before rotation; attention rotates it by the
	// cell's current position (KVRT_CACHE_DEFERRED_ROPE).
	DeferredRoPE bool
	// Exportable allocates the K/V rows so that a static window's buffer can
	// be exported (Buffer.ExportMemory, KVRT_CACHE_EXPORTABLE).
	Exportable bool
	RoPE       *RoPE         // nil: normal mode, defaults
	Static     *StaticLayout // the static layout's sizes
	Paged      *PagedLayout  // the paged layout's block size; nil = 16
	Scales     *StaticScales // scales of static-scale types
	// WindowGroup keeps the windowed layers in a smaller group of cells of
	// their own (cell and paged layouts); nil = none.
	WindowGroup *WindowGroupOptions
}

// cacheDesc builds a pinned kvrt_cache_desc with its chain; free releases
// the C strings.
func (o *CacheOptions) cacheDesc(p *runtime.Pinner) (d *C.kvrt_cache_desc, free func()) {
	d = new(C.kvrt_cache_desc)
	*d = C.go_cache_desc_init()
	free = func() {}
	d.n_layers = C.uint32_t(o.Layers)
	d.n_heads = C.uint32_t(o.Heads)
	d.n_kv_heads = C.uint32_t(o.KVHeads)
	d.head_dim_k = C.uint32_t(o.HeadDimK)
	d.head_dim_v = C.uint32_t(o.HeadDimV)
	d.capacity = C.uint32_t(o.Capacity)
	d.max_seqs = C.uint32_t(o.MaxSeqs)
	if o.TypeK != TypeUndefined {
		d.type_k = C.kvrt_type(o.TypeK)
	}
	if o.TypeV != TypeUndefined {
		d.type_v = C.kvrt_type(o.TypeV)
	}
	d.layout = C.kvrt_layout(o.Layout)
	if o.Layout == LayoutDefault && o.Static != nil {
		d.layout = C.KVRT_LAYOUT_STATIC
	} else if o.Layout == LayoutDefault && o.Paged != nil {
		d.layout = C.KVRT_LAYOUT_PAGED
	}
	d.layer_windows = (*C.uint32_t)(pinSlice(p, o.LayerWindows))
	if o.Label != "" {
		cs := C.CString(o.Label)
		d.label = cs
		free = func() { C.free(unsafe.Pointer(cs)) }
	}
	if o.Exportable {
		d.flags |= C.KVRT_CACHE_EXPORTABLE
	}
	if o.DeferredRoPE {
		d.flags |= C.KVRT_CACHE_DEFERRED_ROPE
	}
	next := &d.next
	if r := o.RoPE; r != nil {
		c := new(C.kvrt_rope_desc)
		*c = C.go_rope_desc_init()
		c.mode = C.kvrt_rope_mode(r.Mode)
		c.n_rot = C.uint32_t(r.NRot)
		c.freq_base = C.float(r.FreqBase)
		c.freq_scale = C.float(r.FreqScale)
		c.ext_factor = C.float(r.ExtFactor)
		c.attn_factor = C.float(r.AttnFactor)
		c.beta_fast = C.float(r.BetaFast)
		c.beta_slow = C.float(r.BetaSlow)
		c.n_ctx_orig = C.uint32_t(r.NCtxOrig)
		p.Pin(c)
		*next = unsafe.Pointer(c)
		next = &c.next
	}
	if s := o.Static; s != nil {
		c := new(C.kvrt_static_layout_desc)
		*c = C.go_static_layout_desc_init()
		c.seq_len = C.uint32_t(s.SeqLen)
		c.reserve = C.double(s.Reserve)
		p.Pin(c)
		*next = unsafe.Pointer(c)
		next = &c.next
		if s.Style != StyleShiftPointer {
			st := new(C.kvrt_static_style_desc)
			*st = C.go_static_style_desc_init()
			st.style = C.kvrt_static_style(s.Style)
			p.Pin(st)
			*next = unsafe.Pointer(st)
			next = &st.next
		}
	}
	if g := o.Paged; g != nil {
		c := new(C.kvrt_paged_layout_desc)
		*c = C.go_paged_layout_desc_init()
		c.block_size = C.uint32_t(g.BlockSize)
		p.Pin(c)
		*next = unsafe.Pointer(c)
		next = &c.next
	}
	if s := o.Scales; s != nil {
		c := new(C.kvrt_static_scales_desc)
		*c = C.go_static_scales_desc_init()
		c.count = C.uint32_t(max(len(s.KScales), len(s.VScales)))
		c.k_scales = (*C.float)(pinSlice(p, s.KScales))
		c.k_zero_points = (*C.int32_t)(pinSlice(p, s.KZeroPoints))
		c.v_scales = (*C.float)(pinSlice(p, s.VScales))
		c.v_zero_points = (*C.int32_t)(pinSlice(p, s.VZeroPoints))
		p.Pin(c)
		*next = unsafe.Pointer(c)
		next = &c.next
	}
	if w := o.WindowGroup; w != nil {
		c := new(C.kvrt_window_layout_desc)
		*c = C.go_window_layout_desc_init()
		c.cells = C.uint32_t(w.Cells)
		c.n_keep = C.uint32_t(w.NKeep)
		p.Pin(c)
		*next = unsafe.Pointer(c)
	}
	p.Pin(d)
	return d, free
}

// checkScales checks that the scale slices match in length, so kvrt never
// reads past a Go slice.
func (o *CacheOptions) check(op string) error {
	if o.LayerWindows != nil && uint32(len(o.LayerWindows)) != o.Layers {
		return argError(op, "LayerWindows has %d entries for %d layers", len(o.LayerWindows), o.Layers)
	}
	if s := o.Scales; s != nil {
		if len(s.KScales) != len(s.KZeroPoints) || len(s.VScales) != len(s.VZeroPoints) {
			return argError(op, "Scales: each scale needs one zero point")
		}
		if len(s.KScales) != 0 && len(s.VScales) != 0 && len(s.KScales) != len(s.VScales) {
			return argError(op, "Scales: K and V scales differ in count")
		}
	}
	return nil
}

// CacheEstimate gives the sizes of a cache before it is created (kvrt_cache_estimate).
type CacheEstimate struct {
	BytesPerToken   uint64 // K and V bytes of one token over all layers
	DataBytes       uint64 // K and V bytes of the whole cache
	DeviceBytes     uint64 // device memory NewCache allocates
	MaxBindingBytes uint64 // the largest binding the estimate assumed
}

// EstimateCache computes the sizes of a cache without a context (the
// binding limit is taken as 128 MiB); see Context.EstimateCache.
func EstimateCache(opts CacheOptions) (CacheEstimate, error) { return estimateCache(nil, opts) }

// EstimateCache computes the sizes of a cache for opts on this context's
// device without allocating anything (kvrt_cache_estimate_size). Safe for
// concurrent use.
func (c *Context) EstimateCache(opts CacheOptions) (CacheEstimate, error) {
	return estimateCache(c, opts)
}

func estimateCache(c *Context, opts CacheOptions) (CacheEstimate, error) {
	const op = "kvrt_cache_estimate_size"
	if err := opts.check(op); err != nil {
		return CacheEstimate{}, err
	}
	var p runtime.Pinner
	defer p.Unpin()
	d, free := opts.cacheDesc(&p)
	defer free()
	var h C.kvrt_context
	if c != nil {
		g, err := c.lock(op)
		if err != nil {
			return CacheEstimate{}, err
		}
		defer g.unlock()
		h = c.handle()
	}
	e := C.go_cache_estimate_init()
	err := call(op, func() C.kvrt_result { return C.kvrt_cache_estimate_size(h, d, &e) })
	runtime.KeepAlive(c)
	return CacheEstimate{uint64(e.bytes_per_token), uint64(e.data_bytes), uint64(e.device_bytes),
		uint64(e.max_binding_bytes)}, err
}

// Cache is a KV cache (kvrt_cache): the keys and values of one model, all its
// layers, for up to Capacity tokens shared by up to MaxSeqs sequences.
// Sequence operations follow llama.cpp's memory API on half-open position
// ranges [p0, p1), where a negative bound means unbounded.
//
// Concurrency: a Cache is safe for concurrent use; its calls are serialized
// (kvrt.h: "Caches and memories are used by one thread at a time"). Different
// caches of one context may be used on different goroutines at the same
// time, each with its own Stream or with nil (synchronous) streams.
//
// Methods that take a *Stream record into it when it is not nil (the stream
// must be recording, see Stream.Begin), and otherwise record, submit and
// wait themselves.
type Cache struct {
	ctx *Context
	o   *objState

	layers, heads, kvHeads uint32
	dimK, dimV             uint32
	typeK, typeV           Type
	static                 bool

	winBufs map[unsafe.Pointer]*Buffer // static windows' buffers (under o.mu)
}

// NewCache creates an empty cache (kvrt_cache_create). Safe for concurrent use.
func (c *Context) NewCache(opts CacheOptions) (*Cache, error) {
	const op = "kvrt_cache_create"
	if err := opts.check(op); err != nil {
		return nil, err
	}
	var p runtime.Pinner
	defer p.Unpin()
	d, free := opts.cacheDesc(&p)
	defer free()
	g, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer g.unlock()
	var h C.kvrt_cache
	if err := call(op, func() C.kvrt_result { return C.kvrt_cache_create(c.handle(), d, &h) }); err != nil {
		return nil, err
	}
	runtime.KeepAlive(c)
	o := &objState{h: unsafe.Pointer(h), what: "cache", exclusive: true,
		destroy: func(p unsafe.Pointer) { C.kvrt_cache_destroy(C.kvrt_cache(p)) }}
	c.s.register(o)
	ca := &Cache{ctx: c, o: o,
		layers: uint32(d.n_layers), heads: uint32(d.n_heads), kvHeads: uint32(d.n_kv_heads),
		dimK: uint32(d.head_dim_k), dimV: uint32(d.head_dim_v),
		typeK: Type(d.type_k), typeV: Type(d.type_v), static: d.layout == C.KVRT_LAYOUT_STATIC}
	if ca.dimV == 0 {
		ca.dimV = ca.dimK
	}
	runtime.AddCleanup(ca, func(o *objState) { o.close() }, o)
	return ca, nil
}

// Close destroys the cache (kvrt_cache_destroy); memory still used by
// submitted work is released when it completes. The buffers of its static
// windows become invalid with it. Idempotent; always returns nil.
func (c *Cache) Close() error {
	c.o.close()
	runtime.KeepAlive(c)
	return nil
}

// Layers returns the number of layers.
func (c *Cache) Layers() uint32 { return c.layers }

// Heads returns the number of query heads.
func (c *Cache) Heads() uint32 { return c.heads }

// KVHeads returns the number of K/V heads.
func (c *Cache) KVHeads() uint32 { return c.kvHeads }

// HeadDimK returns the values per head row of K (and of queries).
func (c *Cache) HeadDimK() uint32 { return c.dimK }

// HeadDimV returns the values per head row of V (and of outputs).
func (c *Cache) HeadDimV() uint32 { return c.dimV }

// TypeK returns the stored type of K.
func (c *Cache) TypeK() Type { return c.typeK }

// TypeV returns the stored type of V.
func (c *Cache) TypeV() Type { return c.typeV }

// run locks the cache, the stream and the buffers, fills the buffers'
// handles, runs f and ties the cache to the stream's recording.
func (c *Cache) run(op string, s *Stream, bufs []*bufRef, f func(h C.kvrt_cache, sh C.kvrt_stream) C.kvrt_result) error {
	objs := []*objState{c.o}
	if s != nil {
		objs = append(objs, s.o)
	}
	objs = append(objs, bufObjs(bufs...)...)
	g, err := lockObjs(op, c.o.ctx, objs...)
	if err != nil {
		return err
	}
	defer g.unlock()
	fillBuffers(bufs...)
	var sh C.kvrt_stream
	if s != nil {
		sh = s.handle()
		s.tie(c.o)
	}
	err = call(op, func() C.kvrt_result { return f(C.kvrt_cache(c.o.h), sh) })
	runtime.KeepAlive(c)
	runtime.KeepAlive(s)
	return err
}

// layerCount returns the layers a call covers, or an error for a bad layer.
func (c *Cache) layerCount(op string, layer int32) (uint64, error) {
	if layer == AllLayers {
		return uint64(c.layers), nil
	}
	if layer < 0 || uint64(layer) >= uint64(c.layers) {
		return 0, argError(op, "layer %d out of range (the cache has %d)", layer, c.layers)
	}
	return 1, nil
}

// CacheInfo is the occupancy of a cache (kvrt_cache_info).
type CacheInfo struct {
	Capacity      uint32  // cells
	Used          uint32  // cells in use
	NAttend       uint32  // cells an attention pass reads
	PendingShifts uint32  // cells whose K awaits a RoPE shift
	Fragmentation float32 // empty share of the cells below NAttend
	DeviceBytes   uint64  // device memory the cache holds
	BytesPerToken uint64  // K and V bytes of one token, all layers
	KRowBytes     uint64  // stored bytes of one cell's K in one layer (ReadRaw)
	VRowBytes     uint64  // stored bytes of one cell's V in one layer
}

// Info reads the cache's occupancy (kvrt_cache_get_info).
func (c *Cache) Info() (CacheInfo, error) {
	i := C.go_cache_info_init()
	err := c.run("kvrt_cache_get_info", nil, nil, func(h C.kvrt_cache, _ C.kvrt_stream) C.kvrt_result {
		return C.kvrt_cache_get_info(h, &i)
	})
	return CacheInfo{uint32(i.capacity), uint32(i.used), uint32(i.n_attend), uint32(i.pending_shifts),
		float32(i.fragmentation), uint64(i.device_bytes), uint64(i.bytes_per_token),
		uint64(i.k_row_bytes), uint64(i.v_row_bytes)}, err
}

// Store places the batch's tokens in free cells and writes their K and V
// rows for layer (or AllLayers), all or nothing (kvrt_cache_store). k and v
// hold KVHeads rows per token (per layer). It returns the cell of each token.
// A full cache gives an error matching ErrCacheFull, and nothing changed.
func (c *Cache) Store(s *Stream, b Batch, layer int32, k, v Tensor) ([]uint32, error) {
	const op = "kvrt_cache_store"
	nl, err := c.layerCount(op, layer)
	if err != nil {
		return nil, err
	}
	var p runtime.Pinner
	defer p.Unpin()
	cb, err := b.toC(op, &p)
	if err != nil {
		return nil, err
	}
	n := uint64(b.Len())
	kr, kb, err := k.toC(op, "k", &p, tensorGeom{c.dimK, n, uint64(c.kvHeads), nl})
	if err != nil {
		return nil, err
	}
	vr, vb, err := v.toC(op, "v", &p, tensorGeom{c.dimV, n, uint64(c.kvHeads), nl})
	if err != nil {
		return nil, err
	}
	cells := make([]uint32, n)
	err = c.run(op, s, []*bufRef{kb, vb}, func(h C.kvrt_cache, sh C.kvrt_stream) C.kvrt_result {
		return C.kvrt_cache_store(h, sh, cb, C.int32_t(layer), kr, vr, (*C.uint32_t)(slicePtr(cells)))
	})
	if err != nil {
		return nil, err
	}
	return cells, nil
}

// Place places the batch's tokens without writing data, for engines that
// write layer by layer with Write (kvrt_cache_place). It returns the cells.
func (c *Cache) Place(b Batch) ([]uint32, error) {
	const op = "kvrt_cache_place"
	var p runtime.Pinner
	defer p.Unpin()
	cb, err := b.toC(op, &p)
	if err != nil {
		return nil, err
	}
	cells := make([]uint32, b.Len())
	err = c.run(op, nil, nil, func(h C.kvrt_cache, _ C.kvrt_stream) C.kvrt_result {
		return C.kvrt_cache_place(h, cb, (*C.uint32_t)(slicePtr(cells)))
	})
	if err != nil {
		return nil, err
	}
	return cells, nil
}

// Write writes K and V rows of the tokens in cells (from Place) for layer
// (or AllLayers) (kvrt_cache_write).
func (c *Cache) Write(s *Stream, cells []uint32, layer int32, k, v Tensor) error {
	const op = "kvrt_cache_write"
	nl, err := c.layerCount(op, layer)
	if err != nil {
		return err
	}
	var p runtime.Pinner
	defer p.Unpin()
	n := uint64(len(cells))
	kr, kb, err := k.toC(op, "k", &p, tensorGeom{c.dimK, n, uint64(c.kvHeads), nl})
	if err != nil {
		return err
	}
	vr, vb, err := v.toC(op, "v", &p, tensorGeom{c.dimV, n, uint64(c.kvHeads), nl})
	if err != nil {
		return err
	}
	cp := (*C.uint32_t)(slicePtr(cells))
	return c.run(op, s, []*bufRef{kb, vb}, func(h C.kvrt_cache, sh C.kvrt_stream) C.kvrt_result {
		return C.kvrt_cache_write(h, sh, C.uint32_t(n), cp, C.int32_t(layer), kr, vr)
	})
}

// Read reads K and V of cells in one layer, dequantized to f32
// (kvrt_cache_read): k gets len(cells)*KVHeads*HeadDimK values and v
// len(cells)*KVHeads*HeadDimV; either may be nil. A shorter slice is
// ErrInvalidArgument and nothing is written; values beyond those needed are
// left as they were.
func (c *Cache) Read(layer int32, cells []uint32, k, v []float32) error {
	const op = "kvrt_cache_read"
	if _, err := c.layerCount(op, layer); err != nil || layer == AllLayers {
		if err == nil {
			err = argError(op, "Read takes one layer")
		}
		return err
	}
	n := len(cells)
	// An empty slice that is not nil asks for the array: the library gets a
	// pointer (to one unused value) and its size, 0 bytes, and refuses it.
	var none [1]float32
	kp, vp := slicePtr(k), slicePtr(v)
	if k != nil && len(k) == 0 {
		kp = unsafe.Pointer(&none[0])
	}
	if v != nil && len(v) == 0 {
		vp = unsafe.Pointer(&none[0])
	}
	kb, vb := C.uint64_t(len(k))*4, C.uint64_t(len(v))*4
	cp := slicePtr(cells)
	return c.run(op, nil, nil, func(h C.kvrt_cache, _ C.kvrt_stream) C.kvrt_result {
		return C.kvrt_cache_read(h, C.int32_t(layer), C.uint32_t(n), (*C.uint32_t)(cp), (*C.float)(kp), kb,
			(*C.float)(vp), vb)
	})
}

// ReadRaw reads the stored bytes of cells in one layer's K or V, bit for bit
// (kvrt_cache_read_raw): CacheInfo.KRowBytes (or VRowBytes) per cell. What
// it reads can be stored again with a Tensor{Raw: ..., Type: the stored type}.
func (c *Cache) ReadRaw(layer int32, array KVArray, cells []uint32, out []byte) error {
	const op = "kvrt_cache_read_raw"
	cp, op2 := slicePtr(cells), slicePtr(out)
	return c.run(op, nil, nil, func(h C.kvrt_cache, _ C.kvrt_stream) C.kvrt_result {
		return C.kvrt_cache_read_raw(h, C.int32_t(layer), C.kvrt_kv_array(array), C.uint32_t(len(cells)),
			(*C.uint32_t)(cp), op2, C.uint64_t(len(out)))
	})
}

func (c *Cache) meta(op string, f func(h C.kvrt_cache) C.kvrt_result) error {
	return c.run(op, nil, nil, func(h C.kvrt_cache, _ C.kvrt_stream) C.kvrt_result { return f(h) })
}

// SeqRm drops positions [p0, p1) of seq (seq < 0: of every sequence)
// (kvrt_cache_seq_rm). It changes metadata only, but for a LayoutStatic
// removal whose remaining rows must move: that one copies them and waits for
// the device (see kvrt/kvrt_static.h).
func (c *Cache) SeqRm(seq, p0, p1 int32) error {
	return c.meta("kvrt_cache_seq_rm", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_seq_rm(h, C.int32_t(seq), C.int32_t(p0), C.int32_t(p1))
	})
}

// SeqCp makes dst share the cells of src in [p0, p1) (kvrt_cache_seq_cp).
func (c *Cache) SeqCp(src, dst, p0, p1 int32) error {
	return c.meta("kvrt_cache_seq_cp", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_seq_cp(h, C.int32_t(src), C.int32_t(dst), C.int32_t(p0), C.int32_t(p1))
	})
}

// SeqKeep drops every sequence but seq (kvrt_cache_seq_keep).
func (c *Cache) SeqKeep(seq int32) error {
	return c.meta("kvrt_cache_seq_keep", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_seq_keep(h, C.int32_t(seq))
	})
}

// SeqAdd adds delta to the positions of seq in [p0, p1) and records the K
// shift, applied before the next attention (kvrt_cache_seq_add).
func (c *Cache) SeqAdd(seq, p0, p1, delta int32) error {
	return c.meta("kvrt_cache_seq_add", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_seq_add(h, C.int32_t(seq), C.int32_t(p0), C.int32_t(p1), C.int32_t(delta))
	})
}

// SeqDiv integer-divides the positions of seq in [p0, p1) by d > 0 and
// records the K shift (kvrt_cache_seq_div).
func (c *Cache) SeqDiv(seq, p0, p1, d int32) error {
	return c.meta("kvrt_cache_seq_div", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_seq_div(h, C.int32_t(seq), C.int32_t(p0), C.int32_t(p1), C.int32_t(d))
	})
}

// SeqPosMin returns the smallest position of seq, or -1 when it has none
// (kvrt_cache_seq_pos_min).
func (c *Cache) SeqPosMin(seq int32) (int32, error) {
	var pos C.int32_t
	err := c.meta("kvrt_cache_seq_pos_min", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_seq_pos_min(h, C.int32_t(seq), &pos)
	})
	return int32(pos), err
}

// SeqWindowPosMin returns the smallest position of seq, at or above the
// window group's NKeep, whose rows the windowed layers still hold; if none,
// the smallest they hold; -1 when they hold none
// (kvrt_cache_seq_window_pos_min). Without a window group it is SeqPosMin.
// After removing a sequence's tail from p0 on, the engine can go on at p0
// when p0 >= SeqWindowPosMin + W - 1 (W the largest window); see
// WindowGroupOptions.
func (c *Cache) SeqWindowPosMin(seq int32) (int32, error) {
	var pos C.int32_t
	err := c.meta("kvrt_cache_seq_window_pos_min", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_seq_window_pos_min(h, C.int32_t(seq), &pos)
	})
	return int32(pos), err
}

// SeqPosMax returns the largest position of seq, or -1 when it has none
// (kvrt_cache_seq_pos_max).
func (c *Cache) SeqPosMax(seq int32) (int32, error) {
	var pos C.int32_t
	err := c.meta("kvrt_cache_seq_pos_max", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_seq_pos_max(h, C.int32_t(seq), &pos)
	})
	return int32(pos), err
}

// Clear frees every cell (kvrt_cache_clear).
func (c *Cache) Clear() error {
	return c.meta("kvrt_cache_clear", func(h C.kvrt_cache) C.kvrt_result { return C.kvrt_cache_clear(h) })
}

// TreeAccept ends the verification of a token tree (kvrt_cache_tree_accept):
// tree is the batch that stored it, with Parents and Cells set. It keeps
// each token of leaves (indices into the batch) and its ancestors, and drops
// every other token of the tree, all or nothing. No leaves drops the whole
// tree.
func (c *Cache) TreeAccept(tree Batch, leaves []int32) error {
	const op = "kvrt_cache_tree_accept"
	if tree.Parents == nil || tree.Cells == nil {
		return argError(op, "the batch needs Parents and Cells")
	}
	var p runtime.Pinner
	defer p.Unpin()
	cb, err := tree.toC(op, &p)
	if err != nil {
		return err
	}
	lp := (*C.int32_t)(pinSlice(&p, leaves))
	return c.meta(op, func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_tree_accept(h, cb, C.uint32_t(len(leaves)), lp)
	})
}

// Compact moves up to maxMoves cells (0 = no limit) from the end into the
// lowest holes when the empty share below NAttend exceeds threshold (0..1)
// (kvrt_cache_compact). It returns the number of cells moved.
func (c *Cache) Compact(s *Stream, threshold float32, maxMoves uint32) (uint32, error) {
	var moved C.uint32_t
	err := c.run("kvrt_cache_compact", s, nil, func(h C.kvrt_cache, sh C.kvrt_stream) C.kvrt_result {
		return C.kvrt_cache_compact(h, sh, C.float(threshold), C.uint32_t(maxMoves), &moved)
	})
	return uint32(moved), err
}

// ApplyShifts applies every pending RoPE shift to K now
// (kvrt_cache_apply_shifts); Attention does it by itself otherwise.
func (c *Cache) ApplyShifts(s *Stream) error {
	return c.run("kvrt_cache_apply_shifts", s, nil, func(h C.kvrt_cache, sh C.kvrt_stream) C.kvrt_result {
		return C.kvrt_cache_apply_shifts(h, sh)
	})
}

// ContextShift shifts a full sequence as llama.cpp does: keeps [0, nKeep),
// drops the next nDiscard positions (0 = half of those after nKeep) and
// moves the rest left (kvrt_cache_context_shift). It returns the new largest
// position + 1.
func (c *Cache) ContextShift(seq, nKeep, nDiscard int32) (nPast int32, err error) {
	var np C.int32_t
	err = c.meta("kvrt_cache_context_shift", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_context_shift(h, C.int32_t(seq), C.int32_t(nKeep), C.int32_t(nDiscard), &np)
	})
	return int32(np), err
}

// Reevaluation says which dropped tokens to evaluate again: the tokens the
// engine had at positions [SrcPos, SrcPos+Count) must be stored again at
// [DstPos, DstPos+Count).
type Reevaluation struct {
	SrcPos, DstPos, Count int32
}

// DiscardForReevaluation keeps [0, nKeep), drops everything after it, and
// says which dropped tokens to evaluate again (kvrt_cache_discard_for_reevaluation).
func (c *Cache) DiscardForReevaluation(seq, nKeep, nDiscard int32) (Reevaluation, error) {
	var src, dst, n C.int32_t
	err := c.meta("kvrt_cache_discard_for_reevaluation", func(h C.kvrt_cache) C.kvrt_result {
		return C.kvrt_cache_discard_for_reevaluation(h, C.int32_t(seq), C.int32_t(nKeep), C.int32_t(nDiscard),
			&src, &dst, &n)
	})
	return Reevaluation{int32(src), int32(dst), int32(n)}, err
}

// AttentionParams are the options of Cache.Attention (kvrt_attention_params);
// the zero value is causal attention with scale 1/sqrt(HeadDimK).
type AttentionParams struct {
	NonCausal bool      // queries also see later positions
	Scale     float32   // logit scale; 0 = 1/sqrt(HeadDimK)
	Softcap   float32   // cap * tanh(s / cap); 0 = off
	MaxBias   float32   // ALiBi maximum bias; 0 = off
	NKeep     uint32    // positions < NKeep are visible whatever the sliding window
	Sinks     []float32 // a learned sink logit per query head (Heads values); nil = none
}

// Attention computes softmax(scale * q K^T + bias) V of the queries over the
// cache's cells in layer (kvrt_cache_attention): query i (position
// queries.Positions[i], one sequence) sees its sequence's cells at positions
// <= its own. q holds Heads rows of HeadDimK values per query, out receives
// Heads rows of HeadDimV values. params may be nil. Host outputs need a nil
// stream.
func (c *Cache) Attention(s *Stream, layer int32, queries Batch, q Tensor, out Output, params *AttentionParams) error {
	const op = "kvrt_cache_attention"
	if _, err := c.layerCount(op, layer); err != nil || layer == AllLayers {
		if err == nil {
			err = argError(op, "Attention takes one layer")
		}
		return err
	}
	var p runtime.Pinner
	defer p.Unpin()
	cb, err := queries.toC(op, &p)
	if err != nil {
		return err
	}
	n := uint64(queries.Len())
	qr, qb, err := q.toC(op, "q", &p, tensorGeom{c.dimK, n, uint64(c.heads), 1})
	if err != nil {
		return err
	}
	or, ob, err := out.toC(op, &p, tensorGeom{c.dimV, n, uint64(c.heads), 1})
	if err != nil {
		return err
	}
	var cp *C.kvrt_attention_params
	if params != nil {
		cp = new(C.kvrt_attention_params)
		*cp = C.go_attention_params_init()
		if params.NonCausal {
			cp.flags |= C.KVRT_ATTENTION_NON_CAUSAL
		}
		cp.scale = C.float(params.Scale)
		cp.softcap = C.float(params.Softcap)
		cp.max_bias = C.float(params.MaxBias)
		cp.n_keep = C.uint32_t(params.NKeep)
		if params.Sinks != nil {
			if len(params.Sinks) != int(c.heads) {
				return argError(op, "Sinks has %d values for %d heads", len(params.Sinks), c.heads)
			}
			cp.sinks = (*C.float)(pinSlice(&p, params.Sinks))
		}
		p.Pin(cp)
	}
	return c.run(op, s, []*bufRef{qb, ob}, func(h C.kvrt_cache, sh C.kvrt_stream) C.kvrt_result {
		return C.kvrt_cache_attention(h, sh, C.int32_t(layer), cb, qr, or, cp)
	})
}

// SeqTransfer copies sequence srcSeq of c into sequence dstSeq of dst (which
// holds no token), bit for bit, between any two layouts
// (kvrt_cache_seq_transfer); dst may be c. It returns the tokens copied.
// Both caches are locked for the call.
func (c *Cache) SeqTransfer(srcSeq int32, dst *Cache, dstSeq int32) (uint32, error) {
	const op = "kvrt_cache_seq_transfer"
	if dst == nil {
		return 0, argError(op, "nil destination cache")
	}
	first, second := c.o, dst.o
	if second.id < first.id {
		first, second = second, first
	}
	g, err := lockObjs(op, c.o.ctx, first, second)
	if err != nil {
		return 0, err
	}
	defer g.unlock()
	var n C.uint32_t
	err = call(op, func() C.kvrt_result {
		return C.kvrt_cache_seq_transfer(C.kvrt_cache(c.o.h), C.int32_t(srcSeq), C.kvrt_cache(dst.o.h),
			C.int32_t(dstSeq), &n)
	})
	runtime.KeepAlive(c)
	runtime.KeepAlive(dst)
	return uint32(n), err
}

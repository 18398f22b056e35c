package kvrt

// #include "kvrt_go.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// Batch describes tokens (kvrt_batch): token i has position Positions[i]
// and belongs to the SeqIDCounts[i] sequences listed next in SeqIDs
// (flattened, in token order). With SeqIDCounts nil every token has exactly
// one sequence, SeqIDs[i]. The slices are read during the call only.
//
// With Parents set the batch is a token tree (kvrt_batch_tree), the draft
// tokens of speculative decoding: token i's parent is token Parents[i]
// (earlier in the batch, same sequence, lower position) or -1. Siblings may
// share a position; each token attends to the cache and, of the tree, to its
// ancestors and itself only. Cells, the cells Store or Place returned for the
// tree, is needed when the tree is the queries of Attention and by
// TreeAccept.
type Batch struct {
	Positions   []int32  // one per token
	SeqIDs      []int32  // the tokens' sequences
	SeqIDCounts []uint32 // sequences per token; nil = one each
	Parents     []int32  // token tree: each token's parent, -1 for none; nil = not a tree
	Cells       []uint32 // token tree: each token's cell; nil when storing it
}

// SeqBatch returns a batch of n tokens of sequence seq at positions first,
// first+1, ..., first+n-1.
func SeqBatch(seq, first int32, n int) Batch {
	b := Batch{Positions: make([]int32, n), SeqIDs: make([]int32, n)}
	for i := range b.Positions {
		b.Positions[i] = first + int32(i)
		b.SeqIDs[i] = seq
	}
	return b
}

// Len returns the number of tokens.
func (b *Batch) Len() int { return len(b.Positions) }

// toC checks the batch's lengths and fills a pinned kvrt_batch.
func (b *Batch) toC(op string, p *runtime.Pinner) (*C.kvrt_batch, error) {
	n := len(b.Positions)
	if b.SeqIDCounts == nil {
		if len(b.SeqIDs) != n {
			return nil, argError(op, "batch: %d positions but %d sequence ids", n, len(b.SeqIDs))
		}
	} else {
		if len(b.SeqIDCounts) != n {
			return nil, argError(op, "batch: %d positions but %d sequence id counts", n, len(b.SeqIDCounts))
		}
		total := 0
		for _, c := range b.SeqIDCounts {
			total += int(c)
		}
		if total != len(b.SeqIDs) {
			return nil, argError(op, "batch: sequence id counts add up to %d, but %d ids given", total, len(b.SeqIDs))
		}
	}
	if b.Parents == nil && b.Cells != nil {
		return nil, argError(op, "batch: Cells belong to a token tree, but Parents is nil")
	}
	if b.Parents != nil && len(b.Parents) != n {
		return nil, argError(op, "batch: %d positions but %d parents", n, len(b.Parents))
	}
	if b.Cells != nil && len(b.Cells) != n {
		return nil, argError(op, "batch: %d positions but %d cells", n, len(b.Cells))
	}
	cb := new(C.kvrt_batch)
	*cb = C.go_batch_init()
	cb.n_tokens = C.uint32_t(n)
	cb.positions = (*C.int32_t)(pinSlice(p, b.Positions))
	cb.seq_ids = (*C.int32_t)(pinSlice(p, b.SeqIDs))
	cb.seq_id_counts = (*C.uint32_t)(pinSlice(p, b.SeqIDCounts))
	if b.Parents != nil {
		tree := new(C.kvrt_batch_tree)
		*tree = C.go_batch_tree_init()
		tree.parents = (*C.int32_t)(pinSlice(p, b.Parents))
		tree.cells = (*C.uint32_t)(pinSlice(p, b.Cells))
		p.Pin(tree)
		cb.next = unsafe.Pointer(tree)
	}
	p.Pin(cb)
	return cb, nil
}

// pinSlice pins a slice's elements and returns their address, or nil when
// the slice is empty.
func pinSlice[T any](p *runtime.Pinner, s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	p.Pin(&s[0])
	return unsafe.Pointer(&s[0])
}

// Strides locate rows in a Tensor or an Output: row h of token t of layer l
// is at Offset + l*LayerStride + t*RowStride + h*HeadStride bytes. Zero
// strides mean packed: HeadStride 0 is one head row, RowStride 0 is the
// heads of one token back to back, LayerStride 0 is one layer's tokens back
// to back.
type Strides struct {
	Offset      uint64 // bytes to the first value
	RowStride   uint64 // bytes between tokens; 0 = packed
	HeadStride  uint64 // bytes between heads of one token; 0 = packed
	LayerStride uint64 // bytes between layers for AllLayers calls; 0 = packed
}

// extent returns the bytes the rows reach: the last row's end.
func (s Strides) extent(rowBytes, nTok, nHeads, nLayers uint64) uint64 {
	if nTok == 0 || nHeads == 0 || nLayers == 0 {
		return 0
	}
	hs := s.HeadStride
	if hs == 0 {
		hs = rowBytes
	}
	rs := s.RowStride
	if rs == 0 {
		rs = nHeads * hs
	}
	ls := s.LayerStride
	if ls == 0 {
		ls = max(nTok*rs, nHeads*hs)
	}
	return s.Offset + (nLayers-1)*ls + (nTok-1)*rs + (nHeads-1)*hs + rowBytes
}

// Tensor is data for kvrt to read (kvrt_tensor_ref): for each token one row
// per head. Set exactly one of F32, F16, Raw (host data, read during the
// call only) and Buffer.
type Tensor struct {
	F32    []float32 // host values, f32
	F16    []uint16  // host values, f16 bits
	Raw    []byte    // host rows already in the cache's stored Type (e.g. from ReadRaw)
	Buffer *Buffer   // device data of element type Type
	// Type is the element type of Raw or Buffer data (for Buffer, zero means
	// TypeF32); it is implied for F32 and F16.
	Type Type
	Strides
}

// HostF32 returns a Tensor of packed host f32 values.
func HostF32(data []float32) Tensor { return Tensor{F32: data} }

// HostF16 returns a Tensor of packed host f16 values (IEEE binary16 bits).
func HostF16(data []uint16) Tensor { return Tensor{F16: data} }

// tensorGeom is what a call reads: rows of dim values, nHeads per token.
type tensorGeom struct {
	dim     uint32
	nTok    uint64
	nHeads  uint64
	nLayers uint64
}

func (t *Tensor) elemType() Type {
	switch {
	case t.F32 != nil:
		return TypeF32
	case t.F16 != nil:
		return TypeF16
	case t.Type == TypeUndefined:
		return TypeF32
	}
	return t.Type
}

// toC checks the tensor against the geometry and fills a pinned
// kvrt_tensor_ref; it returns the buffer's state to lock, if any.
func (t *Tensor) toC(op, name string, p *runtime.Pinner, g tensorGeom) (*C.kvrt_tensor_ref, *bufRef, error) {
	set := 0
	for _, b := range []bool{t.F32 != nil, t.F16 != nil, t.Raw != nil, t.Buffer != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		return nil, nil, argError(op, "%s: set exactly one of F32, F16, Raw and Buffer", name)
	}
	r := new(C.kvrt_tensor_ref)
	*r = C.go_tensor_ref_init()
	et := t.elemType()
	r.element_type = C.kvrt_type(et)
	r.offset = C.uint64_t(t.Offset)
	r.row_stride = C.uint64_t(t.RowStride)
	r.head_stride = C.uint64_t(t.HeadStride)
	r.layer_stride = C.uint64_t(t.LayerStride)
	var bo *bufRef
	if t.Buffer != nil {
		bo = &bufRef{o: t.Buffer.o, slot: &r.buffer}
	} else {
		rowBytes := et.RowBytes(g.dim)
		if rowBytes == 0 {
			return nil, nil, argError(op, "%s: %d values are not whole blocks of %v", name, g.dim, et)
		}
		var host unsafe.Pointer
		var have uint64
		switch {
		case t.F32 != nil:
			host, have = pinSlice(p, t.F32), 4*uint64(len(t.F32))
		case t.F16 != nil:
			host, have = pinSlice(p, t.F16), 2*uint64(len(t.F16))
		default:
			host, have = pinSlice(p, t.Raw), uint64(len(t.Raw))
		}
		if need := t.Strides.extent(rowBytes, g.nTok, g.nHeads, g.nLayers); have < need || host == nil {
			return nil, nil, argError(op, "%s: host data holds %d bytes, the call reads %d", name, have, need)
		}
		r.host = host
	}
	p.Pin(r)
	return r, bo, nil
}

// Output is where kvrt writes results (kvrt_output_ref): for each token one
// row per head. Set exactly one of F32 and F16 (host memory, written only by
// a successful synchronous call) and Buffer.
type Output struct {
	F32    []float32 // host results, f32
	F16    []uint16  // host results, f16 bits
	Buffer *Buffer   // device results of element type Type
	Type   Type      // for Buffer: TypeF32 (the zero value's meaning) or TypeF16
	Strides
}

// toC is Tensor.toC for outputs.
func (o *Output) toC(op string, p *runtime.Pinner, g tensorGeom) (*C.kvrt_output_ref, *bufRef, error) {
	set := 0
	for _, b := range []bool{o.F32 != nil, o.F16 != nil, o.Buffer != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		return nil, nil, argError(op, "out: set exactly one of F32, F16 and Buffer")
	}
	r := new(C.kvrt_output_ref)
	*r = C.go_output_ref_init()
	r.offset = C.uint64_t(o.Offset)
	r.row_stride = C.uint64_t(o.RowStride)
	r.head_stride = C.uint64_t(o.HeadStride)
	r.layer_stride = C.uint64_t(o.LayerStride)
	var bo *bufRef
	switch {
	case o.Buffer != nil:
		bo = &bufRef{o: o.Buffer.o, slot: &r.buffer}
		if o.Type != TypeUndefined {
			r.element_type = C.kvrt_type(o.Type)
		}
	default:
		et, es := TypeF32, uint64(4)
		var host unsafe.Pointer
		var have uint64
		if o.F16 != nil {
			et, es = TypeF16, 2
			host, have = pinSlice(p, o.F16), 2*uint64(len(o.F16))
		} else {
			host, have = pinSlice(p, o.F32), 4*uint64(len(o.F32))
		}
		r.element_type = C.kvrt_type(et)
		if need := o.Strides.extent(es*uint64(g.dim), g.nTok, g.nHeads, g.nLayers); have < need || host == nil {
			return nil, nil, argError(op, "out: host memory holds %d bytes, the call writes %d", have, need)
		}
		r.host = host
	}
	p.Pin(r)
	return r, bo, nil
}

// bufRef is a buffer a C struct names: its handle is written into slot once
// the buffer is locked (it may be closed until then).
type bufRef struct {
	o    *objState
	slot *C.kvrt_buffer
}

// bufObjs returns the states of the non-nil refs, to lock.
func bufObjs(refs ...*bufRef) []*objState {
	var out []*objState
	for _, r := range refs {
		if r != nil {
			out = append(out, r.o)
		}
	}
	return out
}

// fillBuffers writes the handles of locked buffers into their structs.
func fillBuffers(refs ...*bufRef) {
	for _, r := range refs {
		if r != nil {
			*r.slot = C.kvrt_buffer(r.o.h)
		}
	}
}

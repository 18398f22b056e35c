package kvrt

// #include "kvrt_go.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// MemorySource says where initial MK or MV values come from (kvrt_memory_source).
type MemorySource int32

// The sources of initial values.
const (
	SourceZero   MemorySource = C.KVRT_MEMORY_SOURCE_ZERO   // all zero
	SourceHost   MemorySource = C.KVRT_MEMORY_SOURCE_HOST   // MemoryInit.F32 or F16
	SourceBuffer MemorySource = C.KVRT_MEMORY_SOURCE_BUFFER // MemoryInit.Buffer at Offset
	SourceSeed   MemorySource = C.KVRT_MEMORY_SOURCE_SEED   // pseudo-random in [-1, 1)
)

// MemoryInit gives initial MK or MV values (kvrt_memory_init): Layers*Heads
// blocks of Slots rows of KeyDim (MK) or ValueDim (MV) values. The source is
// inferred: F32 or F16 set means SourceHost, Buffer SourceBuffer, otherwise
// Source (zero: SourceZero).
type MemoryInit struct {
	Source MemorySource
	F32    []float32 // host values
	F16    []uint16  // host values, f16 bits
	Buffer *Buffer   // device values of element type Type (zero: F32)
	Type   Type
	Offset uint64 // bytes into Buffer; a multiple of 4
	Seed   uint64 // SourceSeed
}

// MemoryOptions configures Context.NewMemory (kvrt_memory_desc). Zero fields
// take the defaults of KVRT_MEMORY_DESC_INIT.
type MemoryOptions struct {
	Layers      uint32
	Heads       uint32
	Slots       uint32 // M: key and value vectors per layer and head
	KeyDim      uint32 // E: size of MK rows, wq and q
	ValueDim    uint32 // D: size of MV rows, wv and outputs; 0 = KeyDim
	MaxSeqs     uint32 // sequence ids are 0..MaxSeqs-1; 0 = 1
	StateType   Type   // precision of MV: TypeF32 (zero) or TypeF16
	ChunkTokens uint32 // tokens per chunk, 1..512; 0 = 512
	Keys        *MemoryInit
	Values      *MemoryInit
	Label       string
}

// Memory is a fixed-capacity MV/MK memory (kvrt_memory): per layer and head,
// Slots keys shared by all sequences and, per sequence, Slots values (its
// state), updated by each token and read as attention over them. Memory and
// time per token are constant however long the input.
//
// Experimental: kvrt.h marks this section experimental; it may change in any
// minor release of the library, and this type with it.
//
// Concurrency: a Memory is safe for concurrent use; its calls are serialized
// (kvrt.h: memories are used by one thread at a time).
type Memory struct {
	ctx *Context
	o   *objState

	layers, heads, slots, keyDim, valueDim uint32
}

func (m *MemoryOptions) desc(op string, p *runtime.Pinner) (*C.kvrt_memory_desc, []*bufRef, func(), error) {
	d := new(C.kvrt_memory_desc)
	*d = C.go_memory_desc_init()
	d.n_layers, d.n_heads, d.n_slots = C.uint32_t(m.Layers), C.uint32_t(m.Heads), C.uint32_t(m.Slots)
	d.key_dim, d.value_dim, d.max_seqs = C.uint32_t(m.KeyDim), C.uint32_t(m.ValueDim), C.uint32_t(m.MaxSeqs)
	if m.StateType != TypeUndefined {
		d.state_type = C.kvrt_type(m.StateType)
	}
	d.chunk_tokens = C.uint32_t(m.ChunkTokens)
	vd := m.ValueDim
	if vd == 0 {
		vd = m.KeyDim
	}
	var refs []*bufRef
	mk := func(in *MemoryInit, dim uint32, name string) (*C.kvrt_memory_init, error) {
		if in == nil {
			return nil, nil
		}
		c := new(C.kvrt_memory_init)
		*c = C.go_memory_init_init()
		c.source = C.kvrt_memory_source(in.Source)
		want := uint64(m.Layers) * uint64(m.Heads) * uint64(m.Slots) * uint64(dim)
		switch {
		case in.F32 != nil:
			if uint64(len(in.F32)) != want {
				return nil, argError(op, "%s: %d values, the memory needs %d", name, len(in.F32), want)
			}
			c.source, c.element_type, c.host = C.KVRT_MEMORY_SOURCE_HOST, C.KVRT_TYPE_F32, pinSlice(p, in.F32)
		case in.F16 != nil:
			if uint64(len(in.F16)) != want {
				return nil, argError(op, "%s: %d values, the memory needs %d", name, len(in.F16), want)
			}
			c.source, c.element_type, c.host = C.KVRT_MEMORY_SOURCE_HOST, C.KVRT_TYPE_F16, pinSlice(p, in.F16)
		case in.Buffer != nil:
			c.source = C.KVRT_MEMORY_SOURCE_BUFFER
			if in.Type != TypeUndefined {
				c.element_type = C.kvrt_type(in.Type)
			}
			c.offset = C.uint64_t(in.Offset)
			refs = append(refs, &bufRef{o: in.Buffer.o, slot: &c.buffer})
		case in.Source == SourceHost:
			return nil, argError(op, "%s: SourceHost without F32 or F16 data", name)
		}
		c.seed = C.uint64_t(in.Seed)
		p.Pin(c)
		return c, nil
	}
	var err error
	if d.keys, err = mk(m.Keys, m.KeyDim, "Keys"); err != nil {
		return nil, nil, nil, err
	}
	if d.values, err = mk(m.Values, vd, "Values"); err != nil {
		return nil, nil, nil, err
	}
	free := func() {}
	if m.Label != "" {
		cs := C.CString(m.Label)
		d.label = cs
		free = func() { C.free(unsafe.Pointer(cs)) }
	}
	p.Pin(d)
	return d, refs, free, nil
}

// NewMemory creates a memory, every sequence in the initial state
// (kvrt_memory_create). Safe for concurrent use.
func (c *Context) NewMemory(opts MemoryOptions) (*Memory, error) {
	const op = "kvrt_memory_create"
	var p runtime.Pinner
	defer p.Unpin()
	d, refs, free, err := opts.desc(op, &p)
	if err != nil {
		return nil, err
	}
	defer free()
	g, err := lockObjs(op, c.s, bufObjs(refs...)...)
	if err != nil {
		return nil, err
	}
	defer g.unlock()
	fillBuffers(refs...)
	var h C.kvrt_memory
	if err := call(op, func() C.kvrt_result { return C.kvrt_memory_create(c.handle(), d, &h) }); err != nil {
		return nil, err
	}
	runtime.KeepAlive(c)
	o := &objState{h: unsafe.Pointer(h), what: "memory", exclusive: true,
		destroy: func(p unsafe.Pointer) { C.kvrt_memory_destroy(C.kvrt_memory(p)) }}
	c.s.register(o)
	m := &Memory{ctx: c, o: o, layers: opts.Layers, heads: opts.Heads, slots: opts.Slots,
		keyDim: opts.KeyDim, valueDim: uint32(d.value_dim)}
	if m.valueDim == 0 {
		m.valueDim = m.keyDim
	}
	runtime.AddCleanup(m, func(o *objState) { o.close() }, o)
	return m, nil
}

// Close destroys the memory (kvrt_memory_destroy). Idempotent; always
// returns nil.
func (m *Memory) Close() error {
	m.o.close()
	runtime.KeepAlive(m)
	return nil
}

// MemoryBatch is a batch of tokens for Memory.Update, Read and UpdateRead
// (kvrt_memory_batch): each tensor holds, for each layer of the call,
// NTokens tokens of Heads rows of KeyDim (WQ, Q) or ValueDim (WV, Out)
// values; F32 or F16, packed or with packed strides.
type MemoryBatch struct {
	NTokens uint32
	SeqIDs  []int32 // NTokens sequence ids; nil: all in sequence 0
	Layer   int32   // a layer, or AllLayers
	WQ, WV  *Tensor // update keys and values
	Q       *Tensor // read queries
	Out     *Output // read outputs
	Scale   float32 // read scale; 0 = 1/sqrt(KeyDim)
}

func (m *Memory) batch(op string, p *runtime.Pinner, b *MemoryBatch, update, read bool) (*C.kvrt_memory_batch, []*bufRef, error) {
	nl := uint64(1)
	if b.Layer == AllLayers {
		nl = uint64(m.layers)
	} else if b.Layer < 0 || uint64(b.Layer) >= uint64(m.layers) {
		return nil, nil, argError(op, "layer %d out of range (the memory has %d)", b.Layer, m.layers)
	}
	if b.SeqIDs != nil && len(b.SeqIDs) != int(b.NTokens) {
		return nil, nil, argError(op, "%d sequence ids for %d tokens", len(b.SeqIDs), b.NTokens)
	}
	c := new(C.kvrt_memory_batch)
	*c = C.go_memory_batch_init()
	c.n_tokens = C.uint32_t(b.NTokens)
	c.seq_ids = (*C.int32_t)(pinSlice(p, b.SeqIDs))
	c.layer = C.int32_t(b.Layer)
	c.scale = C.float(b.Scale)
	n, h := uint64(b.NTokens), uint64(m.heads)
	var refs []*bufRef
	in := func(t *Tensor, name string, dim uint32) (*C.kvrt_tensor_ref, error) {
		if t == nil {
			return nil, argError(op, "%s is missing", name)
		}
		r, br, err := t.toC(op, name, p, tensorGeom{dim, n, h, nl})
		if br != nil {
			refs = append(refs, br)
		}
		return r, err
	}
	var err error
	if update {
		if c.wq, err = in(b.WQ, "WQ", m.keyDim); err != nil {
			return nil, nil, err
		}
		if c.wv, err = in(b.WV, "WV", m.valueDim); err != nil {
			return nil, nil, err
		}
	}
	if read {
		if c.q, err = in(b.Q, "Q", m.keyDim); err != nil {
			return nil, nil, err
		}
		if b.Out == nil {
			return nil, nil, argError(op, "Out is missing")
		}
		r, br, err := b.Out.toC(op, p, tensorGeom{m.valueDim, n, h, nl})
		if err != nil {
			return nil, nil, err
		}
		if br != nil {
			refs = append(refs, br)
		}
		c.out = r
	}
	p.Pin(c)
	return c, refs, nil
}

func (m *Memory) run(op string, s *Stream, refs []*bufRef, f func(h C.kvrt_memory, sh C.kvrt_stream) C.kvrt_result) error {
	objs := []*objState{m.o}
	if s != nil {
		objs = append(objs, s.o)
	}
	g, err := lockObjs(op, m.o.ctx, append(objs, bufObjs(refs...)...)...)
	if err != nil {
		return err
	}
	defer g.unlock()
	fillBuffers(refs...)
	var sh C.kvrt_stream
	if s != nil {
		sh = s.handle()
		s.tie(m.o)
	}
	err = call(op, func() C.kvrt_result { return f(C.kvrt_memory(m.o.h), sh) })
	runtime.KeepAlive(m)
	runtime.KeepAlive(s)
	return err
}

func (m *Memory) do(op string, s *Stream, b *MemoryBatch, update, read bool,
	f func(C.kvrt_memory, C.kvrt_stream, *C.kvrt_memory_batch) C.kvrt_result) error {
	var p runtime.Pinner
	defer p.Unpin()
	cb, refs, err := m.batch(op, &p, b, update, read)
	if err != nil {
		return err
	}
	return m.run(op, s, refs, func(h C.kvrt_memory, sh C.kvrt_stream) C.kvrt_result { return f(h, sh, cb) })
}

// Update folds the batch's WQ and WV into its sequences' states
// (kvrt_memory_update); all or nothing.
func (m *Memory) Update(s *Stream, b MemoryBatch) error {
	return m.do("kvrt_memory_update", s, &b, true, false,
		func(h C.kvrt_memory, sh C.kvrt_stream, cb *C.kvrt_memory_batch) C.kvrt_result {
			return C.kvrt_memory_update(h, sh, cb)
		})
}

// Read reads the current states with the queries Q into Out
// (kvrt_memory_read); changes no state.
func (m *Memory) Read(s *Stream, b MemoryBatch) error {
	return m.do("kvrt_memory_read", s, &b, false, true,
		func(h C.kvrt_memory, sh C.kvrt_stream, cb *C.kvrt_memory_batch) C.kvrt_result {
			return C.kvrt_memory_read(h, sh, cb)
		})
}

// UpdateRead updates and reads in one pass: each token first updates its
// sequence's state, then reads it (kvrt_memory_update_read).
func (m *Memory) UpdateRead(s *Stream, b MemoryBatch) error {
	return m.do("kvrt_memory_update_read", s, &b, true, true,
		func(h C.kvrt_memory, sh C.kvrt_stream, cb *C.kvrt_memory_batch) C.kvrt_result {
			return C.kvrt_memory_update_read(h, sh, cb)
		})
}

// SeqRm returns sequence seq (every sequence for seq < 0) to the initial
// state (kvrt_memory_seq_rm).
func (m *Memory) SeqRm(s *Stream, seq int32) error {
	return m.run("kvrt_memory_seq_rm", s, nil, func(h C.kvrt_memory, sh C.kvrt_stream) C.kvrt_result {
		return C.kvrt_memory_seq_rm(h, sh, C.int32_t(seq))
	})
}

// SeqCp makes dst a copy of the state of src (kvrt_memory_seq_cp).
func (m *Memory) SeqCp(s *Stream, src, dst int32) error {
	return m.run("kvrt_memory_seq_cp", s, nil, func(h C.kvrt_memory, sh C.kvrt_stream) C.kvrt_result {
		return C.kvrt_memory_seq_cp(h, sh, C.int32_t(src), C.int32_t(dst))
	})
}

// State returns the state MV of seq at layer as f32: Heads*Slots*ValueDim
// values, head-major, row-major (kvrt_memory_get_state). For tests and
// debugging.
func (m *Memory) State(seq int32, layer int32) ([]float32, error) {
	out := make([]float32, int(m.heads)*int(m.slots)*int(m.valueDim))
	if layer < 0 || uint64(layer) >= uint64(m.layers) {
		return nil, argError("kvrt_memory_get_state", "layer %d out of range (the memory has %d)", layer, m.layers)
	}
	err := m.run("kvrt_memory_get_state", nil, nil, func(h C.kvrt_memory, _ C.kvrt_stream) C.kvrt_result {
		return C.kvrt_memory_get_state(h, C.int32_t(seq), C.int32_t(layer), (*C.float)(slicePtr(out)),
			C.uint64_t(len(out))*4)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MemoryEstimate gives the sizes of a memory before it is created
// (kvrt_memory_estimate).
type MemoryEstimate struct {
	// DeviceBytes is the device memory NewMemory allocates: the keys, two
	// state slots per sequence and layer, the initial values (unless zero)
	// and the working memory of one chunk, whatever the tokens processed.
	DeviceBytes uint64
	// StateBytesPerSeq is the device bytes of one sequence's state over all
	// layers (one slot), alignment padding included.
	StateBytesPerSeq uint64
	// MaxBindingBytes is the largest binding the estimate assumed.
	MaxBindingBytes uint64
}

// EstimateMemory computes the sizes of a memory without a context (the
// binding limit is taken as 128 MiB); see Context.EstimateMemory.
func EstimateMemory(opts MemoryOptions) (MemoryEstimate, error) { return estimateMemory(nil, opts) }

// EstimateMemory computes the sizes of a memory for opts on this context's
// device without allocating anything (kvrt_memory_estimate_size). Initial
// values given in a Buffer count as such but the buffer is not read. Safe
// for concurrent use.
func (c *Context) EstimateMemory(opts MemoryOptions) (MemoryEstimate, error) {
	return estimateMemory(c, opts)
}

func estimateMemory(c *Context, opts MemoryOptions) (MemoryEstimate, error) {
	const op = "kvrt_memory_estimate_size"
	var p runtime.Pinner
	defer p.Unpin()
	d, refs, free, err := opts.desc(op, &p)
	if err != nil {
		return MemoryEstimate{}, err
	}
	defer free()
	var h C.kvrt_context
	if c != nil {
		g, err := lockObjs(op, c.s, bufObjs(refs...)...)
		if err != nil {
			return MemoryEstimate{}, err
		}
		defer g.unlock()
		h = c.handle()
	} else if len(refs) != 0 {
		return MemoryEstimate{}, argError(op, "initial values in a Buffer need a context")
	}
	fillBuffers(refs...)
	e := C.go_memory_estimate_init()
	err = call(op, func() C.kvrt_result { return C.kvrt_memory_estimate_size(h, d, &e) })
	runtime.KeepAlive(c)
	return MemoryEstimate{uint64(e.device_bytes), uint64(e.state_bytes_per_seq), uint64(e.max_binding_bytes)}, err
}

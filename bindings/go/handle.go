package kvrt

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// ctxState is what a Context owns, apart from the *Context itself, so that a
// cleanup can receive it without keeping the Context reachable.
//
// Locking: every call on the context or on one of its objects holds mu for
// reading; destroying the context holds it for writing, so it waits for those
// calls (kvrt_context_destroy "needs every other call on the context and on
// its objects to have returned"). Objects are then locked in this order:
// caches and memories (by id), streams, buffers.
type ctxState struct {
	mu       sync.RWMutex
	h        unsafe.Pointer // kvrt_context; nil once destroyed
	logh     uintptr        // cgo.Handle of the log function; 0 if none
	childMu  sync.Mutex
	children map[*objState]struct{}
}

var nextID atomic.Uint64

// objState is the state of a Buffer, Stream, Cache or Memory.
type objState struct {
	mu        sync.RWMutex
	h         unsafe.Pointer // the C handle; nil once destroyed
	ctx       *ctxState
	id        uint64 // lock order between objects of one kind
	what      string // "buffer", "stream", "cache" or "memory"
	exclusive bool   // calls take mu for writing (kvrt.h: Unsafe per handle)
	borrowed  bool   // owned by another object (a static window's buffer)
	destroy   func(unsafe.Pointer)

	// Caches only: the buffers of static windows, invalid with the cache.
	deps []*objState

	// Streams only: the caches and memories of the open recording, by id.
	tiedMu sync.Mutex
	tied   []*objState
}

func (s *ctxState) register(o *objState) {
	o.ctx = s
	o.id = nextID.Add(1)
	s.childMu.Lock()
	s.children[o] = struct{}{}
	s.childMu.Unlock()
}

// close destroys the object, once; a no-op after the context was destroyed
// (which destroyed the object with it).
func (o *objState) close() {
	o.ctx.mu.RLock()
	defer o.ctx.mu.RUnlock()
	o.mu.Lock()
	h := o.h
	o.h = nil
	deps := o.deps
	o.deps = nil
	o.mu.Unlock()
	if h == nil {
		return
	}
	o.ctx.childMu.Lock()
	for _, d := range deps {
		d.mu.Lock()
		d.h = nil
		d.mu.Unlock()
		delete(o.ctx.children, d)
	}
	o.ctx.childMu.Unlock()
	if !o.borrowed {
		o.destroy(h)
	}
	o.ctx.childMu.Lock()
	delete(o.ctx.children, o)
	o.ctx.childMu.Unlock()
}

// guard holds the locks of one call: the context's (shared) and those of the
// objects the call uses.
type guard struct {
	ctx  *ctxState
	objs []*objState
	excl []bool
}

// lockObjs locks the context for reading, then each non-nil object in the
// order given (the caller passes them in lock order), for writing when
// exclusive, and checks that all are open and belong to the context.
// Duplicates are locked once.
func lockObjs(op string, ctx *ctxState, objs ...*objState) (*guard, error) {
	return lockObjsOpt(op, ctx, 0, objs...)
}

// lockObjsOpt is lockObjs where the first nOpt objects may be closed (the
// caches and memories tied to a stream's recording, locked but not used).
func lockObjsOpt(op string, ctx *ctxState, nOpt int, objs ...*objState) (*guard, error) {
	g := &guard{ctx: ctx}
	ctx.mu.RLock()
	if ctx.h == nil {
		ctx.mu.RUnlock()
		return nil, closedError(op, "context")
	}
next:
	for i, o := range objs {
		if o == nil {
			continue
		}
		for _, h := range g.objs {
			if h == o {
				continue next
			}
		}
		if o.ctx != ctx {
			g.unlock()
			return nil, argError(op, "the %s belongs to another context", o.what)
		}
		if o.exclusive {
			o.mu.Lock()
		} else {
			o.mu.RLock()
		}
		g.objs = append(g.objs, o)
		g.excl = append(g.excl, o.exclusive)
		if o.h == nil && i >= nOpt {
			g.unlock()
			return nil, closedError(op, o.what)
		}
	}
	return g, nil
}

func (g *guard) unlock() {
	for i := len(g.objs) - 1; i >= 0; i-- {
		if g.excl[i] {
			g.objs[i].mu.Unlock()
		} else {
			g.objs[i].mu.RUnlock()
		}
	}
	g.ctx.mu.RUnlock()
}

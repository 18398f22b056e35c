// Package kvrt is the Go binding of kvrt, a Vulkan compute runtime that owns
// an LLM's key/value cache on the GPU and runs the cache's kernels. It wraps
// the C ABI of kvrt/kvrt.h.
//
// # Building
//
// The package uses cgo and finds the library with pkg-config (package
// "kvrt"); point PKG_CONFIG_PATH at <prefix>/lib/pkgconfig of an installed
// kvrt. Without pkg-config, build with the kvrt_nopkgconfig tag and give the
// folders yourself:
//
//	CGO_CFLAGS=-I<prefix>/include CGO_LDFLAGS=-L<prefix>/lib go build -tags kvrt_nopkgconfig
//
// At run time the shared library must be found (LD_LIBRARY_PATH or an rpath).
//
// To use a library folder that has no pkg-config file, such as a build tree,
// the same tag works with that folder and the repository's include folder:
//
//	CGO_CFLAGS=-I<kvrt>/include CGO_LDFLAGS="-L<kvrt>/build/lib -Wl,-rpath,<kvrt>/build/lib" \
//	    go build -tags kvrt_nopkgconfig
//
// # What is not bound
//
// kvrt/kvrt_vulkan.h, the Vulkan interop header, is not bound: its functions
// take and return Vulkan handles (VkDevice, VkBuffer, VkCommandBuffer, ...), which
// only a program that owns a Vulkan device can supply or use, and which no Go
// type of this package could carry safely. A Go program that owns a Vulkan
// device already uses a Vulkan binding; it calls kvrt_vulkan.h through cgo
// directly, with this package's headers and library on its include and link
// paths.
//
// # Objects and lifetimes
//
// A Context (a device) creates Buffers, Streams, Caches and Memories. Every
// object has an idempotent Close; a cleanup (runtime.AddCleanup) destroys
// objects that become unreachable without it, as a safety net. Objects keep
// their Context reachable. Closing a Context destroys all its objects, as the
// C library does; their methods then return an error matching
// ErrInvalidHandle and their Close returns nil.
//
// # Concurrency
//
// kvrt.h's threading model is Vulkan's: objects are externally synchronized
// per handle. This package does that synchronization: every type is safe for
// concurrent use. Calls on one Cache, Memory or Stream are serialized; Buffer
// calls and the Context's creation and query calls run concurrently, as
// kvrt.h allows; calls on different objects of one context run in parallel.
// Closing an object waits for the calls in progress on it.
//
// # Memory
//
// Host slices are passed to C only for the duration of a synchronous call
// (pinned with runtime.Pinner where a C struct points to them); the library
// copies host inputs during the call and writes host outputs only in
// synchronous calls, so it never keeps a Go pointer. Slice lengths are
// checked against what each call reads or writes before it runs.
//
// # State
//
// Cache.StateSave and Cache.StateLoad (and their file and swap variants)
// save and load the cells of a whole cache, or of one sequence, as bytes in
// the format of kvrt/kvrt_state.h: each cell's position and sequences and
// each layer's K and V rows in the stored type, bit for bit, little-endian
// on every platform and checked by a checksum. A state loads into a cache of
// the same Layers, KVHeads, head dims and RoPE mode, whatever its types,
// layout and capacity. Cache.SeqSwapOut and Cache.SeqSwapIn move a sequence
// to host memory and back.
//
// # Errors
//
// Failed calls return *Error, with the library's code and detail message;
// errors.Is(err, ErrCacheFull) and the other Err* codes work on it.
package kvrt

package kvrt_test

import (
	"errors"
	"fmt"
	"log"

	kvrt "github.com/kvrt/kvrt/bindings/go"
)

// The basic loop of an inference engine: store the K/V rows of a prompt,
// then run attention for a query. One layer, two query heads sharing one KV
// head, head dimension 8.
func Example() {
	ctx, err := kvrt.NewContext(kvrt.ContextOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()

	cache, err := ctx.NewCache(kvrt.CacheOptions{Layers: 1, Heads: 2, KVHeads: 1, HeadDimK: 8, Capacity: 64})
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()

	// Three tokens of sequence 0 at positions 0..2: one K and one V row each.
	k := make([]float32, 3*8)
	v := make([]float32, 3*8)
	for t := 0; t < 3; t++ {
		for d := 0; d < 8; d++ {
			k[t*8+d] = float32((t+d)%3) / 4
			v[t*8+d] = float32(t)
		}
	}
	if _, err := cache.Store(nil, kvrt.SeqBatch(0, 0, 3), 0, kvrt.HostF32(k), kvrt.HostF32(v)); err != nil {
		log.Fatal(err)
	}

	// A query at position 2 sees all three tokens; the values are 0, 1 and 2,
	// so the result is their softmax-weighted mean.
	q := make([]float32, 2*8) // all zero: equal weights
	out := make([]float32, 2*8)
	err = cache.Attention(nil, 0, kvrt.SeqBatch(0, 2, 1), kvrt.HostF32(q), kvrt.Output{F32: out}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%.3f %.3f\n", out[0], out[8])
	// Output: 1.000 1.000
}

// Errors carry the library's code and message; errors.Is matches the code.
func ExampleError() {
	ctx, err := kvrt.NewContext(kvrt.ContextOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	cache, err := ctx.NewCache(kvrt.CacheOptions{Layers: 1, Heads: 1, KVHeads: 1, HeadDimK: 8, Capacity: 1})
	if err != nil {
		log.Fatal(err)
	}
	rows := make([]float32, 2*8)
	_, err = cache.Store(nil, kvrt.SeqBatch(0, 0, 2), 0, kvrt.HostF32(rows), kvrt.HostF32(rows))
	fmt.Println(errors.Is(err, kvrt.ErrCacheFull))
	cache.Close()
	_, err = cache.Info()
	fmt.Println(errors.Is(err, kvrt.ErrInvalidHandle))
	// Output:
	// true
	// true
}

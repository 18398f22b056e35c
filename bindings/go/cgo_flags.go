package kvrt

// The package binds the experimental parts of kvrt's headers too (Memory,
// whose documentation says what may change): every C file of the package,
// log.c included, sees them.

// #cgo CFLAGS: -DKVRT_EXPERIMENTAL
import "C"

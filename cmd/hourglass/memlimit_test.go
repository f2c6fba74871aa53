package main

import (
	"math"
	"testing"
)

func TestMemoryLimit(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		base, live uint64
		want       int64
	}{
		{256 * mib, 0, 256 * mib},
		{256 * mib, 40 * mib, 256 * mib},
		{256 * mib, 128 * mib, 256 * mib}, // half of base: still base
		{256 * mib, 129 * mib, 258 * mib}, // above half: twice the live heap
		{256 * mib, 4096 * mib, 8192 * mib},
		{256 * mib, math.MaxUint64 / 2, math.MaxInt64},
	} {
		if got := memoryLimit(c.base, c.live); got != c.want {
			t.Errorf("memoryLimit(%d MiB, %d MiB) = %d, want %d", c.base/mib, c.live/mib, got, c.want)
		}
	}
}

package main

import "testing"

func TestShouldRelease(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name       string
		idle       bool
		held, live uint64
		want       bool
	}{
		{"idle_burst_left_behind", true, 300 * mib, 10 * mib, true},
		{"busy", false, 300 * mib, 10 * mib, false},
		{"little_to_give", true, 20 * mib, 10 * mib, false},
		{"just_over_the_minimum", true, 27 * mib, 10 * mib, true},
		{"large_live_heap_small_excess", true, 1100 * mib, 1000 * mib, false},
		{"large_live_heap_large_excess", true, 1300 * mib, 1000 * mib, true},
		{"held_below_live", true, 5 * mib, 10 * mib, false},
	} {
		if got := shouldRelease(c.idle, c.held, c.live); got != c.want {
			t.Errorf("%s: shouldRelease(%v, %d MiB, %d MiB) = %v, want %v", c.name, c.idle, c.held/mib, c.live/mib, got, c.want)
		}
	}
}

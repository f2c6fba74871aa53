package crashtest

// Small judgements that Check and the other rules share.

import (
	"fmt"
	"strconv"
	"time"
)

// ackCutBetween reports whether the topic's ack log was cut after from and
// before to.
func ackCutBetween(ats []time.Time, from, to time.Time) bool {
	for _, at := range ats {
		if at.After(from) && at.Before(to) {
			return true
		}
	}
	return false
}

func attemptWord(a uint32) string {
	if a == 0 {
		return "first attempt"
	}
	return fmt.Sprintf("attempt %d", a)
}

// seqOf returns the commitlog offset in a message ID (its last 16 hex
// digits), or -1.
func seqOf(id string) int64 {
	if len(id) != 32 {
		return -1
	}
	v, err := strconv.ParseUint(id[16:], 16, 63)
	if err != nil {
		return -1
	}
	return int64(v)
}

// cancelInDoubt reports whether a Cancel of the message failed in a way
// that leaves its effect unknown.
func cancelInDoubt(cs []*Cancel) bool {
	for _, x := range cs {
		if x.Outcome == InDoubt {
			return true
		}
	}
	return false
}

package catalog

import (
	"encoding/binary"
	"slices"

	"github.com/hourglassmq/hourglass/message"
)

// putID writes id as 16 big-endian bytes (deliverAt, seq): the keys of
// the Moved table sort by delivery time.
func putID(b []byte, id message.ID) {
	binary.BigEndian.PutUint64(b[0:8], uint64(id.DeliverAt))
	binary.BigEndian.PutUint64(b[8:16], id.Seq)
}

func getID(b []byte) message.ID {
	return message.ID{DeliverAt: int64(binary.BigEndian.Uint64(b[0:8])), Seq: binary.BigEndian.Uint64(b[8:16])}
}

func sortStrings(s []string) { slices.Sort(s) }

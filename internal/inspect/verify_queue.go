package inspect

import (
	"errors"
	"fmt"

	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/segfile"
)

// queueTopic checks what a queue topic's two logs (in tdir) say about each
// other, beyond the damage inside each that commitlog finds: an ack log
// that is gone or lost the checkpoint its retention relied on, and a
// queue log that ends below what the ack log names (records the queue
// acknowledged are gone, so the queue refuses to start) or lacks messages
// a checkpoint still holds out.
func (v *verifier) queueTopic(tdir string) error {
	found, err := queue.VerifyTopic(tdir)
	if err != nil {
		return fmt.Errorf("%s: %w", v.o.rel(tdir), err)
	}
	for _, f := range found {
		ce, ok := errors.AsType[*segfile.CorruptionError](f)
		if !ok {
			v.problem(tdir, -1, Corruption, v.o.relErr(f))
			continue
		}
		v.problem(ce.Path, ce.Offset, Corruption, v.o.relErr(ce.Err))
	}
	return nil
}

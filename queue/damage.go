package queue

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hourglassmq/hourglass/segfile"
)

// minEnd is the queue-log offset the ack log says the queue log reaches:
// past the last checkpoint's end and cursor and past every record named
// by its entries or by an ack after it. Those records were durable when
// the ack log named them, so a queue log that ends below it lost them.
func (r *replayer) minEnd() int64 {
	if !r.have && len(r.acks) == 0 {
		return 0
	}
	end := max(r.ck.end, r.ck.cursor)
	if n := len(r.ck.entries); n > 0 {
		end = max(end, r.ck.entries[n-1].off+1)
	}
	for _, a := range r.acks {
		end = max(end, a+1)
	}
	return end
}

// repairHint is what an operator does about a damaged queue log.
const repairHint = "the queue does not start on a damaged log: run `hourglass repair --data-dir <data directory>` with the server stopped (it keeps a copy of every file it changes under <data directory>/quarantine/, and says what is lost)"

// damage says what the corruption err in topic's logs (directory dir)
// puts at stake; other errors get the topic's name, unless they have it.
// In the ack log, acks and checkpoints that cannot be read mean acked
// messages could be handed out again; in the queue log, delivered
// messages that cannot be read would be lost.
func damage(topic, dir string, err error) error {
	ce, ok := errors.AsType[*segfile.CorruptionError](err)
	switch {
	case !ok && strings.HasPrefix(err.Error(), "queue: "):
		return err
	case !ok:
		return fmt.Errorf("queue: topic %q: %w", topic, err)
	case isUnder(ce.Path, filepath.Join(dir, "acks")):
		return fmt.Errorf("queue: topic %q: the ack log is damaged: the acks or checkpoint there cannot be read, so messages already acked could be handed out again; %s: %w",
			topic, repairHint, err)
	default:
		return fmt.Errorf("queue: topic %q: the queue log is damaged: messages delivered to the topic there cannot be read and would be lost; %s: %w",
			topic, repairHint, err)
	}
}

// isUnder reports whether path is dir or inside it.
func isUnder(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// hasSegments reports whether the log directory dir holds a segment file.
func hasSegments(dir string) (bool, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			return true, nil
		}
	}
	return false, nil
}

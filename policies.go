package hourglass

import (
	"sync"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// policies applies the topics' durable policies (control records, kept in
// the engine's catalog) to the built-in queue: all of them once recovery
// is done, then each change as reput routes it. The queue hands nothing
// out before the first (queue.Options.HoldReceives).
type policies struct {
	q   *queue.Queue
	log func(msg string, args ...any)
	// mu orders the start-up application with the changes routed
	// meanwhile: each reads the catalog's latest under it.
	mu sync.Mutex
}

// onControl is the engine's OnControl: a policy record sets its topic's
// policy in the queue.
func (p *policies) onControl(c message.Control) {
	if c.Kind != message.ControlPolicy {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.set(string(c.Name), c.Value)
}

func (p *policies) set(topic string, value []byte) {
	pol, err := queue.DecodePolicy(value)
	if err == nil {
		err = p.q.SetPolicy(topic, pol)
	}
	if err != nil {
		p.log("hourglass: a stored topic policy cannot be applied; the topic keeps the defaults", "topic", topic, "err", err)
	}
}

// start applies every stored policy once eng has recovered (the catalog
// then holds the latest of each), and lets the queue hand messages out;
// it closes ready after.
func (p *policies) start(eng *engine.Engine, ready chan<- struct{}) {
	select {
	case <-eng.Ready():
	case <-eng.Refused():
		return
	}
	p.mu.Lock()
	set, err := eng.Settings(catalog.Policies)
	if err != nil {
		p.log("hourglass: reading the topics' policies failed; topics keep the defaults until their policy is set again", "err", err)
	}
	for topic, v := range set {
		p.set(topic, v)
	}
	p.mu.Unlock()
	p.q.ReleaseReceives()
	close(ready)
}

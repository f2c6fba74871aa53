package queue

import "context"

// RedriveOptions say which dead letters a Redrive moves, and where. The
// server's Redrive RPC in cluster mode passes them to the cluster node
// (cluster/jsqueue); on one node it moves dead letters through the engine.
type RedriveOptions struct {
	// To is the topic to move them to; "" means each one's origin (its
	// dead-letter origin header, else the dead-letter topic's name
	// without DLQSuffix).
	To string
	// Match selects the dead letters to move; nil moves all.
	Match func(Message) bool
	// Max bounds the messages moved; 0 means no bound.
	Max int64
	// Wait is called before each move (a rate limit); nil waits not.
	Wait func(context.Context) error
}

// RedriveResult is what a Redrive did.
type RedriveResult struct {
	// Redriven were moved; Skipped did not match and were given back.
	Redriven, Skipped int64
	// More is set when Max stopped it with a matching message left.
	More bool
}

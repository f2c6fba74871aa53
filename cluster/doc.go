// Package cluster runs an Hourglass node of a cluster whose durable state
// lives in NATS JetStream (docs/CLUSTER.md).
//
// Any node accepts Schedule: the messages of one request go, as one intake
// message, to the intake stream of one partition (HG_IN_<p>, subject
// hg.in.<p>), and a message's ID is its delivery time and (partition |
// stream sequence | index in the intake message). The producer is
// answered after JetStream acknowledged the intake message. Partitions are owned through
// leases in the key-value bucket HG_OWNERS; the owner of p rebuilds a
// local engine from HG_IN_<p> minus what HG_DONE_<p> records as delivered
// or cancelled, fires due messages to the delivery stream with their
// cluster ID as Nats-Msg-Id, and records each delivery in HG_DONE_<p>.
// Cancel is decided by the owner; other nodes forward it there.
//
// Guarantees: a message JetStream acknowledged is delivered at least once
// (a takeover can publish again what the old owner published but did not
// record; the delivery stream drops it within its duplicate window);
// nothing is delivered before its time on the owner's clock; Cancel
// answers cancelled only if the message will never be delivered.
package cluster

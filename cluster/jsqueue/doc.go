// Package jsqueue is the built-in queue's consumer side in cluster mode:
// Receive, Ack, Nack and Extend of a topic served from a durable pull
// consumer of JetStream on the delivery stream, so that any cluster node
// serves any topic and any node settles what another handed out
// (docs/CLUSTER.md, "Receiving"), and the queue's management on the same
// consumers: the topic's policy is its consumer's config (AckWait, max
// attempts in its metadata, JetStream's pause), Topics its counts, Purge
// and DeleteTopic purge its subject, Redrive receives dead letters and
// republishes them (docs/CLUSTER.md, "Managing the queue").
//
// Topic T's consumer is named ConsumerName(T) and filters subject Prefix+T
// of the delivery stream, from the stream's first message (DeliverAll):
// every message delivered to T is handed out, whenever its consumer was
// made. JetStream keeps the state:
//
//   - The lease of a received message is the consumer's AckWait; unacked
//     by then, JetStream hands it out again.
//   - A receipt is the delivery's ack subject; Ack and Nack send +ACK or
//     -NAK to it as a request and wait for the consumer leader's answer.
//   - Nack with a delay is JetStream's Nak with a delay: not handed out
//     again before it has passed.
//   - Extend is JetStream's in-progress ack: the AckWait starts again. The
//     new end is noted in the KV bucket HG_EXTENDED, so that any node
//     checking the receipt past its own lease honours it.
//   - The attempt count is JetStream's delivery count minus one (plus the
//     attempt the message was published with). A Nack of a delivery whose
//     count reached the topic's max attempts, or a fetch of a message
//     delivered more often than that (its last lease ran out), moves it
//     to "<T>.dlq": a copy is published to Prefix+"<T>.dlq" on the same
//     stream (with the dead-letter headers of package queue and
//     Nats-Msg-Id "dlq:<stream>:<seq>"), then the original is acked.
//     Dead-letter topics keep their failures. JetStream's own MaxDeliver
//     is not used: it stops redelivering and says so only in an advisory
//     that no node may be listening to.
//
// Guarantees: at least once. A message is handed out again until an Ack
// of it is answered; an Ack answered nil was stored by the consumer's
// leader and replicated to a majority of its replicas (JetStream answers a
// +ACK request once it applied the ack). A receipt acts only until its
// lease ends by the acking node's clock (the lease is taken to start 20 ms
// before the message arrived, since JetStream's AckWait starts when the
// NATS server sends it, so a message is handed out again only after the
// lease its receipt names; nodes' clocks must agree to well within a
// lease); an Ack of an already acked message answers nil.
// A crash while dead-lettering leaves the message in both topics.
//
// It imports package queue for its types, errors and header names, and
// returns gRPC status errors for what a client should retry.
package jsqueue

package server

import (
	"google.golang.org/protobuf/proto"

	"github.com/hourglassmq/hourglass/access"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// rule is what one RPC needs of its caller: a verb, on the topics its
// requests name. It is the one table of who may call what
// (TestRulesCoverTheService checks that every RPC of the schema is here).
type rule struct {
	// verb is the verb the call needs; "" for calls any authenticated
	// caller may make (Time, WhoAmI).
	verb access.Verb
	// topics returns the topics one request (or one message of a stream)
	// acts on. named false means the request names none: a unary call (or
	// a stream's first message) then needs the verb on every topic, since
	// what it acts on (a message by ID, a schedule by name, the whole
	// server) may be in any; a later message of a stream needs nothing
	// more than the stream's verb (a Consume credit or settle by receipt).
	topics func(proto.Message) (topics []string, named bool)
	// audited marks the operator changes the audit trail records.
	audited bool
}

// svc prefixes the API's procedures.
const svc = "/" + serviceName + "/"

// one is a request that names one topic, when it is set.
func one[T proto.Message](get func(T) string) func(proto.Message) ([]string, bool) {
	return func(m proto.Message) ([]string, bool) {
		t := get(m.(T))
		return []string{t}, t != ""
	}
}

// byKey is a request that names its message by ID, or by topic and key:
// only the second names the topic it acts on (an ID may be any topic's,
// whatever topic the request also sends).
func byKey[T proto.Message](id, topic func(T) string) func(proto.Message) ([]string, bool) {
	return func(m proto.Message) ([]string, bool) {
		r := m.(T)
		if id(r) != "" || topic(r) == "" {
			return nil, false
		}
		return []string{topic(r)}, true
	}
}

func none(proto.Message) ([]string, bool) { return nil, false }

func batchTopics(ms []*hourglassv1.ScheduleRequest) ([]string, bool) {
	var ts []string
	seen := map[string]bool{}
	for _, m := range ms {
		if t := m.GetTopic(); !seen[t] {
			seen[t] = true
			ts = append(ts, t)
		}
	}
	return ts, len(ts) > 0
}

var rules = map[string]rule{
	svc + "Schedule": {verb: access.Produce, topics: one((*hourglassv1.ScheduleRequest).GetTopic)},
	svc + "ScheduleBatch": {verb: access.Produce, topics: func(m proto.Message) ([]string, bool) {
		return batchTopics(m.(*hourglassv1.ScheduleBatchRequest).GetMessages())
	}},
	svc + "ScheduleStream": {verb: access.Produce, topics: func(m proto.Message) ([]string, bool) {
		r := m.(*hourglassv1.ScheduleStreamRequest)
		if r.GetMessage() != nil {
			return batchTopics([]*hourglassv1.ScheduleRequest{r.GetMessage()})
		}
		return batchTopics(r.GetBatch().GetMessages())
	}},
	svc + "Cancel": {verb: access.Cancel, audited: true,
		topics: byKey((*hourglassv1.CancelRequest).GetId, (*hourglassv1.CancelRequest).GetTopic)},
	svc + "Receive":       {verb: access.Consume, topics: one((*hourglassv1.ReceiveRequest).GetTopic)},
	svc + "ReceiveStream": {verb: access.Consume, topics: one((*hourglassv1.ReceiveStreamRequest).GetTopic)},
	svc + "Consume": {verb: access.Consume, topics: func(m proto.Message) ([]string, bool) {
		t := m.(*hourglassv1.ConsumeRequest).GetOpen().GetTopic()
		return []string{t}, t != ""
	}},
	svc + "Ack":      {verb: access.Consume, topics: one((*hourglassv1.AckRequest).GetTopic)},
	svc + "AckBatch": {verb: access.Consume, topics: one((*hourglassv1.AckBatchRequest).GetTopic)},
	svc + "Nack":     {verb: access.Consume, topics: one((*hourglassv1.NackRequest).GetTopic)},
	svc + "Extend":   {verb: access.Consume, topics: one((*hourglassv1.ExtendRequest).GetTopic)},
	svc + "Stats":    {verb: access.Read, topics: none},
	svc + "Time":     {topics: none},
	svc + "Get": {verb: access.Read,
		topics: byKey((*hourglassv1.GetRequest).GetId, (*hourglassv1.GetRequest).GetTopic)},
	svc + "List": {verb: access.Read, topics: one((*hourglassv1.ListRequest).GetTopic)},
	svc + "Reschedule": {verb: access.Cancel, audited: true,
		topics: byKey((*hourglassv1.RescheduleRequest).GetId, (*hourglassv1.RescheduleRequest).GetTopic)},
	svc + "Edit": {verb: access.Cancel, audited: true,
		topics: byKey((*hourglassv1.EditRequest).GetId, (*hourglassv1.EditRequest).GetTopic)},
	svc + "FreezeMessage": {verb: access.Cancel, audited: true,
		topics: byKey((*hourglassv1.FreezeMessageRequest).GetId, (*hourglassv1.FreezeMessageRequest).GetTopic)},
	svc + "ThawMessage": {verb: access.Cancel, audited: true,
		topics: byKey((*hourglassv1.ThawMessageRequest).GetId, (*hourglassv1.ThawMessageRequest).GetTopic)},
	svc + "Redrive": {verb: access.Manage, audited: true, topics: func(m proto.Message) ([]string, bool) {
		r := m.(*hourglassv1.RedriveRequest)
		if r.GetDeadLetterTopic() == "" {
			return nil, false
		}
		ts := []string{r.GetDeadLetterTopic()}
		if r.GetToTopic() != "" {
			ts = append(ts, r.GetToTopic())
		}
		return ts, true
	}},
	svc + "Purge":          {verb: access.Manage, audited: true, topics: one((*hourglassv1.PurgeRequest).GetTopic)},
	svc + "DeleteTopic":    {verb: access.Manage, audited: true, topics: one((*hourglassv1.DeleteTopicRequest).GetTopic)},
	svc + "Topics":         {verb: access.Read, topics: none},
	svc + "GetPolicy":      {verb: access.Read, topics: one((*hourglassv1.GetPolicyRequest).GetTopic)},
	svc + "SetPolicy":      {verb: access.Manage, audited: true, topics: one((*hourglassv1.SetPolicyRequest).GetTopic)},
	svc + "CreateSchedule": {verb: access.Schedule, audited: true, topics: one(func(r *hourglassv1.CreateScheduleRequest) string { return r.GetSchedule().GetTopic() })},
	// A schedule named by its name may be any topic's; an update may also
	// move it to another topic.
	svc + "UpdateSchedule": {verb: access.Schedule, audited: true, topics: none},
	svc + "PauseSchedule":  {verb: access.Schedule, audited: true, topics: none},
	svc + "ResumeSchedule": {verb: access.Schedule, audited: true, topics: none},
	svc + "DeleteSchedule": {verb: access.Schedule, audited: true, topics: none},
	svc + "GetSchedule":    {verb: access.Read, topics: none},
	svc + "ListSchedules":  {verb: access.Read, topics: none},
	// A backfill stores messages in its schedule's topic, which a name may
	// not say: the schedule verb on every topic, as for UpdateSchedule.
	svc + "BackfillSchedule": {verb: access.Schedule, audited: true, topics: none},
	// Calendars are the server's, not a topic's: shared by every producer
	// and schedule that names one, changed by those who manage the server.
	svc + "CreateCalendar": {verb: access.Manage, audited: true, topics: none},
	svc + "UpdateCalendar": {verb: access.Manage, audited: true, topics: none},
	svc + "DeleteCalendar": {verb: access.Manage, audited: true, topics: none},
	svc + "GetCalendar":    {verb: access.Read, topics: none},
	svc + "ListCalendars":  {verb: access.Read, topics: none},
	svc + "WhoAmI":         {topics: none},
	svc + "ListAudit":      {verb: access.Audit, topics: none},
}

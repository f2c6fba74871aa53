package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hourglassmq/hourglass/access"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestRulesCoverTheService: every RPC of the schema has an access rule,
// and every rule names an RPC of the schema.
func TestRulesCoverTheService(t *testing.T) {
	methods := hourglassv1.File_hourglass_v1_hourglass_proto.Services().ByName("HourglassService").Methods()
	seen := map[string]bool{}
	for i := range methods.Len() {
		proc := svc + string(methods.Get(i).Name())
		seen[proc] = true
		r, ok := rules[proc]
		if !ok {
			t.Errorf("%s has no access rule in access_rules.go", proc)
			continue
		}
		if r.topics == nil {
			t.Errorf("%s's rule has no topics function", proc)
		}
	}
	for proc := range rules {
		if !seen[proc] {
			t.Errorf("the rule for %s names no RPC of the schema", proc)
		}
	}
}

func TestAuthorize(t *testing.T) {
	set, err := access.Parse([]byte(`credentials:
  - {name: p, token_sha256: "` + access.Digest("p") + `", role: producer, topics: ["orders.*"]}
  - {name: v, token_sha256: "` + access.Digest("v") + `", role: viewer, topics: ["*"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := set.Token("p")
	v, _ := set.Token("v")
	prod, view := &caller{cred: p}, &caller{cred: v}
	for _, tc := range []struct {
		name   string
		c      *caller
		proc   string
		m      proto.Message
		stream bool
		want   string // "" allowed
	}{
		{"produce_own", prod, "Schedule", &hourglassv1.ScheduleRequest{Topic: "orders.eu"}, false, ""},
		{"produce_other", prod, "Schedule", &hourglassv1.ScheduleRequest{Topic: "pay"}, false, `may not produce on topic "pay"`},
		{"batch_one_other", prod, "ScheduleBatch", &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{{Topic: "orders.a"}, {Topic: "pay"}}}, false, `topic "pay"`},
		{"cancel_by_key", prod, "Cancel", &hourglassv1.CancelRequest{Topic: "orders.a", Key: "k"}, false, ""},
		{"cancel_by_id_needs_all", prod, "Cancel", &hourglassv1.CancelRequest{Id: "x", Topic: "orders.a"}, false, "may not cancel on every topic"},
		{"viewer_stats", view, "Stats", &hourglassv1.StatsRequest{}, false, ""},
		{"viewer_purge", view, "Purge", &hourglassv1.PurgeRequest{Topic: "a"}, false, "may not manage"},
		{"time_anyone", prod, "Time", &hourglassv1.TimeRequest{}, false, ""},
		{"stream_open_verb", view, "ScheduleStream", nil, true, "may not produce"},
		{"stream_message", prod, "ScheduleStream", &hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Message{Message: &hourglassv1.ScheduleRequest{Topic: "pay"}}}, true, `topic "pay"`},
		{"consume_settle_names_none", &caller{cred: access.Admin("a")}, "Consume", &hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Settle{Settle: &hourglassv1.ConsumeSettle{}}}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := authorize(tc.c, svc+tc.proc, tc.m, tc.stream)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want PermissionDenied containing %q", err, tc.want)
			}
		})
	}
}

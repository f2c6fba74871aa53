package client

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestParseID(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ok       bool
		time     time.Time
	}{
		{"delivery_time_and_seq", "00000001c5d2cc9b" + "0000000000000007", true, time.UnixMilli(0x1c5d2cc9b).UTC()},
		{"all_zero", strings.Repeat("0", 32), true, time.UnixMilli(0).UTC()},
		{"empty", "", false, time.Time{}},
		{"short", "abc", false, time.Time{}},
		{"not_hex", strings.Repeat("z", 32), false, time.Time{}},
		{"upper_case_is_hex_too", "00000001C5D2CC9B0000000000000007", true, time.UnixMilli(0x1c5d2cc9b).UTC()},
		{"negative_time", "8" + strings.Repeat("0", 31), false, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := ParseID(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("ParseID(%q) = %v, %v; want ok %v", tc.in, id, err, tc.ok)
			}
			if !tc.ok {
				if !strings.HasPrefix(err.Error(), "client: ") || !strings.Contains(err.Error(), "32 hex digits") && !strings.Contains(err.Error(), "negative") {
					t.Errorf("error %q: want it to start with client: and say what is allowed", err)
				}
				return
			}
			if id.IsZero() {
				t.Errorf("ParseID(%q) is the zero ID", tc.in)
			}
			if got := id.String(); got != strings.ToLower(tc.in) {
				t.Errorf("String() = %q, want %q", got, strings.ToLower(tc.in))
			}
			if !id.Time().Equal(tc.time) {
				t.Errorf("Time() = %v, want %v", id.Time(), tc.time)
			}
		})
	}
}

func TestZeroID(t *testing.T) {
	var id ID
	if !id.IsZero() || id.String() != "" || !id.Time().IsZero() {
		t.Errorf("zero ID: IsZero %v, String %q, Time %v", id.IsZero(), id.String(), id.Time())
	}
	allZero, err := ParseID(strings.Repeat("0", 32))
	if err != nil {
		t.Fatal(err)
	}
	if allZero == id {
		t.Error("the parsed all-zero ID equals the zero ID; it names a message, the zero ID none")
	}
}

func TestIDJSON(t *testing.T) {
	id, err := ParseID("00000001c5d2cc9b0000000000000007")
	if err != nil {
		t.Fatal(err)
	}
	type doc struct {
		ID     ID `json:"id"`
		Origin ID `json:"origin"`
	}
	b, err := json.Marshal(doc{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"00000001c5d2cc9b0000000000000007","origin":""}`; string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}
	var back doc
	if err := json.Unmarshal(b, &back); err != nil || back.ID != id || !back.Origin.IsZero() {
		t.Errorf("Unmarshal(%s) = %+v, %v; want the same IDs back", b, back, err)
	}
	if err := json.Unmarshal([]byte(`{"id":"nope"}`), &back); err == nil {
		t.Error("Unmarshal of a malformed ID: no error")
	}
}

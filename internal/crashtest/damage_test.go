package crashtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
)

func concat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// skipRec is a skip record whose span covers n bytes (n >= 24).
func skipRec(t *testing.T, n int) []byte {
	t.Helper()
	p := make([]byte, 8)
	binary.LittleEndian.PutUint64(p, uint64(n))
	r := framed(t, typeSkip, p)
	return append(r, make([]byte, n-len(r))...)
}

func TestFlippable(t *testing.T) {
	a, b, c := schedRecord(t, "a"), schedRecord(t, "bb"), schedRecord(t, "ccc")
	hdr := make([]byte, commitlogHeader)
	bad := slices.Clone(b)
	bad[len(bad)-1] ^= 1
	la, lb := int64(len(a)), int64(len(b))
	h := int64(commitlogHeader)
	for _, tc := range []struct {
		name string
		data []byte
		want []span
	}{
		{"no_records", concat(hdr, make([]byte, 64)), nil},
		{"one_record_is_never_flipped", concat(hdr, a, make([]byte, 64)), nil},
		{"all_but_the_last", concat(hdr, a, b, c, make([]byte, 8)), []span{{h, h + la}, {h + la, h + la + lb}}},
		{"a_bad_record_ends_the_walk", concat(hdr, a, b, bad, c), []span{{h, h + la}}},
		{"skip_records_are_stepped_over_not_listed", concat(hdr, a, skipRec(t, 40), b), []span{{h, h + la}}},
		{"a_record_after_a_skip_has_a_successor", concat(hdr, a, skipRec(t, 40), b, c), []span{{h, h + la}, {h + la + 40, h + la + 40 + lb}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := flippable(tc.data, commitlogHeader); !slices.Equal(got, tc.want) {
				t.Errorf("flippable = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNextKind(t *testing.T) {
	cands := damageCands{DSchedFlip: {{path: "x"}}, DCheckpointDelete: {{path: "y"}}}
	for _, tc := range []struct {
		name     string
		queue    []string
		want     string
		wantRest []string
	}{
		{"first_in_queue", []string{DSchedFlip, DCheckpointDelete}, DSchedFlip, []string{DCheckpointDelete}},
		{"kinds_without_files_keep_their_place", []string{DDoneFlip, DCheckpointDelete, DSchedFlip}, DCheckpointDelete, []string{DDoneFlip, DSchedFlip}},
		{"none_available", []string{DDoneFlip, DQueueLogFlip}, "", []string{DDoneFlip, DQueueLogFlip}},
		{"empty_queue", nil, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := slices.Clone(tc.queue)
			got, rest := nextKind(q, cands)
			if got != tc.want || !slices.Equal(rest, tc.wantRest) || !slices.Equal(q, tc.queue) {
				t.Errorf("nextKind(%v) = %q, %v (queue now %v); want %q, %v", tc.queue, got, rest, q, tc.want, tc.wantRest)
			}
		})
	}
}

// TestPlanDamageStaysInsideARecord: every flip lands inside a record that
// has a successor, with a non-zero mask; a deletion names the file only.
func TestPlanDamageStaysInsideARecord(t *testing.T) {
	files := []damageFile{{path: "a", recs: []span{{32, 80}, {80, 130}}}, {path: "b", recs: []span{{104, 129}}}}
	for seed := range uint64(200) {
		p := planDamage(DDoneFlip, files, rand.New(rand.NewPCG(seed, 1)))
		if p.Mask == 0 || p.Offset < p.Rec.start || p.Offset >= p.Rec.end || p.RecOff != p.Rec.start {
			t.Fatalf("seed %d: plan %+v: the byte is not inside its record, or the mask flips nothing", seed, p)
		}
		if f := files[slices.IndexFunc(files, func(f damageFile) bool { return f.path == p.Path })]; !slices.Contains(f.recs, p.Rec) {
			t.Fatalf("seed %d: record %v is not one of %s's", seed, p.Rec, p.Path)
		}
	}
	if p := planDamage(DDoneDelete, files, rand.New(rand.NewPCG(1, 1))); p.Offset != -1 || p.Mask != 0 {
		t.Errorf("a deletion planned a flip: %+v", p)
	}
}

// fakeDataDir writes a data directory with one file of every kind the
// damage mode hits, each with three records.
func fakeDataDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	fakeSegment(t, filepath.Join(dir, "commitlog", "00000000000000000000.log"), 1000, // sealed
		schedRecord(t, "k6"), schedRecord(t, "k7"), schedRecord(t, "k8"))
	fakeSegment(t, filepath.Join(dir, "commitlog", "00000000000000001000.log"), 4096,
		schedRecord(t, "k1"), framed(t, message.TypeCancel, message.AppendCancel(nil, message.ID{DeliverAt: 5, Seq: 1000})), schedRecord(t, "k3"))
	fakeSegment(t, filepath.Join(dir, "commitlog", "00000000000000005064.log"), 4096) // a spare
	sched := filepath.Join(dir, "schedule")
	os.MkdirAll(sched, 0o755)
	entry := func(seq uint64, key string) []byte {
		p := binary.LittleEndian.AppendUint64(nil, seq)
		p = message.AppendSchedule(p, &message.Message{DeliverAt: 1, Topic: []byte("t"), Body: []byte(key)})
		pad := (8 - (16+len(p))%8) % 8
		p = append(p, make([]byte, pad)...)
		buf := make([]byte, record.Size(len(p)))
		if _, err := record.Encode(buf, typeSchedEntry, uint8(pad), p); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	done := func(seq uint64) []byte {
		return framed(t, typeDone, append(binary.LittleEndian.AppendUint64(nil, seq), 1))
	}
	os.WriteFile(filepath.Join(sched, "20261130T080000Z.sched"), concat(make([]byte, segfileHeader), entry(1000, "k1"), entry(1100, "k4"), entry(1200, "k5")), 0o644)
	os.WriteFile(filepath.Join(sched, "20261130T080000Z.done"), concat(make([]byte, segfileHeader), done(1000), done(1100), done(1200)), 0o644)
	os.WriteFile(filepath.Join(sched, "reput.checkpoint"), make([]byte, 24), 0o644)
	qmsg := func(seq uint64, key string) []byte {
		p := append([]byte{1}, binary.LittleEndian.AppendUint64(nil, 7)...)
		p = binary.LittleEndian.AppendUint64(p, seq)
		p = message.AppendSchedule(p, &message.Message{DeliverAt: 7, Topic: []byte("ct0"), Body: []byte(key)})
		return framed(t, typeQueueMsg, p)
	}
	q := filepath.Join(dir, "queue", "topics", "ct0")
	m1, m2 := qmsg(1000, "k1"), qmsg(1100, "k4")
	fakeSegment(t, filepath.Join(q, "log", "00000000000000000000.log"), 4096, m1, m2, qmsg(1200, "k5"))
	ackOf := func(off int) []byte {
		return framed(t, typeQueueAck, binary.LittleEndian.AppendUint64([]byte{1}, uint64(off)))
	}
	fakeSegment(t, filepath.Join(q, "acks", "00000000000000000000.log"), 4096, ackOf(len(m1)), ackOf(0), ackOf(len(m1)+len(m2)))
	return dir
}

func TestScanDamageFindsEveryKind(t *testing.T) {
	dir := fakeDataDir(t)
	cands, err := scanDamage(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range DamageKinds {
		want := 2 // flips: every record but the last
		switch {
		case isDelete(k):
			want = 0
		case k == DCommitlogSealedFlip:
			want = 3 // a sealed segment is never torn: its last record too
		}
		if len(cands[k]) != 1 || len(cands[k][0].recs) != want {
			t.Errorf("%s: candidates %+v, want one file with %d records", k, cands[k], want)
		}
	}
	if p := cands[DCommitlogFlip][0]; p.base != 1000 || !strings.HasSuffix(p.path, "00000000000000001000.log") {
		t.Errorf("commitlog candidate %+v: not the active segment at base 1000", p)
	}
}

// TestApplyAndUndo: a flip changes one byte inside the record (which then
// fails its checksum while the next still decodes) and names what it held;
// undo puts it back; a deletion moves the file out and back.
func TestApplyAndUndo(t *testing.T) {
	dir := fakeDataDir(t)
	cands, err := scanDamage(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		kind string
		rec  int // which record to flip
		want Held
	}{
		{"commitlog_schedule", DCommitlogFlip, 0, Held{What: "schedule", Keys: []string{"k1"}, Seqs: []int64{1000}, IDs: []string{message.ID{DeliverAt: 1, Seq: 1000}.String()}}},
		{"commitlog_cancel", DCommitlogFlip, 1, Held{What: "cancel", CancelIDs: []string{message.ID{DeliverAt: 5, Seq: 1000}.String()}}},
		{"sched_entry", DSchedFlip, 1, Held{What: "schedule entry", Keys: []string{"k4"}, Seqs: []int64{1100}, IDs: []string{message.ID{DeliverAt: 1, Seq: 1100}.String()}}},
		{"done_record", DDoneFlip, 0, Held{What: "done-record", Seqs: []int64{1000}}},
		{"queue_message", DQueueLogFlip, 1, Held{What: "queue message", Keys: []string{"k4"}, IDs: []string{message.ID{DeliverAt: 7, Seq: 1100}.String()}}},
		{"ack_names_the_acked_message", DQueueAckFlip, 1, Held{What: "ack", QueueOffsets: []int64{0}, Keys: []string{"k1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := cands[tc.kind][0]
			r := f.recs[tc.rec]
			p := DamagePlan{Kind: tc.kind, Path: f.path, Offset: r.start + 9, Mask: 0x20, Rec: r, RecOff: r.start, Base: f.base}
			before, _ := os.ReadFile(f.path)
			a, err := apply(p, dir, filepath.Join(t.TempDir(), "snap"))
			if err != nil {
				t.Fatal(err)
			}
			after, _ := os.ReadFile(f.path)
			diff := 0
			for i := range before {
				if before[i] != after[i] {
					diff++
				}
			}
			if diff != 1 || after[p.Offset] != before[p.Offset]^0x20 {
				t.Errorf("%d bytes changed, want exactly byte %d", diff, p.Offset)
			}
			if _, _, err := record.Decode(after[r.start:]); err == nil {
				t.Error("the flipped record still decodes")
			}
			if _, _, err := record.Decode(after[r.end:]); err != nil {
				t.Errorf("the record after it no longer decodes: %v", err)
			}
			got := a.held
			if got.What != tc.want.What || !slices.Equal(got.Keys, tc.want.Keys) || !slices.Equal(got.Seqs, tc.want.Seqs) ||
				!slices.Equal(got.CancelIDs, tc.want.CancelIDs) || !slices.Equal(got.IDs, tc.want.IDs) || !slices.Equal(got.QueueOffsets, tc.want.QueueOffsets) {
				t.Errorf("held %+v, want %+v", got, tc.want)
			}
			if a.changedSince() {
				t.Error("changedSince: the file is as apply left it")
			}
			// A start that refused writes to the file, and creates another.
			os.WriteFile(filepath.Join(dir, "schedule", "new.tmp"), nil, 0o644)
			writeAt(f.path, []byte{0, 0, 0}, r.end)
			if !a.changedSince() {
				t.Error("changedSince: the file was written to")
			}
			if err := a.undo(); err != nil {
				t.Fatal(err)
			}
			if restored, _ := os.ReadFile(f.path); !bytes.Equal(restored, before) {
				t.Error("undo did not restore the file")
			}
			if _, err := os.Stat(filepath.Join(dir, "schedule", "new.tmp")); !os.IsNotExist(err) {
				t.Errorf("undo left a file the start made: %v", err)
			}
		})
	}
	t.Run("delete_and_put_back", func(t *testing.T) {
		p := filepath.Join(dir, "schedule", "reput.checkpoint")
		a, err := apply(DamagePlan{Kind: DCheckpointDelete, Path: p, Offset: -1}, dir, filepath.Join(t.TempDir(), "snap"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("still there: %v", err)
		}
		if err := a.undo(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); err != nil {
			t.Errorf("not put back: %v", err)
		}
	})
}

func TestJudgeStart(t *testing.T) {
	data := "/w/data"
	abs := data + "/commitlog/00000000000000000000.log"
	ev := func(kind string) DamageEvent {
		return DamageEvent{Cycle: 3, Rel: "commitlog/00000000000000000000.log", DamagePlan: DamagePlan{Kind: kind, Path: abs}}
	}
	hint := "; run `hourglass repair --data-dir /w/data`"
	for _, tc := range []struct {
		name      string
		kind      string
		sr        startResult
		outcome   string
		violation string // "" for none
	}{
		{"ready", DCommitlogFlip, startResult{Ready: true, After: time.Second}, RestartStarted, ""},
		{"refused_naming_the_absolute_path", DCommitlogFlip, startResult{Exited: true, ExitCode: 1, Stderr: "hourglass: corrupt data in " + abs + " at offset 9" + hint}, RestartRefused, ""},
		{"refused_naming_the_relative_path", DCommitlogFlip, startResult{Exited: true, ExitCode: 1, Stderr: "damage in commitlog/00000000000000000000.log" + hint}, RestartRefused, ""},
		{"refused_without_the_file", DCommitlogFlip, startResult{Exited: true, ExitCode: 1, Stderr: "hourglass: the commitlog is damaged" + hint}, RestartRefused, VRefusalUnclear},
		{"refused_without_the_repair_command", DCommitlogFlip, startResult{Exited: true, ExitCode: 1, Stderr: "corrupt data in " + abs}, RestartRefused, VRefusalUnclear},
		{"deleted_segment_its_directory_will_do", DCommitlogDelete, startResult{Exited: true, ExitCode: 1, Stderr: "segment missing in /w/data/commitlog" + hint}, RestartRefused, ""},
		{"a_flip_needs_the_file_not_the_directory", DCommitlogFlip, startResult{Exited: true, ExitCode: 1, Stderr: "damage in /w/data/commitlog" + hint}, RestartRefused, VRefusalUnclear},
		{"exited_zero", DCommitlogFlip, startResult{Exited: true, ExitCode: 0}, RestartExit0, VStartFailed},
		{"hung", DCommitlogFlip, startResult{After: DamageStartBound}, RestartHung, VStartFailed},
		{"refused_too_late", DCommitlogFlip, startResult{Exited: true, ExitCode: 1, After: DamageStartBound + time.Second, Stderr: abs + hint}, RestartHung, VStartFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := ev(tc.kind)
			vs := judgeStart(&e, tc.sr, data, "/elsewhere")
			if e.Outcome != tc.outcome {
				t.Errorf("outcome %q, want %q", e.Outcome, tc.outcome)
			}
			switch {
			case tc.violation == "" && len(vs) > 0:
				t.Errorf("violations %v, want none", vs)
			case tc.violation != "" && (len(vs) != 1 || vs[0].Kind != tc.violation || vs[0].Cycle != 4):
				t.Errorf("violations %v, want one %s in cycle 4", vs, tc.violation)
			}
		})
	}
}

func TestReportsDamage(t *testing.T) {
	const p = "/d/schedule/20261130T080000Z.done"
	for _, tc := range []struct {
		name string
		log  string
		want bool
	}{
		{"corruption_named", `level=ERROR msg="loading failed" err="corrupt data in /d/schedule/20261130T080000Z.done at offset 754"`, true},
		{"relative_path", `level=ERROR msg="schedule/20261130T080000Z.done is missing"`, true},
		{"a_mention_is_no_report", `level=INFO msg="retired" file=/d/schedule/20261130T080000Z.done`, false},
		{"damage_of_another_file", `level=ERROR msg="corrupt data in /d/schedule/20261130T090000Z.done"`, false},
		{"nothing", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := reportsDamage(tc.log, p, "/d", "/x", false); got != tc.want {
				t.Errorf("reportsDamage = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMustReport(t *testing.T) {
	gone := func(string) bool { return false }
	there := func(string) bool { return true }
	for _, tc := range []struct {
		name   string
		kind   string
		exists func(string) bool
		want   bool
	}{
		{"checkpoint_never", DCheckpointDelete, there, false},
		{"commitlog_flip_always", DCommitlogFlip, gone, true},
		{"queue_ack_flip_always", DQueueAckFlip, gone, true},
		{"sched_flip_while_the_segment_exists", DSchedFlip, there, true},
		{"sched_flip_retired", DSchedFlip, gone, false},
		{"done_delete_while_the_segment_exists", DDoneDelete, there, true},
		{"done_delete_retired", DDoneDelete, gone, false},
		{"done_flip_while_the_segment_exists", DDoneFlip, there, true},
		{"done_flip_retired", DDoneFlip, gone, false},
		// A dispatch log left behind by a retirement a kill cut short (a
		// clean-clone CI run flipped one): its segment is gone.
		{"done_flip_of_a_log_without_its_segment", DDoneFlip, func(p string) bool { return strings.HasSuffix(p, ".done") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustReport(DamageEvent{DamagePlan: DamagePlan{Kind: tc.kind, Path: "/d/schedule/x.done"}}, tc.exists); got != tc.want {
				t.Errorf("mustReport = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseRepair(t *testing.T) {
	id1, id2 := strings.Repeat("a", 32), strings.Repeat("0", 16)+strings.Repeat("b", 16)
	cl := "commitlog/00000000000000000000.log"
	ql := "/d/queue/topics/ct0/log/00000000000000000000.log"
	qa := "/d/queue/topics/ct0/acks/00000000000000000000.log"
	for _, tc := range []struct {
		name string
		out  string
		want RepairResult
	}{
		{"nothing_to_repair", "commitlog:\n  nothing to repair\nrepair: nothing to repair in /d\n", RepairResult{}},
		{"routed_span_loses_nothing",
			"commitlog:\n  kept a copy of " + cl + " in /d/quarantine/T/" + cl + "\n" +
				"  " + cl + ": damaged records (record: checksum mismatch): offsets 100..180 (80 bytes); skip record written at file position 132\n" +
				"    offsets 100..180 (80 bytes) were already routed (below the reput checkpoint 500): the schedule segments hold them, nothing is lost\n",
			RepairResult{}},
		{"unrouted_part_is_lost",
			"  " + cl + ": damaged records (x): offsets 100..180 (80 bytes); skip record written at file position 132\n" +
				"    offsets 100..150 (50 bytes) were already routed (below the reput checkpoint 150): the schedule segments hold them, nothing is lost\n" +
				"    offsets 150..180 (30 bytes, at least one record) were not routed: those records are LOST\n",
			RepairResult{Lost: []LostSpan{{File: cl, From: 150, To: 180}}}},
		{"recreated_segment",
			"  commitlog/00000000000134217696.log: a missing segment file (x): offsets 134217696..268435392 (134217696 bytes); recreated as one skip record\n" +
				"    offsets 134217696..268435392 were not routed: whatever records the missing file held there are LOST (how many is unknown); no offset in the span is used again\n",
			RepairResult{Lost: []LostSpan{{File: "commitlog/00000000000134217696.log", From: 134217696, To: 268435392}}}},
		{"queue_log_span_lost",
			"queue:\n  topic ct0: " + ql + ": skip-damage at file position 132: offsets 100..160 (60 bytes): record: checksum mismatch\n" +
				"  topic ct1: /d/queue/topics/ct1/log/00000000000000000000.log: skip-damage at file position 32: offsets 0..40 (40 bytes): x\n" +
				"  topic ct0: 60 bytes of the queue log cannot be read: the messages there are lost\n" +
				"  topic ct0: wrote a checkpoint: cursor 300, 2 messages held out\n",
			RepairResult{Lost: []LostSpan{{File: ql, From: 100, To: 160}}}},
		{"queue_acks_lost",
			"  topic ct0: " + qa + ": skip-damage at file position 40: offsets 8..33 (25 bytes): x\n" +
				"  topic ct0: ACKS LOST: up to 3 messages the topic hands out may have been acked already; they are handed out again (at least once)\n" +
				"  topic ct1: ACKS LOST: at least 9 messages the topic hands out may have been acked already; they are handed out again (at least once)\n",
			RepairResult{AcksLost: []TopicAcks{{Topic: "ct0", UpTo: 3}, {Topic: "ct1", UpTo: -1}}}},
		{"dispatch_log_left_pending",
			"dispatch logs:\n  schedule/20261201T225514Z.done: it is missing and the bucket has started: 0 valid done-records; 3 entries of 20261201T225514Z.sched are undecided (delivered or not is unknown)\n" +
				"    rewritten with the 0 valid done-records; the 3 undecided entries stay pending and are delivered\n",
			RepairResult{BucketsAgain: []BucketAgain{{File: "schedule/20261201T225514Z.done", UpTo: 3}}}},
		{"ids", "lost: message " + id1 + "\nmay be delivered again: " + id2 + "\n", RepairResult{LostIDs: []string{id1}, AgainIDs: []string{id2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseRepair(tc.out)
			if !slices.Equal(got.Lost, tc.want.Lost) || !slices.Equal(got.LostIDs, tc.want.LostIDs) || !slices.Equal(got.AgainIDs, tc.want.AgainIDs) ||
				!slices.Equal(got.AcksLost, tc.want.AcksLost) || !slices.Equal(got.BucketsAgain, tc.want.BucketsAgain) {
				t.Errorf("parseRepair:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDamageAllowance(t *testing.T) {
	data := "/d"
	id := func(seq int) string { return message.ID{DeliverAt: 1, Seq: uint64(seq)}.String() }
	ev := Events{Schedules: []Schedule{
		{Key: "k100", ID: id(100), Outcome: OK, Topic: "ct0"},
		{Key: "k200", ID: id(200), Outcome: OK, Topic: "ct0"},
		{Key: "k300", ID: id(300), Outcome: OK, Topic: "ct1"},
		{Key: "k400", ID: id(400), Outcome: OK, Topic: "ct1"},
	}, Settles: []Settle{{Key: "k300", Topic: "ct1", Kind: Ack, Outcome: OK, Answered: at(10)}, {Key: "k400", Topic: "ct1", Kind: Ack, Outcome: OK, Answered: at(10)}}}
	clPath := data + "/commitlog/00000000000000000000.log"
	ackPath := data + "/queue/topics/ct1/acks/00000000000000000000.log"
	lost := func(k string) Violation { return Violation{Kind: VLost, Key: k, At: at(0)} }
	replay := func(k string) Violation { return Violation{Kind: VAfterAck, Key: k, At: at(50)} }
	for _, tc := range []struct {
		name    string
		evs     []DamageEvent
		vs      []Violation
		allowed []bool
	}{
		{"a_clean_start_allows_nothing",
			[]DamageEvent{{Cycle: 1, At: at(20), Outcome: RestartStarted, DamagePlan: DamagePlan{Kind: DCommitlogFlip, Path: clPath, Offset: 140}, Held: Held{Keys: []string{"k100"}}}},
			[]Violation{lost("k100"), replay("k300")}, []bool{false, false}},
		{"sched_flip_rebuildable_allows_nothing",
			[]DamageEvent{{Cycle: 1, At: at(20), Outcome: RestartStarted, CommitlogHolds: true, DamagePlan: DamagePlan{Kind: DSchedFlip}, Held: Held{Keys: []string{"k100"}}}},
			[]Violation{lost("k100")}, []bool{false}},
		{"sched_flip_after_retention_allows_that_entry",
			[]DamageEvent{{Cycle: 1, At: at(20), Outcome: RestartStarted, DamagePlan: DamagePlan{Kind: DSchedFlip}, Held: Held{Keys: []string{"k100"}}}},
			[]Violation{lost("k100"), lost("k200")}, []bool{true, false}},
		{"repair_commitlog_span_allows_its_schedules_only",
			[]DamageEvent{{Cycle: 1, At: at(20), Outcome: RestartRefused, DamagePlan: DamagePlan{Kind: DCommitlogFlip, Path: clPath, Offset: 140, RecOff: 132},
				Repair: &RepairResult{Lost: []LostSpan{{File: clPath, From: 100, To: 180}}}}},
			[]Violation{lost("k100"), lost("k200"), replay("k100"), {Kind: VEarly, Key: "k100"}}, []bool{true, false, false, false}},
		{"a_repair_the_harness_undid_allows_nothing",
			[]DamageEvent{{Cycle: 1, At: at(20), Outcome: RestartRefused, Undone: true, DamagePlan: DamagePlan{Kind: DCommitlogFlip, Path: clPath, Offset: 140, RecOff: 132},
				Repair: &RepairResult{Lost: []LostSpan{{File: clPath, From: 100, To: 180}}}}},
			[]Violation{lost("k100")}, []bool{false}},
		{"repair_lost_ack_allows_its_message_again",
			[]DamageEvent{{Cycle: 1, At: at(20), Outcome: RestartRefused, DamagePlan: DamagePlan{Kind: DQueueAckFlip, Path: ackPath, Offset: 40, RecOff: 32},
				Held: Held{What: "ack", Keys: []string{"k200"}}, Repair: &RepairResult{Lost: []LostSpan{{File: ackPath, From: 0, To: 25}}}}},
			[]Violation{replay("k200"), replay("k300"), lost("k200")}, []bool{true, false, false}},
		{"repair_acks_lost_allows_up_to_that_many_acked_messages_of_the_topic",
			[]DamageEvent{{Cycle: 1, At: at(20), Outcome: RestartRefused, DamagePlan: DamagePlan{Kind: DQueueAckFlip, Path: ackPath, Offset: 40, RecOff: 32},
				Repair: &RepairResult{AcksLost: []TopicAcks{{Topic: "ct1", UpTo: 1}}}}},
			[]Violation{replay("k300"), replay("k300"), replay("k400"), replay("k100")}, []bool{true, true, false, false}},
		{"repair_left_a_bucket_pending_allows_up_to_that_many_of_its_messages_again",
			[]DamageEvent{{Cycle: 1, At: at(20), Outcome: RestartRefused, DamagePlan: DamagePlan{Kind: DDoneDelete, Offset: -1},
				Repair: &RepairResult{BucketsAgain: []BucketAgain{{File: "schedule/19700101T000000Z.done", UpTo: 1}}}}},
			[]Violation{{Kind: VAfterCancel, Key: "k100", At: at(50)}, replay("k100"), replay("k200"), lost("k100")}, []bool{true, true, false, false}},
		{"repair_named_ids",
			[]DamageEvent{{Cycle: 1, At: at(20), Outcome: RestartRefused, DamagePlan: DamagePlan{Kind: DDoneDelete, Offset: -1},
				Repair: &RepairResult{LostIDs: []string{id(100)}, AgainIDs: []string{id(300)}}}},
			[]Violation{lost("k100"), replay("k300"), lost("k300")}, []bool{true, true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := slices.Clone(tc.vs)
			markDamage(vs, damageAllowance(tc.evs, ev, data, time.Second), ev)
			for i, v := range vs {
				if (v.Damage != "") != tc.allowed[i] {
					t.Errorf("%s of %s: allowed by %q, want allowed %v", v.Kind, v.Key, v.Damage, tc.allowed[i])
				}
				if v.Damage != "" && v.counts("always") {
					t.Errorf("%s of %s is allowed and still counts", v.Kind, v.Key)
				}
			}
		})
	}
}

func TestSuspect(t *testing.T) {
	seg := 2 * time.Second
	bucket := time.Date(2026, 12, 1, 22, 33, 52, 0, time.UTC)
	inBucket := message.ID{DeliverAt: bucket.Add(time.Second).UnixMilli(), Seq: 7}.String()
	elsewhere := message.ID{DeliverAt: bucket.Add(time.Hour).UnixMilli(), Seq: 8}.String()
	evs := []DamageEvent{
		{At: at(100), DamagePlan: DamagePlan{Kind: DCheckpointDelete}},
		{At: at(200), DamagePlan: DamagePlan{Kind: DDoneDelete, Path: "/d/schedule/20261201T223352Z.done"}},
		{At: at(300), Rel: "queue/topics/ct0/log/00000000000000000000.log", DamagePlan: DamagePlan{Kind: DQueueLogFlip}},
	}
	for _, tc := range []struct {
		name string
		v    Violation
		sc   *Schedule
		want int
	}{
		{"loss_first_damage_after_the_answer", Violation{Kind: VLost, At: at(150)}, nil, 1},
		{"loss_its_bucket_first", Violation{Kind: VLost, At: at(50)}, &Schedule{ID: inBucket, Topic: "ct1"}, 1},
		{"loss_its_topic_first", Violation{Kind: VLost, At: at(50)}, &Schedule{ID: elsewhere, Topic: "ct0"}, 2},
		{"loss_after_every_damage", Violation{Kind: VLost, At: at(350)}, nil, -1},
		{"loss_in_a_bucket_held_before_it_was_scheduled", Violation{Kind: VLost, At: at(250)}, &Schedule{ID: inBucket, Topic: "ct0"}, 1},
		{"loss_its_bucket_before_its_topic_after", Violation{Kind: VLost, At: at(150)}, &Schedule{ID: inBucket, Topic: "ct0"}, 1},
		{"replay_last_damage_before_it", Violation{Kind: VAfterAck, At: at(350)}, nil, 2},
		{"replay_of_another_topic_not_the_queue", Violation{Kind: VAfterAck, At: at(350)}, &Schedule{ID: elsewhere, Topic: "ct1"}, 0},
		{"after_cancel_its_bucket_not_the_queue", Violation{Kind: VAfterCancel, At: at(350)}, &Schedule{ID: inBucket, Topic: "ct0"}, 1},
		{"replay_before_any_damage", Violation{Kind: VAfterAck, At: at(50)}, nil, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := suspect(tc.v, evs, tc.sc, seg); got != tc.want {
				t.Errorf("suspect = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestUncopied(t *testing.T) {
	a, b, c := fileSum{1, 1}, fileSum{2, 2}, fileSum{3, 3}
	for _, tc := range []struct {
		name              string
		pre, post, q      map[string]fileSum
		changed, noCopies []string
	}{
		{"nothing_changed", map[string]fileSum{"x": a}, map[string]fileSum{"x": a}, nil, nil, nil},
		{"changed_with_copy", map[string]fileSum{"x": a}, map[string]fileSum{"x": b}, map[string]fileSum{"q/x": a}, []string{"x"}, nil},
		{"removed_with_copy", map[string]fileSum{"x": a, "y": c}, map[string]fileSum{"y": c}, map[string]fileSum{"q/x": a}, []string{"x"}, nil},
		{"changed_without_copy", map[string]fileSum{"x": a}, map[string]fileSum{"x": b}, map[string]fileSum{"q/x": b}, []string{"x"}, []string{"x"}},
		{"new_file_needs_no_copy", map[string]fileSum{}, map[string]fileSum{"n": a}, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch, nc := uncopied(tc.pre, tc.post, tc.q)
			if !slices.Equal(ch, tc.changed) || !slices.Equal(nc, tc.noCopies) {
				t.Errorf("changed %v without copy %v; want %v, %v", ch, nc, tc.changed, tc.noCopies)
			}
		})
	}
}

func TestRunRepairChecksQuarantine(t *testing.T) {
	// A fake repair command: changes commitlog/x and keeps (or not) a copy.
	for _, tc := range []struct {
		name   string
		script string
		noCopy []string
		exit   int
	}{
		{"keeps_a_copy", "mkdir -p \"$D/quarantine\" && cp \"$D/x\" \"$D/quarantine/x\" && echo changed > \"$D/x\" && echo \"  x.log: damaged records (bad): offsets 8..30 (22 bytes) skip record written at file position 40\" && echo \"    offsets 8..30 (22 bytes, at least one record) were not routed: those records are LOST\"", nil, 0},
		{"keeps_no_copy", "echo changed > \"$D/x\"", []string{"x"}, 0},
		{"fails", "echo cannot >&2; exit 3", nil, 3},
		{"killed_twice_first", "if [ \"${HOURGLASS_REPAIR_KILL_AT:-9}\" -le 2 ]; then kill -9 $$; fi; echo ok", nil, 0},
		{"asks_for_a_decision", "if [ \"$4\" != --assume-pending ]; then echo 'held: run again with --assume-delivered or --assume-pending'; exit 1; fi; " +
			"echo '  schedule/20261201T225514Z.done: it is missing: 0 valid done-records; 2 entries of 20261201T225514Z.sched are undecided'; " +
			"echo '    rewritten with the 0 valid done-records; the 2 undecided entries stay pending and are delivered'", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			os.MkdirAll(data, 0o755)
			os.WriteFile(filepath.Join(data, "x"), []byte("original"), 0o644)
			bin := filepath.Join(dir, "hourglass")
			os.WriteFile(bin, []byte("#!/bin/sh\nD=\"$3\"\n"+tc.script+"\n"), 0o755)
			res, err := runRepair(t.Context(), bin, data)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tc.exit || !slices.Equal(res.NoCopy, tc.noCopy) {
				t.Errorf("exit %d, no copy %v; want %d, %v (output %q)", res.ExitCode, res.NoCopy, tc.exit, tc.noCopy, res.Output)
			}
			if tc.name == "keeps_a_copy" && (len(res.Lost) != 1 || res.Lost[0].From != 8 || res.Lost[0].To != 30) {
				t.Errorf("lost spans %v, want offsets 8..30", res.Lost)
			}
			if want := map[string]int{"killed_twice_first": 2}[tc.name]; res.Kills != want {
				t.Errorf("%d runs killed before one got through, want %d", res.Kills, want)
			}
			if tc.name == "asks_for_a_decision" && (res.Decision != "assume-pending" || len(res.BucketsAgain) != 1 || res.BucketsAgain[0].UpTo != 2) {
				t.Errorf("decision %q, buckets again %v; want assume-pending and one bucket of 2", res.Decision, res.BucketsAgain)
			}
		})
	}
}

func TestCheckSeqReused(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    *hb
		cuts []Cut
		want int // seq-reused violations that count
	}{
		{"distinct_offsets", (&hb{}).sched("a", strings.Repeat("0", 16)+"0000000000000010", OK, 0, 10).sched("b", strings.Repeat("0", 16)+"0000000000000020", OK, 0, 10), nil, 0},
		{"one_offset_two_messages", (&hb{}).sched("a", strings.Repeat("0", 16)+"0000000000000010", OK, 0, 10).sched("b", strings.Repeat("1", 16)+"0000000000000010", OK, 5, 10), nil, 1},
		{"a_cut_reuses_offsets", (&hb{}).sched("a", strings.Repeat("0", 16)+"0000000000000010", OK, 0, 10).sched("b", strings.Repeat("1", 16)+"0000000000000010", OK, 5, 10),
			[]Cut{{CommitlogFrom: 8}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := tc.b.ev
			ev.Cuts = tc.cuts
			res := Check(ev, CheckParams{Fsync: "interval"})
			n := 0
			for _, v := range res.Violations {
				if v.Kind == VSeqReused && v.counts("interval") {
					n++
				}
			}
			if n != tc.want {
				t.Errorf("%d seq-reused violations that count, want %d: %v", n, tc.want, res.Violations)
			}
		})
	}
}

// sealed frames payload as a record of type typ (for fuzz seeds).
func sealed(typ uint8, payload []byte) []byte {
	buf := make([]byte, record.Size(len(payload)))
	record.Encode(buf, typ, 0, payload)
	return buf
}

// FuzzDecodeHeld: decoding what a damaged record held never panics,
// whatever the bytes and the kind, and says what the record was.
func FuzzDecodeHeld(f *testing.F) {
	sched := message.AppendSchedule(nil, &message.Message{DeliverAt: 1, Topic: []byte("t"), Body: []byte("k")})
	f.Add(sealed(message.TypeSchedule, sched), uint8(0))
	f.Add(sealed(message.TypeCancel, message.AppendCancel(nil, message.ID{DeliverAt: 1, Seq: 2})), uint8(0))
	f.Add(sealed(typeSchedEntry, append(make([]byte, 8), sched...)), uint8(2))
	f.Add(sealed(typeDone, make([]byte, 9)), uint8(3))
	f.Add(sealed(typeQueueMsg, append(make([]byte, 17), sched...)), uint8(6))
	f.Add(sealed(typeQueueAck, make([]byte, 17)), uint8(7))
	f.Fuzz(func(t *testing.T, rec []byte, kind uint8) {
		k := DamageKinds[int(kind)%len(DamageKinds)]
		h := decodeHeld(k, rec, commitlogHeader, 0)
		if h.What == "" && !isDelete(k) {
			t.Fatalf("%s: a record of %d bytes decoded to nothing said", k, len(rec))
		}
		_ = h.String()
	})
}

// FuzzFlippable: the records flippable lists decode, increase, lie inside
// the data, and each has a whole record after it.
func FuzzFlippable(f *testing.F) {
	a, b := sealed(1, []byte("hello")), sealed(2, []byte("world!"))
	f.Add(concat(make([]byte, 32), a, b, a), 32)
	f.Add(concat(make([]byte, 32), a, sealed(typeSkip, []byte{40, 0, 0, 0, 0, 0, 0, 0}), make([]byte, 16), b), 32)
	f.Add([]byte{1, 2, 3}, 0)
	f.Fuzz(func(t *testing.T, data []byte, start int) {
		if start < 0 || start > 1<<20 {
			return
		}
		recs := flippable(data, start)
		for i, r := range recs {
			if r.start < int64(start) || r.end > int64(len(data)) || r.start >= r.end || (i > 0 && r.start < recs[i-1].end) {
				t.Fatalf("record %d %v out of order or outside [%d, %d)", i, r, start, len(data))
			}
			if _, n, err := record.Decode(data[r.start:]); err != nil || r.start+int64(n) != r.end {
				t.Fatalf("record %v does not decode to its end: %v", r, err)
			}
		}
		if n := len(recs); n > 0 {
			last := recs[n-1]
			if all := scanRecords(data, start); len(all) != n+1 || all[n].start < last.end {
				t.Fatalf("the last flippable record %v has no record after it (%v)", last, all)
			}
		}
	})
}

// FuzzParseRepair: parsing whatever repair prints never panics, and every
// span it finds is one the text names.
func FuzzParseRepair(f *testing.F) {
	f.Add("  commitlog/00000000000000000000.log: damaged records (x): offsets 100..180 (80 bytes); skip\n    offsets 150..180 (30 bytes) were not routed: those records are LOST\n")
	f.Add("  topic ct0: /d/queue/topics/ct0/log/1.log: skip-damage: offsets 1..2 (1 bytes): x\n  topic ct0: 1 bytes of the queue log cannot be read: the messages there are lost\n")
	f.Add("  topic ct0: ACKS LOST: up to 3 messages\n")
	f.Fuzz(func(t *testing.T, out string) {
		r := parseRepair(out)
		for _, sp := range r.Lost {
			if !strings.Contains(out, fmt.Sprintf("offsets %d..%d", sp.From, sp.To)) {
				t.Fatalf("span %+v is not in the text", sp)
			}
		}
	})
}

func TestSummarizeDamage(t *testing.T) {
	evs := []DamageEvent{
		{At: at(100), DamagePlan: DamagePlan{Kind: DCommitlogFlip}, Outcome: RestartRefused, Named: true, RepairHint: true,
			Repair: &RepairResult{Lost: []LostSpan{{From: 1, To: 2}}}},
		{At: at(200), DamagePlan: DamagePlan{Kind: DCheckpointDelete}, Outcome: RestartStarted, Named: true},
		{At: at(300), DamagePlan: DamagePlan{Kind: DCommitlogFlip}, Outcome: RestartRefused, Undone: true, Repair: &RepairResult{ExitCode: 1}},
		{At: at(400), DamagePlan: DamagePlan{Kind: DDoneFlip}, Outcome: RestartHung, Undone: true},
	}
	vs := []Violation{
		{Kind: VAfterAck, At: at(250)},                                        // after the checkpoint-delete
		{Kind: VLost, At: at(50), Damage: DCommitlogFlip + " (cycle 1): ..."}, // allowed by the first repair
		{Kind: VLost, At: at(150), Allowed: true},                             // --allow: not counted
		{Kind: VStartFailed, At: at(400)},
	}
	s := summarizeDamage(evs, vs, "always", true, nil, time.Second)
	want := map[string]DamageStats{
		DCommitlogFlip:    {Injected: 2, Refused: 2, Named: 1, Repaired: 1, RepairLost: 1, Undone: 1, Allowed: 1},
		DCheckpointDelete: {Injected: 1, Started: 1, Reported: 1, Violations: 1, ByViolation: map[string]int{VAfterAck: 1}},
		DDoneFlip:         {Injected: 1, Hung: 1, Undone: 1, Violations: 1, ByViolation: map[string]int{VStartFailed: 1}},
		DQueueLogFlip:     {},
	}
	for k, w := range want {
		got := *s.ByKind[k]
		bv, wv := mapString(got.ByViolation), mapString(w.ByViolation)
		got.ByViolation, w.ByViolation = nil, nil
		if !reflect.DeepEqual(got, w) || bv != wv {
			t.Errorf("%s: %+v %s, want %+v %s", k, got, bv, w, wv)
		}
	}
}

// TestDamageAllowanceLostCancels: a commitlog span repair reported lost
// allows the cancels whose records may lie in it (bounded by the
// schedules answered before each was sent and sent after it was
// answered) to be delivered anyway, and no other cancel.
func TestDamageAllowanceLostCancels(t *testing.T) {
	data := "/d"
	clPath := data + "/commitlog/00000000000000000000.log"
	id := func(seq int) string { return message.ID{DeliverAt: 1, Seq: uint64(seq)}.String() }
	ev := Events{
		Schedules: []Schedule{
			{Key: "k100", ID: id(100), Outcome: OK, Sent: at(0), Answered: at(1)},
			{Key: "k200", ID: id(200), Outcome: OK, Sent: at(10), Answered: at(11)},
			{Key: "k300", ID: id(300), Outcome: OK, Sent: at(20), Answered: at(21)},
		},
		Cancels: []Cancel{
			{Key: "kA", Outcome: OK, Answer: CancelCancelled, Sent: at(5), Answered: at(6)},   // in [101, 200)
			{Key: "kB", Outcome: OK, Answer: CancelCancelled, Sent: at(25), Answered: at(26)}, // in [301, ∞)
			{Key: "kC", Outcome: OK, Answer: CancelAlreadyDelivered, Sent: at(5), Answered: at(6)},
		},
	}
	after := func(k string) Violation { return Violation{Kind: VAfterCancel, Key: k, At: at(50)} }
	for _, tc := range []struct {
		name     string
		from, to int64
		allowed  []bool // kA, kB, kC
	}{
		{"span_between_the_schedules_around_cancel_A", 150, 180, []bool{true, false, false}},
		{"span_after_the_last_schedule", 400, 500, []bool{false, true, false}},
		{"span_below_every_cancel", 0, 101, []bool{false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := []DamageEvent{{Cycle: 1, At: at(30), Outcome: RestartRefused, DamagePlan: DamagePlan{Kind: DCommitlogDelete, Path: clPath, Offset: -1},
				Repair: &RepairResult{Lost: []LostSpan{{File: clPath, From: tc.from, To: tc.to}}}}}
			vs := []Violation{after("kA"), after("kB"), after("kC")}
			markDamage(vs, damageAllowance(evs, ev, data, time.Second), ev)
			for i, v := range vs {
				if (v.Damage != "") != tc.allowed[i] {
					t.Errorf("%s of %s: allowed by %q, want allowed %v", v.Kind, v.Key, v.Damage, tc.allowed[i])
				}
			}
		})
	}
}

// A schedule entry whose commitlog span an earlier repair reported lost
// cannot be rebuilt from the commitlog, even when a new first segment
// starts at offset 0 again; a span of a queue log, or a repair the
// harness undid, says nothing about it.
func TestLostFromCommitlog(t *testing.T) {
	dir := t.TempDir()
	cl := filepath.Join(dir, "commitlog", "00000000000000000000.log")
	ql := filepath.Join(dir, "queue", "topics", "t", "log", "00000000000000000000.log")
	evs := []DamageEvent{
		{Repair: &RepairResult{Lost: []LostSpan{{File: ql, From: 0, To: 1000}}}},
		{Repair: &RepairResult{Lost: []LostSpan{{File: cl, From: 0, To: 500}}}, Undone: true},
		{Repair: &RepairResult{Lost: []LostSpan{{File: cl, From: 100, To: 200}}}},
	}
	for seq, want := range map[int64]bool{50: false, 100: true, 199: true, 200: false, 700: false} {
		if got := lostFromCommitlog(evs, seq, dir); got != want {
			t.Errorf("seq %d: lost %v, want %v", seq, got, want)
		}
	}
}

// TestSkipSpans: the skip records of the commitlog and the queue logs are
// listed with their files and offsets (the segment's base plus their
// position), a skip record with a span field by that span.
func TestSkipSpans(t *testing.T) {
	dir := t.TempDir()
	skip := func(n int) []byte {
		p := binary.LittleEndian.AppendUint64(nil, uint64(n))
		buf := make([]byte, n)
		if _, err := record.Encode(buf, typeSkip, 0, p); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	a := schedRecord(t, "k1")
	fakeSegment(t, filepath.Join(dir, "commitlog", "00000000000000001000.log"), 4096, a, skip(64), schedRecord(t, "k2"))
	fakeSegment(t, filepath.Join(dir, "queue", "topics", "ct0", "log", "00000000000000000000.log"), 4096, skip(40))
	got, err := skipSpans(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []LostSpan{{File: "commitlog/00000000000000001000.log", From: int64(1000 + len(a)), To: int64(1000 + len(a) + 64)},
		{File: "queue/topics/ct0/log/00000000000000000000.log", From: 0, To: 40}}
	if !slices.Equal(got, want) {
		t.Fatalf("skipSpans = %v, want %v", got, want)
	}
}

// TestSkipsUnreported: the start after a repair must log each skip record
// the repair wrote in the commitlog, alone or within a larger span.
func TestSkipsUnreported(t *testing.T) {
	e := DamageEvent{Cycle: 3, Rel: "commitlog/x.log", Repair: &RepairResult{Skipped: []LostSpan{
		{File: "commitlog/x.log", From: 100, To: 180}, {File: "queue/topics/ct0/log/y.log", From: 0, To: 40}}}}
	said := "WARN engine: commitlog offsets 60..180 were given up by hourglass repair (a skip record)\n"
	if vs := skipsUnreported(e, said, "/d"); len(vs) != 0 {
		t.Errorf("reported, yet %v", vs)
	}
	if vs := skipsUnreported(e, "WARN something else\n", "/d"); len(vs) != 1 || vs[0].Kind != VDamageUnreported {
		t.Errorf("not reported: %v, want one damage-unreported (the queue log's span needs nothing)", vs)
	}
	e.Undone = true
	if vs := skipsUnreported(e, "", "/d"); len(vs) != 0 {
		t.Errorf("a repair the harness undid: %v", vs)
	}
}

// TestSkipSpansPastDamage: a record not yet repaired does not hide the
// skip records after it.
func TestSkipSpansPastDamage(t *testing.T) {
	skip := make([]byte, 64)
	if _, err := record.Encode(skip, typeSkip, 0, binary.LittleEndian.AppendUint64(nil, 64)); err != nil {
		t.Fatal(err)
	}
	bad := schedRecord(t, "k1")
	bad[len(bad)-1] ^= 0xff // its checksum fails
	data := concat(make([]byte, commitlogHeader), bad, schedRecord(t, "k2"), skip, make([]byte, 4096))
	got := skipRecords(data, commitlogHeader)
	at := int64(commitlogHeader + len(bad) + len(schedRecord(t, "k2")))
	if !slices.Equal(got, []span{{at, at + 64}}) {
		t.Fatalf("skipRecords = %v, want [{%d %d}]", got, at, at+64)
	}
}

// TestFarBucket: the filler's bucket, a day ahead, is not a damage target;
// the workload's, within minutes, are.
func TestFarBucket(t *testing.T) {
	name := func(d time.Duration) string { return time.Now().Add(d).UTC().Format("20060102T150405Z") }
	if !farBucket(name(23*time.Hour)+".sched") || farBucket(name(time.Minute)+".done") || farBucket("reput.checkpoint") {
		t.Fatal("farBucket: want true a day ahead only")
	}
}

// TestResumeLost: a Resume answered OK whose record may lie in a commitlog
// span a repair reported lost is sent again at the drain; one answered
// before the schedules below the span, or after the damage, is not.
func TestResumeLost(t *testing.T) {
	id := func(seq int) string { return message.ID{DeliverAt: 1, Seq: uint64(seq)}.String() }
	h := &History{}
	h.AddSchedule(Schedule{Key: "a", ID: id(100), Outcome: OK, Sent: at(0), Answered: at(1)})
	h.AddSchedule(Schedule{Key: "b", ID: id(300), Outcome: OK, Sent: at(20), Answered: at(21)})
	h.AddPolicy(PolicyChange{Topic: "in-span", Paused: false, Outcome: OK, Sent: at(10), Answered: at(11)})
	h.AddPolicy(PolicyChange{Topic: "after-damage", Paused: false, Outcome: OK, Sent: at(60), Answered: at(61)})
	r := &runner{hist: h, dataDir: "/d", wl: &workload{paused: map[string]bool{}},
		dmg: &damager{events: []DamageEvent{{At: at(50), Repair: &RepairResult{Lost: []LostSpan{{File: "/d/commitlog/00000000000000000000.log", From: 150, To: 250}}}}}}}
	r.resumeLost()
	if !r.wl.paused["in-span"] || r.wl.paused["after-damage"] || len(r.wl.paused) != 1 {
		t.Fatalf("paused again: %v; want in-span only", r.wl.paused)
	}
}

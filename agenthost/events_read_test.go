package agenthost

import (
	"os"
	"strings"
	"testing"
)

// Events reads the log back as it was written, from any seq, and stops
// where the caller stops.
func TestLogEvents(t *testing.T) {
	sample, err := os.ReadFile("../config/samples/support-chat.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(sample), "\n"), "\n")
	l := openTestLog(t, memBucket(t))
	events, err := ReadEvents(strings.NewReader(string(sample)), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Written in three appends, so a read from the middle crosses segments.
	for _, part := range [][2]int{{0, 5}, {5, 12}, {12, len(events)}} {
		if err := l.AppendAt(ctx(t), int64(part[0]), events[part[0]:part[1]]); err != nil {
			t.Fatal(err)
		}
	}

	for _, from := range []int64{0, 3, 12, 17} {
		var got []string
		for e, err := range l.Events(ctx(t), from) {
			if err != nil {
				t.Fatalf("from %d: %v", from, err)
			}
			if e.Seq != from+int64(len(got)) {
				t.Fatalf("from %d: seq %d after %d events", from, e.Seq, len(got))
			}
			got = append(got, string(e.Raw))
		}
		if want := lines[from:]; strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("from %d: read\n%s\nwant\n%s", from, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}

	var seqs []int64
	for e, err := range l.EventsThrough(ctx(t), 4, 13) {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, e.Seq)
		if e.Seq == 9 {
			break
		}
	}
	if len(seqs) != 6 || seqs[0] != 4 || seqs[5] != 9 {
		t.Errorf("4..13 stopped at 9: read %v", seqs)
	}
	n := 0
	for _, err := range l.EventsThrough(ctx(t), 20, 1000) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != len(lines)-20 {
		t.Errorf("20..1000 read %d events, want the %d that exist", n, len(lines)-20)
	}
}

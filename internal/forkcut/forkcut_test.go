package forkcut_test

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/forkcut"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

func TestParseAtSeq(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"41", 41, ""},
		{"41.1", 41, ""},
		{"44.099999999999994", 44, ""},
		{"41.9999999999999999999", 41, ""},
		{"0", 0, ""},
		{"007", 7, ""},
		{"9223372036854775807", 9223372036854775807, ""},
		{"-1", 0, `atSeq "-1": must be a non-negative decimal such as "41" or "41.1"`},
		{"", 0, `atSeq "": must be a non-negative decimal`},
		{" 41", 0, `atSeq " 41": must be a non-negative decimal`},
		{"41 ", 0, `must be a non-negative decimal`},
		{"+41", 0, `must be a non-negative decimal`},
		{"NaN", 0, `must be a non-negative decimal`},
		{"Inf", 0, `must be a non-negative decimal`},
		{"4e1", 0, `must be a non-negative decimal`},
		{"41.", 0, `must be a non-negative decimal`},
		{".5", 0, `must be a non-negative decimal`},
		{"4.1.1", 0, `must be a non-negative decimal`},
		{"0x10", 0, `must be a non-negative decimal`},
		{"٤١", 0, `must be a non-negative decimal`},
		{"12345678901234567890", 0, `more than 19 integer digits`},
		{"9223372036854775808", 0, `beyond the largest possible seq`},
		{"1." + strings.Repeat("9", 41), 0, `more than 40 fraction digits`},
	}
	for _, tt := range tests {
		got, err := forkcut.ParseAtSeq(tt.in)
		if tt.wantErr == "" {
			if err != nil || got != tt.want {
				t.Errorf("ParseAtSeq(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil || !errors.Is(err, forkcut.ErrInvalidAtSeq) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseAtSeq(%q) error %v, want ErrInvalidAtSeq with %q", tt.in, err, tt.wantErr)
		}
	}
}

func readLog(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("../../testdata/logs/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// aborted-turn.jsonl: turn 1 is seqs 1–7, turn 2 (aborted, with frozen
// partial text) 8–15, turn 3 16–21.
func TestFind(t *testing.T) {
	log := readLog(t, "aborted-turn.jsonl")
	tests := []struct {
		name      string
		atSeq     string
		wantPoint forkcut.Point
		wantErr   error
	}{
		{"at a turn/start", "8", forkcut.Point{AtSeq: "8", AnchorSeq: 8, CutSeq: 15, CutTurn: 2, CutReason: "aborted"}, nil},
		{"mid-turn", "11", forkcut.Point{AtSeq: "11", AnchorSeq: 11, CutSeq: 15, CutTurn: 2, CutReason: "aborted"}, nil},
		{"the frozen node of an aborted turn", "14.1", forkcut.Point{AtSeq: "14.1", AnchorSeq: 14, CutSeq: 15, CutTurn: 2, CutReason: "aborted"}, nil},
		{"exactly at a turn/end", "7", forkcut.Point{AtSeq: "7", AnchorSeq: 7, CutSeq: 7, CutTurn: 1, CutReason: "stop"}, nil},
		{"at session/start", "0", forkcut.Point{AtSeq: "0", AnchorSeq: 0, CutSeq: 7, CutTurn: 1, CutReason: "stop"}, nil},
		{"at the head", "21", forkcut.Point{AtSeq: "21", AnchorSeq: 21, CutSeq: 21, CutTurn: 3, CutReason: "stop"}, nil},
		{"beyond the head", "22", forkcut.Point{}, forkcut.ErrAnchorBeyondHead},
		{"not a decimal", "1e3", forkcut.Point{}, forkcut.ErrInvalidAtSeq},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := forkcut.Find(turnlog.NewReader(bytes.NewReader(log)).All(), tt.atSeq)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Find(%q) error %v, want %v", tt.atSeq, err, tt.wantErr)
			}
			if !reflect.DeepEqual(p, tt.wantPoint) {
				t.Errorf("Find(%q) = %+v, want %+v", tt.atSeq, p, tt.wantPoint)
			}
		})
	}
}

func TestFindInsideOpenTurnWaits(t *testing.T) {
	log := readLog(t, "aborted-turn.jsonl")
	open := log[:bytes.LastIndex(bytes.TrimSpace(log), []byte("\n"))+1] // drop turn 3's turn/end
	_, err := forkcut.Find(turnlog.NewReader(bytes.NewReader(open)).All(), "18")
	if !errors.Is(err, forkcut.ErrTurnNotEnded) || errors.Is(err, forkcut.ErrAnchorBeyondHead) {
		t.Fatalf("error %v, want ErrTurnNotEnded only", err)
	}
	if cerr, ok := errors.AsType[*forkcut.CutError](err); !ok || cerr.Anchor != 18 || cerr.Head != 20 {
		t.Errorf("error %#v, want anchor 18 and head 20", err)
	}
	_, err = forkcut.Find(turnlog.NewReader(strings.NewReader("")).All(), "0")
	if !errors.Is(err, forkcut.ErrAnchorBeyondHead) || !strings.Contains(err.Error(), "empty log") {
		t.Errorf("empty log: %v", err)
	}
}

// A fork at an aborted turn's frozen node resumes from the same context the
// source would: the child's transcript equals the source's through the cut,
// and the frozen partial text is in neither.
func TestChildOfAbortedTurnResumesLikeSource(t *testing.T) {
	log := readLog(t, "aborted-turn.jsonl")
	p, err := forkcut.Find(turnlog.NewReader(bytes.NewReader(log)).All(), "14.1")
	if err != nil {
		t.Fatal(err)
	}
	var child bytes.Buffer
	if err := forkcut.WriteChild(turnlog.NewReader(bytes.NewReader(log)).All(), turnlog.NewWriter(&child), p); err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(log, []byte("\n"))
	if want := bytes.Join(lines[:p.CutSeq+1], nil); !bytes.Equal(child.Bytes(), want) {
		t.Fatalf("child log is not the source's events 0..%d byte for byte:\n%s", p.CutSeq, child.Bytes())
	}
	fromChild, err := replay.Transcript(turnlog.NewReader(&child).All(), replay.Options{Through: replay.Head})
	if err != nil {
		t.Fatal(err)
	}
	fromSource, err := replay.Transcript(turnlog.NewReader(bytes.NewReader(log)).All(), replay.Options{Through: p.CutSeq})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromChild, fromSource) {
		t.Errorf("child transcript differs from the source's through the cut")
	}
	var seqs []int64
	for _, m := range fromChild.Messages {
		seqs = append(seqs, m.Seq)
		if bytes.Contains(m.Message, []byte("Object storage began")) {
			t.Errorf("frozen partial text entered the transcript at seq %d", m.Seq)
		}
	}
	if !reflect.DeepEqual(seqs, []int64{2, 6, 9}) {
		t.Errorf("child transcript seqs %v, want [2 6 9]", seqs)
	}
}

// A fork says which compaction and which system messages its child starts
// from: before a compaction, the whole history and every system message;
// after it, the compaction's summary and system message and what followed.
func TestFindNamesTheCompactionAndSystemPromptTheChildStartsFrom(t *testing.T) {
	log := []byte(`{"seq":0,"type":"system/message","content":"be brief"}
{"seq":1,"type":"turn/start","turn":1}
{"seq":2,"type":"user/message","turn":1,"content":"q1"}
{"seq":3,"type":"turn/end","turn":1,"reason":"stop"}
{"seq":4,"type":"system/message","content":"plan mode","toolsAdded":[{"name":"grep"}]}
{"seq":5,"type":"turn/start","turn":2}
{"seq":6,"type":"user/message","turn":2,"content":"q2"}
{"seq":7,"type":"turn/end","turn":2,"reason":"stop"}
{"seq":8,"type":"context/compaction","content":"summary","firstKeptSeq":6,"systemMessage":{"content":"be brief","toolsAdded":[{"name":"grep"}]}}
{"seq":9,"type":"turn/start","turn":3}
{"seq":10,"type":"user/message","turn":3,"content":"q3"}
{"seq":11,"type":"turn/end","turn":3,"reason":"stop"}
{"seq":12,"type":"system/message","content":"review mode"}
{"seq":13,"type":"context/compaction","content":"summary 2","firstKeptSeq":13}
{"seq":14,"type":"turn/start","turn":4}
{"seq":15,"type":"user/message","turn":4,"content":"q4"}
{"seq":16,"type":"turn/end","turn":4,"reason":"stop"}
`)
	seq := func(s int64) *int64 { return &s }
	for _, tt := range []struct {
		at         string
		compaction *int64
		system     []int64
	}{
		{"2", nil, []int64{0}},
		{"6.5", nil, []int64{0, 4}},
		{"10", seq(8), []int64{8}},
		{"15", seq(13), nil}, // the second compaction carries no system message
	} {
		p, err := forkcut.Find(turnlog.NewReader(bytes.NewReader(log)).All(), tt.at)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p.CompactionSeq, tt.compaction) || !reflect.DeepEqual(p.SystemSeqs, tt.system) {
			t.Errorf("at %s: compaction %v, system %v; want %v, %v", tt.at, p.CompactionSeq, p.SystemSeqs, tt.compaction, tt.system)
		}
	}
}

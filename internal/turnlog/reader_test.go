package turnlog_test

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// readAll reads a log to the end, collecting events and every problem.
func readAll(t *testing.T, r *turnlog.Reader) (events []turnlog.Event, problems []string) {
	t.Helper()
	for e, err := range r.All() {
		if err != nil {
			if _, ok := errors.AsType[*turnlog.LineError](err); !ok {
				t.Fatalf("All: %v is not a *LineError", err)
			}
			problems = append(problems, err.Error())
			continue
		}
		events = append(events, e)
	}
	return events, problems
}

func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

func TestReaderStructuralRules(t *testing.T) {
	const (
		start  = `{"seq":%d,"type":"turn/start","turn":1}`
		user   = `{"seq":1,"type":"user/message","turn":1,"content":"hi"}`
		endOne = `{"seq":2,"type":"turn/end","turn":1,"reason":"stop"}`
	)
	tests := []struct {
		name string
		log  string
		want []string
	}{
		{"valid with session start, unknown type and blank line", lines(
			`{"seq":0,"type":"session/start","adapter":{"kind":"pi-ai"}}`,
			`{"seq":1,"type":"ui/marker"}`,
			`{"seq":2,"type":"turn/start","turn":1}`,
			``,
			`{"seq":3,"type":"user/message","turn":1,"content":"hi"}`,
			`{"seq":4,"type":"ui/marker","turn":1}`,
			`{"seq":5,"type":"turn/end","turn":1,"reason":"stop"}`,
			`{"seq":6,"type":"turn/start","turn":2}`,
		), nil},
		{"first seq must be 0", lines(
			`{"seq":1,"type":"turn/start","turn":1}`,
		), []string{"line 1 (seq 1): seq gap: want 0, 1 event(s) missing"}},
		{"gap reported once", lines(
			`{"seq":0,"type":"turn/start","turn":1}`,
			`{"seq":3,"type":"user/message","turn":1,"content":"hi"}`,
			`{"seq":4,"type":"turn/end","turn":1,"reason":"stop"}`,
		), []string{"line 2 (seq 3): seq gap: want 1, 2 event(s) missing"}},
		{"duplicate", lines(
			`{"seq":0,"type":"turn/start","turn":1}`,
			user,
			user,
			endOne,
		), []string{"line 3 (seq 1): duplicate or out-of-order seq: want 2"}},
		{"turn/end with no open turn", lines(
			`{"seq":0,"type":"turn/end","turn":1,"reason":"stop"}`,
		), []string{"line 1 (seq 0): turn/end with no open turn"}},
		{"event outside a turn", lines(
			`{"seq":0,"type":"user/message","content":"hi"}`,
		), []string{"line 1 (seq 0): user/message outside a turn (no turn/start before it)"}},
		{"turn/start while open", lines(
			`{"seq":0,"type":"turn/start","turn":1}`,
			`{"seq":1,"type":"turn/start","turn":2}`,
			`{"seq":2,"type":"turn/end","turn":2,"reason":"stop"}`,
		), []string{"line 2 (seq 1): turn/start while turn 1 is open"}},
		{"turn number must match the open turn", lines(
			`{"seq":0,"type":"turn/start","turn":1}`,
			`{"seq":1,"type":"user/message","turn":2,"content":"hi"}`,
			`{"seq":2,"type":"turn/end","turn":1,"reason":"stop"}`,
		), []string{"line 2 (seq 1): user/message has turn 2, but the open turn is 1"}},
		{"turn numbers increase", lines(
			`{"seq":0,"type":"turn/start","turn":2}`,
			`{"seq":1,"type":"turn/end","turn":2,"reason":"stop"}`,
			`{"seq":2,"type":"turn/start","turn":2}`,
		), []string{"line 3 (seq 2): turn 2 does not come after turn 2"}},
		{"turn/start without a turn number", lines(
			`{"seq":0,"type":"turn/start"}`,
		), []string{"line 1 (seq 0): turn/start needs a turn number ≥ 1"}},
		{"session/start only first", lines(
			`{"seq":0,"type":"turn/start","turn":1}`,
			`{"seq":1,"type":"session/start"}`,
		), []string{"line 2 (seq 1): session/start must be the first event of the log"}},
		{"malformed line counts as one seq; reading goes on", lines(
			`{"seq":0,"type":"turn/start","turn":1}`,
			`{"seq":1,"type":"user/message",`,
			endOne,
			`{"seq":3,"type":"turn/end","turn":1,"reason":"stop"}`,
		), []string{
			`line 2: malformed JSON at byte 31: unexpected end of JSON input`,
			"line 4 (seq 3): turn/end with no open turn",
		}},
		{"CRLF line endings", strings.ReplaceAll(lines(fmtSeq(start, 0), user, endOne), "\n", "\r\n"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, problems := readAll(t, turnlog.NewReader(strings.NewReader(tt.log)))
			if !reflect.DeepEqual(problems, tt.want) {
				t.Errorf("problems =\n  %q\nwant\n  %q", problems, tt.want)
			}
		})
	}
}

func fmtSeq(format string, seq int) string {
	return strings.Replace(format, "%d", string(rune('0'+seq)), 1)
}

func TestReaderKeepsBytesAndLastLineWithoutNewline(t *testing.T) {
	log := `{"seq":0,"type":"turn/start","turn":1,"x-host":{"b":1,  "a":[true]}}` + "\n" +
		`{"seq":1,"type":"turn/end","turn":1,"reason":"stop"}`
	var out bytes.Buffer
	w := turnlog.NewWriter(&out)
	events, problems := readAll(t, turnlog.NewReader(strings.NewReader(log)))
	if len(problems) > 0 || len(events) != 2 {
		t.Fatalf("events %d, problems %q", len(events), problems)
	}
	for _, e := range events {
		if err := w.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if out.String() != log+"\n" {
		t.Errorf("written log differs:\n%s\nwant\n%s", out.String(), log)
	}
}

func TestReaderLongLines(t *testing.T) {
	big := `{"seq":1,"type":"user/message","turn":1,"content":"` + strings.Repeat("x", 5<<20) + `"}`
	tooBig := strings.Repeat("y", turnlog.MaxLineBytes)
	log := lines(
		`{"seq":0,"type":"turn/start","turn":1}`,
		big,
		`{"seq":2,"type":"user/message","turn":1,"content":"`+tooBig+`"}`,
		`{"seq":3,"type":"turn/end","turn":1,"reason":"stop"}`,
	)
	events, problems := readAll(t, turnlog.NewReader(strings.NewReader(log)))
	if want := []string{"line 3: line longer than 16 MiB"}; !reflect.DeepEqual(problems, want) {
		t.Errorf("problems = %q, want %q", problems, want)
	}
	if len(events) != 3 || string(events[1].Raw) != big {
		t.Errorf("got %d events, want the 5 MiB line read whole and reading to go on after the too long one", len(events))
	}
}

func TestNewValidatorAtResumesMidTurn(t *testing.T) {
	log := lines(
		`{"seq":40,"type":"chunk","turn":7,"response":0,"block":0,"delta":{"type":"text","text":"a"}}`,
		`{"seq":41,"type":"turn/end","turn":7,"reason":"aborted"}`,
		`{"seq":42,"type":"turn/start","turn":8}`,
		`{"seq":43,"type":"turn/start","turn":9}`,
	)
	_, problems := readAll(t, turnlog.NewReaderWith(strings.NewReader(log), turnlog.NewValidatorAt(40)))
	if want := []string{"line 4 (seq 43): turn/start while turn 8 is open"}; !reflect.DeepEqual(problems, want) {
		t.Errorf("problems = %q, want %q", problems, want)
	}
}

func TestGeneratedLogIsValid(t *testing.T) {
	log := loggen.Log(2000, 7)
	if !bytes.Equal(log, loggen.Log(2000, 7)) {
		t.Fatal("generator is not deterministic")
	}
	events, problems := readAll(t, turnlog.NewReader(bytes.NewReader(log)))
	if len(problems) > 0 {
		t.Fatalf("generated log has problems: %q", problems[:min(len(problems), 5)])
	}
	if len(events) < 2000 || events[len(events)-1].Type != turnlog.TypeTurnEnd {
		t.Errorf("generated %d events ending with %s, want ≥ 2000 ending with turn/end", len(events), events[len(events)-1].Type)
	}
}

// A reading error other than a problem of a line ends the events: it is
// yielded after the events read before it, and nothing follows.
func TestReaderAllEndsAtAReadError(t *testing.T) {
	broken := errors.New("connection reset")
	in := io.MultiReader(strings.NewReader(lines(
		`{"seq":0,"type":"turn/start","turn":1}`,
		`{"seq":1,"type":"turn/start","turn":2}`,
	)), iotest.ErrReader(broken))
	var got []string
	for e, err := range turnlog.NewReader(in).All() {
		if len(got) > 5 {
			break // the error again and again
		}
		if err != nil {
			got = append(got, err.Error())
			continue
		}
		got = append(got, string(e.Type))
	}
	want := []string{"turn/start", "line 2 (seq 1): turn/start while turn 1 is open", "connection reset"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read %q, want %q", got, want)
	}
}

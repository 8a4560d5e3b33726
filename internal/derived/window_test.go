package derived

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// objects is a Log of derived objects alone, counting what is read.
type objects struct {
	m     map[string][]byte
	reads []string
}

func (o *objects) Head(context.Context) (int64, error) { return 100, nil }

func (o *objects) Events(context.Context, int64) turnlog.Events {
	return func(yield func(turnlog.Event, error) bool) { yield(turnlog.Event{}, fmt.Errorf("no raw log here")) }
}

func (o *objects) GetDerived(_ context.Context, name string, _ int64) ([]byte, error) {
	o.reads = append(o.reads, name)
	data, ok := o.m[name]
	if !ok {
		return nil, ErrNotFound
	}
	return data, nil
}

func (o *objects) PutDerived(_ context.Context, name string, data []byte) error {
	o.m[name] = data
	return nil
}

func (o *objects) DeleteDerived(_ context.Context, name string) error {
	delete(o.m, name)
	return nil
}

func (o *objects) Beside(session, uid string) (Log, error) {
	return nil, fmt.Errorf("no Session %s (uid %s) here", session, uid)
}

func message(seq int64, role, origin string, size int) replay.Message {
	body, _ := json.Marshal(map[string]string{"role": role, "text": strings.Repeat("x", size)})
	return replay.Message{Seq: seq, Role: role, Origin: origin, Message: body}
}

// A compaction's messages stand first in the transcript, far from where
// their seq puts them: a window whose seqs hold the compaction gets them
// even when the parts it reads stop before the first part.
func TestTranscriptWindowFindsTheCompaction(t *testing.T) {
	ctx := context.Background()
	log := &objects{m: map[string][]byte{}}
	ck, err := OpenReplay(ctx, log, turnlog.Adapter{}, false)
	if err != nil {
		t.Fatal(err)
	}
	big := MaxPartBytes * 3 / 4
	msgs := []replay.Message{
		message(50, "system", replay.OriginCompaction, 10), message(50, "user", replay.OriginCompaction, 10),
		// kept, the big ones each starting a part of its own
		message(20, "user", "", big), message(21, "assistant", "", big), message(30, "user", "", big), message(31, "assistant", "", 10),
		message(52, "user", "", 10), message(53, "assistant", "", 10), message(60, "user", "", 10),
	}
	if err := ck.AppendParts(ctx, msgs, nil); err != nil {
		t.Fatal(err)
	}
	compaction := int64(50)
	ck.State.Next = 61
	ck.State.Context = &replay.ContextState{KeptFrom: 20}
	ck.Summary.ThroughSeq = 60
	ck.Summary.Replay.Compactions, ck.Summary.Replay.LastCompactionSeq = 1, &compaction
	if err := ck.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(ck.State.Parts); n != 3 {
		t.Fatalf("%d parts, want 3 (the big messages apart)", n)
	}
	log.reads = nil
	w, err := LoadTranscriptWindow(ctx, log, turnlog.Adapter{}, TranscriptQuery{From: 45, Through: 55})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range w.Messages {
		got = append(got, fmt.Sprintf("%d:%d %s%s", m.Index, m.Seq, m.Role, m.Origin))
	}
	want := []string{"0:50 systemcompaction", "1:50 usercompaction", "6:52 user", "7:53 assistant"}
	if !slices.Equal(got, want) {
		t.Errorf("window of seqs 45-55: %v, want %v", got, want)
	}
	// The checkpoint, the last part (which holds seq 31, below the
	// window) and the first part for the compaction: not the middle one.
	if len(log.reads) != 3 || slices.Contains(log.reads, ck.State.Parts[1].Name(TranscriptDir(turnlog.Adapter{}))) {
		t.Errorf("read %v, want the checkpoint, the last part and the first", log.reads)
	}
	// Earlier: seqs 20-44 are before message 6, in the first two parts.
	log.reads = nil
	e, err := LoadTranscriptWindow(ctx, log, turnlog.Adapter{}, TranscriptQuery{From: 20, Through: 44, Hint: w.EarlierHint()})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Messages) != 4 || e.Messages[0].Seq != 20 || e.Messages[3].Seq != 31 {
		t.Errorf("window of seqs 20-44: %+v", e.Messages)
	}
	if h := w.EarlierHint(); h.Hi != 6 {
		t.Errorf("the earlier hint %+v, want messages before 6", h)
	}
	// A hint of another epoch is not believed.
	stale := w.EarlierHint()
	stale.Epoch, stale.Hi = "0", 1
	if e, err := LoadTranscriptWindow(ctx, log, turnlog.Adapter{}, TranscriptQuery{From: 20, Through: 44, Hint: stale}); err != nil || len(e.Messages) != 4 {
		t.Errorf("with a stale hint: %d messages, %v; want 4", len(e.Messages), err)
	}
}

package pirecord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/worker"
	"github.com/turnlog/turnlog/test/internal/pihost"
)

// The pi harness (test/internal/pihost) under the names these tests use.
type (
	block     = pihost.Block
	reply     = pihost.Reply
	provider  = pihost.Provider
	env       = pihost.Env
	piProc    = pihost.Pi
	piContext = pihost.Resume
)

func newProvider(t *testing.T) *provider { return pihost.NewProvider(t) }

// newEnv is a pi installation recording into ns/session/uid of the store
// at storeURL: versitygw's (gw, whose credentials pi gets) or a file://
// one (gw nil).
func newEnv(t *testing.T, prov *provider, storeURL string, gw *versitygw.Server, ns, session, uid string) *env {
	e := pihost.NewEnv(t, prov, storeURL, ns, session, uid)
	if gw != nil {
		e.Vars = append(e.Vars, "AWS_ACCESS_KEY_ID="+gw.AccessKey, "AWS_SECRET_ACCESS_KEY="+gw.SecretKey, "AWS_REGION=us-east-1",
			"TURNLOG_S3_TIMEOUT_MS=2000")
	}
	return e
}

func resumeOf(t *testing.T, e *env, file string, leaf ...string) piContext {
	return pihost.ResumeOf(t, e, file, leaf...)
}

func sameAsPi(t *testing.T, msgs []replay.Message, pc piContext, target agenthost.Adapter) string {
	return pihost.SameAsPi(t, msgs, pc, target)
}

func target(pc piContext) agenthost.Adapter { return pihost.Target(pc) }

// ---------------------------------------------------------------------------
// The log and the transcripts
// ---------------------------------------------------------------------------

type sessionRef struct {
	// gw is the store; nil for the file:// store at fileURL.
	gw      *versitygw.Server
	fileURL string
	loc     agenthost.Location
}

// storeURL is the URL of the Session's store.
func (s sessionRef) storeURL() string {
	if s.gw == nil {
		return s.fileURL
	}
	return s.gw.URL
}

// hostStore opens the Session's store as an agent host does.
func (s sessionRef) hostStore(ctx context.Context) (*agenthost.Store, error) {
	if s.gw == nil {
		return agenthost.OpenStore(ctx, s.fileURL, nil)
	}
	return agenthost.OpenStore(ctx, s.gw.URL, &agenthost.StoreOptions{AccessKeyID: s.gw.AccessKey, SecretAccessKey: s.gw.SecretKey})
}

// bucket opens the Session's store as the workers do.
func (s sessionRef) bucket(ctx context.Context) (store.Bucket, error) {
	if s.gw == nil {
		return store.Open(ctx, s.fileURL, nil)
	}
	return s.gw.Open(ctx)
}

// export reads the Session's log as JSON Lines.
func (s sessionRef) export(t *testing.T) []byte {
	t.Helper()
	ctx := context.Background()
	st, err := s.hostStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := st.Log(s.loc)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := l.Export(ctx, &buf); err != nil {
		t.Fatalf("read the log: %v", err)
	}
	return buf.Bytes()
}

// validate checks the log as `turnlog validate` does and returns its events.
func validate(t *testing.T, log []byte) []turnlog.Event {
	t.Helper()
	var events []turnlog.Event
	var problems []string
	for e, err := range turnlog.NewReader(bytes.NewReader(log)).All() {
		if err != nil {
			if _, ok := errors.AsType[*turnlog.LineError](err); !ok {
				t.Fatalf("read the log: %v", err)
			}
			problems = append(problems, err.Error())
			continue
		}
		events = append(events, e)
	}
	if len(problems) > 0 {
		t.Fatalf("the log does not validate:\n%s", strings.Join(problems, "\n"))
	}
	return events
}

// stored replays the Session as the workers do and reads the transcript
// they stored for target.
func (s sessionRef) stored(t *testing.T, target agenthost.Adapter) agenthost.Transcript {
	t.Helper()
	ctx := context.Background()
	b, err := s.bucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := sessionlog.New(b).Log(sessionlog.Location{Prefix: s.loc.Prefix, Namespace: s.loc.Namespace, Session: s.loc.Session, UID: s.loc.UID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Replay(ctx, derived.StoreLog{Log: l}, target); err != nil {
		t.Fatalf("replay: %v", err)
	}
	st, err := s.hostStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hl, err := st.Log(s.loc)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := hl.WithTarget(target).Transcript(ctx)
	if err != nil {
		t.Fatalf("read the stored transcript: %v", err)
	}
	return tr
}

// compareEveryTurn checks the transcript through every turn/end of the log
// (replayed as the workers replay) against pi's context at the entry the
// turn ended with, and the stored transcript of the whole Session against
// pi's resume of the session file. It returns how many transcripts it
// compared.
func compareEveryTurn(t *testing.T, e *env, ref sessionRef, log []byte, events []turnlog.Event, file string) int {
	t.Helper()
	n := 0
	leaf := ""
	for _, ev := range events {
		var m struct {
			PiEntry struct{ ID string } `json:"piEntry"`
		}
		_ = json.Unmarshal(ev.Raw, &m)
		if m.PiEntry.ID != "" {
			leaf = m.PiEntry.ID
		}
		if ev.Type != turnlog.TypeTurnEnd || leaf == "" {
			continue
		}
		pc := resumeOf(t, e, file, leaf)
		tgt := target(pc)
		res, err := replay.Transcript(turnlog.NewReader(bytes.NewReader(log)).All(), replay.Options{Target: tgt, Through: ev.Seq, Reread: replay.RereadBytes(log)})
		if err != nil {
			t.Fatalf("replay through seq %d: %v", ev.Seq, err)
		}
		if d := sameAsPi(t, res.Messages, pc, tgt); d != "" {
			t.Fatalf("through seq %d (pi entry %s), the transcript differs from pi's context: %s", ev.Seq, leaf, d)
		}
		n++
	}
	pc := resumeOf(t, e, file)
	tgt := target(pc)
	tr := ref.stored(t, tgt)
	if d := sameAsPi(t, tr.Messages, pc, tgt); d != "" {
		t.Fatalf("the stored transcript differs from pi's context: %s", d)
	}
	return n + 1
}

// checkStreams checks that every streamed response is in the log once and
// whole: the chunks of each response that has pi's finished message add up,
// block for block, to that message's text, thinking and tool arguments; a
// response with no message ends as aborted; and no pi entry is in the log
// twice. It returns the number of streamed responses.
func checkStreams(t *testing.T, events []turnlog.Event) int {
	t.Helper()
	type key struct{ turn, response int64 }
	type stream struct {
		blocks   map[int]string
		finished string
		message  map[string]any
	}
	streams := map[key]*stream{}
	var order []key
	entries := map[string]int64{}
	for _, ev := range events {
		var m struct {
			Turn       int64  `json:"turn"`
			Response   int64  `json:"response"`
			Block      int    `json:"block"`
			StopReason string `json:"stopReason"`
			Delta      struct {
				Text, Thinking, ArgumentsDelta string
			} `json:"delta"`
			Message map[string]any      `json:"message"`
			PiEntry struct{ ID string } `json:"piEntry"`
		}
		if err := json.Unmarshal(ev.Raw, &m); err != nil {
			t.Fatal(err)
		}
		if id := m.PiEntry.ID; id != "" {
			if prev, dup := entries[id]; dup {
				t.Errorf("pi entry %s is in the log twice: seq %d and %d", id, prev, ev.Seq)
			}
			entries[id] = ev.Seq
		}
		k := key{m.Turn, m.Response}
		switch ev.Type {
		case turnlog.TypeResponseStart:
			if streams[k] != nil {
				t.Errorf("seq %d: response %d of turn %d starts twice", ev.Seq, m.Response, m.Turn)
			}
			streams[k] = &stream{blocks: map[int]string{}}
			order = append(order, k)
		case turnlog.TypeChunk:
			streams[k].blocks[m.Block] += m.Delta.Text + m.Delta.Thinking + m.Delta.ArgumentsDelta
		case turnlog.TypeResponseFinish:
			streams[k].finished = m.StopReason
		case turnlog.TypeAssistantMessage:
			if s := streams[k]; s != nil {
				s.message = m.Message
			}
		}
	}
	for _, k := range order {
		s := streams[k]
		if s.finished == "" {
			t.Errorf("response %d of turn %d never finished", k.response, k.turn)
			continue
		}
		if s.message == nil {
			if s.finished != "aborted" {
				t.Errorf("response %d of turn %d has no message and finished %q, not aborted", k.response, k.turn, s.finished)
			}
			continue
		}
		content, _ := s.message["content"].([]any)
		for i, b := range content {
			b := b.(map[string]any)
			want := fmt.Sprint(b["text"], b["thinking"])
			switch b["type"] {
			case "text":
				want = b["text"].(string)
			case "thinking":
				want = b["thinking"].(string)
			case "toolCall":
				args, _ := json.Marshal(b["arguments"])
				var got any
				if err := json.Unmarshal([]byte(s.blocks[i]), &got); err != nil || !reflect.DeepEqual(got, b["arguments"]) {
					t.Errorf("response %d of turn %d, block %d: streamed arguments %q, the message has %s", k.response, k.turn, i, s.blocks[i], args)
				}
				continue
			}
			if s.blocks[i] != want {
				t.Errorf("response %d of turn %d, block %d: streamed %q, the message has %q", k.response, k.turn, i, s.blocks[i], want)
			}
		}
	}
	return len(order)
}

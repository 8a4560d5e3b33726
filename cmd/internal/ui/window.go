package ui

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// A Session of thousands of turns is shown a window of turns at a time:
// its last turns first, earlier ones as the page scrolls up, and, live,
// what was appended since. Each window reads from the store only the
// segments of the raw log that hold its turns (agenthost.Log.LastTurns,
// Log.Events) and the transcript parts that hold their messages
// (Log.TranscriptWindow); see docs/ui.md, "Long Sessions".

const (
	// defaultTurns is how many turns a window has when the page does not
	// say.
	defaultTurns = 50
	// maxTurns bounds the turns a window may ask for.
	maxTurns = 500
	// maxUpdateTurns bounds a live update: past it the page is sent the
	// last turns again, to start over with.
	maxUpdateTurns = 200
)

// windowRequest is which turns a window asks for: the last ones (neither
// Before nor From), those before a cursor, or all from a cursor on.
type windowRequest struct {
	before, from bool
	seq          int64
	hint         agenthost.TranscriptHint
	limit        int
}

// A cursor is a seq, optionally followed by where the transcript holds
// the messages the next window needs, for the transcript's epoch:
// "SEQ" or "SEQ.LO.HI.EPOCH". A hint that no longer holds is ignored, so a
// cursor is never wrong, only slower.
var cursorPattern = regexp.MustCompile(`^([0-9]{1,18})(?:\.([0-9]{1,18})\.(-1|[0-9]{1,18})\.([0-9a-f]{1,64}))?$`)

func formatCursor(seq int64, h agenthost.TranscriptHint) string {
	if h.Epoch == "" {
		return strconv.FormatInt(seq, 10)
	}
	return fmt.Sprintf("%d.%d.%d.%s", seq, h.Lo, h.Hi, h.Epoch)
}

func parseCursor(name, s string) (int64, agenthost.TranscriptHint, error) {
	m := cursorPattern.FindStringSubmatch(s)
	if m == nil {
		return 0, agenthost.TranscriptHint{}, fmt.Errorf("%s=%q: want a seq (a whole number) or a cursor the page was given", name, s)
	}
	seq, _ := strconv.ParseInt(m[1], 10, 64)
	if m[2] == "" {
		return seq, agenthost.TranscriptHint{}, nil
	}
	lo, _ := strconv.ParseInt(m[2], 10, 64)
	hi, _ := strconv.ParseInt(m[3], 10, 64)
	return seq, agenthost.TranscriptHint{Epoch: m[4], Lo: lo, Hi: hi}, nil
}

// parseWindowRequest reads ?before=CURSOR, ?from=CURSOR and ?limit=N.
func parseWindowRequest(q url.Values) (windowRequest, error) {
	req := windowRequest{limit: defaultTurns}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxTurns {
			return req, fmt.Errorf("limit=%q: want a whole number of turns from 1 to %d", v, maxTurns)
		}
		req.limit = n
	}
	before, from := q.Get("before"), q.Get("from")
	var err error
	switch {
	case before != "" && from != "":
		return req, errors.New("before and from: give one of them")
	case before != "":
		req.before = true
		req.seq, req.hint, err = parseCursor("before", before)
	case from != "":
		req.from = true
		req.seq, req.hint, err = parseCursor("from", from)
	}
	return req, err
}

// turns answers a window of a Session's conversation.
func (s *Server) turns(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	req, err := parseWindowRequest(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	session := &turnlogv1.Session{}
	if err := s.opts.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, session); err != nil {
		writeError(w, httpStatus(err), fmt.Errorf("Session %s/%s: %w", ns, name, err))
		return
	}
	events, _ := s.sessionEvents(ctx, ns, name)
	writeJSON(w, http.StatusOK, s.conversation(ctx, session, events, req))
}

// conversation reads one window of the Session's raw log and the stored
// transcript's messages of its seqs, saying in its Note what it could not
// read.
func (s *Server) conversation(ctx context.Context, session *turnlogv1.Session, events []eventView, req windowRequest) conversation {
	c := conversation{ThroughSeq: -1, From: 0, To: -1, Turns: []turnView{}}
	if s.opts.Store == nil {
		c.Note = "No transcript: start turnlog ui with --store-url (or $TURNLOG_STORE_URL) to read the Session's log."
		return c
	}
	log, err := s.opts.Store.OpenSession(ctx, s.opts.Kube, session.Namespace, session.Name)
	if err != nil {
		c.Note = "The Session's log cannot be opened: " + err.Error()
		return c
	}
	raw, reset, err := readWindow(ctx, log, req)
	if err != nil {
		c.Note = "The Session's log cannot be read: " + err.Error()
		return c
	}
	c.From, c.To, c.Reset = raw.from, raw.to, reset
	tw, err := log.TranscriptWindow(ctx, agenthost.TranscriptQuery{From: raw.from, Through: raw.to, Hint: req.hint})
	switch {
	case errors.Is(err, agenthost.ErrNotReplayed):
		c.Note = "No transcript yet: the workers have not replayed a turn of this Session."
	case err != nil:
		c.Note = "The stored transcript cannot be read: " + err.Error()
	default:
		c.ThroughSeq, c.Epoch = tw.ThroughSeq, tw.Epoch
	}
	msgs := make([]replay.Message, len(tw.Messages))
	var tail []int64
	for i, m := range tw.Messages {
		msgs[i] = m.Message
		if m.Index >= tw.Stored {
			tail = append(tail, m.Seq)
		}
	}
	degraded := degradedMessages(session, tw.Diagnostics, events)
	refused := refusals(tw.Diagnostics)
	c.Turns = buildConversation(msgs, raw, degraded, refused)
	c.Marks = marksOutside(raw.from, raw.to, degraded, refused)
	if raw.from > 0 && (!req.from || reset) {
		c.Earlier = formatCursor(raw.from, tw.EarlierHint())
	}
	if !req.before {
		r := refreshSeq(raw, c.ThroughSeq, tail)
		c.Refresh = formatCursor(r, tw.LaterHint(r))
	}
	return c
}

// readWindow reads the raw log's events a window covers. A live update
// that would bring more than maxUpdateTurns turns reads the last turns
// instead, and says so (reset).
func readWindow(ctx context.Context, log *agenthost.Log, req windowRequest) (*rawLog, bool, error) {
	if req.from {
		rr := newRawReader(req.seq)
		starts := 0
		for e, err := range log.Events(ctx, req.seq) {
			if err != nil {
				return nil, false, err
			}
			if e.Type == turnlog.TypeTurnStart {
				if starts++; starts > maxUpdateTurns {
					return readLastTurns(ctx, log, math.MaxInt64, req.limit, true)
				}
			}
			rr.add(&e)
		}
		return rr.done(), false, nil
	}
	before := int64(math.MaxInt64)
	if req.before {
		before = req.seq
	}
	return readLastTurns(ctx, log, before, req.limit, false)
}

func readLastTurns(ctx context.Context, log *agenthost.Log, before int64, n int, reset bool) (*rawLog, bool, error) {
	rr := newRawReader(0)
	for e, err := range log.LastTurns(ctx, before, n) {
		if err != nil {
			return nil, false, err
		}
		rr.add(&e)
	}
	return rr.done(), reset, nil
}

// refreshSeq is the first seq whose entries can still change: the one
// after the window's last turn that is over, replayed, and holds no
// message of the transcript's tail (the synthetic results of calls the
// next turn may answer, the system messages held behind them), nor has one
// before it; the window's start when there is none.
func refreshSeq(raw *rawLog, throughSeq int64, tail []int64) int64 {
	r := raw.from
	for _, t := range raw.order {
		if t.CutSeq < 0 || t.CutSeq > throughSeq || slices.ContainsFunc(tail, func(s int64) bool { return s <= t.CutSeq }) {
			break
		}
		r = t.CutSeq + 1
	}
	return r
}

// marksOutside are the marks of messages outside the window's seqs.
func marksOutside(from, to int64, degraded map[int64]*degradedView, refused map[int64][]string) []mark {
	bySeq := map[int64]*mark{}
	at := func(seq int64) *mark {
		if bySeq[seq] == nil {
			bySeq[seq] = &mark{Seq: seq}
		}
		return bySeq[seq]
	}
	for seq, d := range degraded {
		if seq < from || seq > to {
			at(seq).Degraded = d
		}
	}
	for seq, r := range refused {
		if seq < from || seq > to {
			at(seq).Refused = r
		}
	}
	out := make([]mark, 0, len(bySeq))
	for _, m := range bySeq {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b mark) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// sessionEvents are the Events of the Session and its SessionForks, or why
// they cannot be listed.
func (s *Server) sessionEvents(ctx context.Context, ns, name string) ([]eventView, string) {
	events, err := cmdkit.SessionEvents(ctx, s.opts.Kube, ns, name)
	if err != nil {
		return []eventView{}, strings.ReplaceAll(err.Error(), "\n", " ")
	}
	out := make([]eventView, 0, len(events))
	for _, e := range events {
		out = append(out, viewEvent(e))
	}
	return out, ""
}

// Package sessionio is how a Session's log is reached from outside the
// manager's reconcilers: where the log of a Session object lives, how a
// writer tells the controller that the log changed, and the writes and
// reads `turnlog import`, `append` and `export` make. The manager, the
// agenthost package and the command-line tools all go through it, so that
// a Session's log root — a tenant boundary — is computed in one place.
package sessionio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// Location is where session's log lives in a store configured with
// prefix. Its namespace and name are the Session's own, so no Session
// reaches another's root; the uid, its own unless `turnlog adopt` set
// spec.storage.logUID, keeps a Session deleted and created again under the
// same name from seeing its predecessor's log.
func Location(prefix string, session *turnlogv1.Session) sessionlog.Location {
	return sessionlog.Location{Prefix: prefix, Namespace: session.Namespace, Session: session.Name, UID: session.LogUID()}
}

// RequestedAt is the value of the turnlog.dev/requested-at annotation for a
// nudge at t: an RFC 3339 time, which the controller also counts as
// activity when it decides how often to poll the log.
func RequestedAt(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Nudge sets turnlog.dev/requested-at on the Session, and annotations in
// the same patch, so the controller looks at its log at once rather than
// at its next poll. It is a merge patch of the annotations alone: it needs
// no read of the Session and cannot undo anyone else's change.
func Nudge(ctx context.Context, c client.Client, session client.ObjectKey, annotations map[string]string) error {
	all := map[string]string{turnlogv1.AnnotationRequestedAt: RequestedAt(time.Now())}
	for k, v := range annotations {
		all[k] = v
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": all}})
	if err != nil {
		return err
	}
	s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: session.Namespace, Name: session.Name}}
	if err := c.Patch(ctx, s, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		return fmt.Errorf("nudge Session %s: %w", session, err)
	}
	return nil
}

// Event is an event ready for the log: its JSON without the seq member,
// which the log assigns.
type Event struct {
	Type string
	Body []byte
}

// ReadEvents reads a log fragment in JSON Lines, as `turnlog export`
// writes it, whose first event has seq first (0 for a whole log). The
// first structural problem fails the whole read, so a broken log is never
// half written.
func ReadEvents(r io.Reader, first int64) ([]Event, error) {
	reader := turnlog.NewReaderWith(r, turnlog.NewValidatorAt(first))
	var out []Event
	for e, err := range reader.All() {
		if err != nil {
			return nil, err
		}
		body, err := withoutSeq(e.Raw)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", reader.Line(), err)
		}
		out = append(out, Event{Type: string(e.Type), Body: body})
	}
	if len(out) == 0 {
		return nil, errors.New("no events to write")
	}
	return out, nil
}

// withoutSeq re-encodes a JSON object without its "seq" member, keeping the
// other members in order and byte for byte.
func withoutSeq(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("event is not a JSON object")
	}
	var out bytes.Buffer
	out.WriteByte('{')
	first := true
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		if key == "seq" {
			continue
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(key)
		out.Write(k)
		out.WriteByte(':')
		out.Write(value)
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// segmentBytes is roughly how much a written segment holds. Segments end
// at a turn/end, so finding the head reads one or two segments, not the
// log.
const segmentBytes = 256 << 10

// Write writes events as the log's seqs next, next+1, ..., in segments of
// about segmentBytes that end at a turn/end (the appender splits a turn
// larger than sessionlog.SplitBytes into several). Each segment must land
// where the previous one ended: if another writer got there first, Write
// stops with an error that wraps a *sessionlog.StaleWriterError and says
// from which seq on nothing was written. writer names the process in the
// segments' tokens ("" picks a random name).
func Write(ctx context.Context, log *sessionlog.Log, writer string, next int64, events []Event) error {
	appender := log.NewAppender(writer)
	var batch [][]byte
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := appender.AppendAt(ctx, next, batch...); err != nil {
			// A batch over sessionlog.SplitBytes went in as several
			// segments; say how far it got.
			if partial, ok := errors.AsType[*sessionlog.PartialAppendError](err); ok {
				next += partial.Appended
				err = partial.Err
			}
			if stale, ok := errors.AsType[*sessionlog.StaleWriterError](err); ok {
				return fmt.Errorf("the log of %s moved on while writing: its next seq is %d, not %d; nothing from seq %d on was written: %w",
					log.Location(), stale.Next, next, next, stale)
			}
			return fmt.Errorf("write seq %d..%d to %s: %w", next, next+int64(len(batch))-1, log.Location(), err)
		}
		next += int64(len(batch))
		batch, size = batch[:0], 0
		return nil
	}
	for _, e := range events {
		batch = append(batch, e.Body)
		size += len(e.Body)
		if e.Type == string(turnlog.TypeTurnEnd) && size >= segmentBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// Export writes the log to w as JSON Lines.
func Export(ctx context.Context, log *sessionlog.Log, w io.Writer) error {
	for e, err := range log.Read(ctx, 0, math.MaxInt64) {
		if err != nil {
			return fmt.Errorf("read %s: %w", log.Location(), err)
		}
		if _, err := w.Write(append(e.Line, '\n')); err != nil {
			return err
		}
	}
	return nil
}

// AlreadyWrittenError: an import found the Session's log not empty.
type AlreadyWrittenError struct {
	Namespace, Name string
	Events          int64
}

func (e *AlreadyWrittenError) Error() string {
	return fmt.Sprintf("Session %s/%s already has %d events; append to its log instead", e.Namespace, e.Name, e.Events)
}

// NudgeError: the log was written, but the nudge after it failed; the
// controller sees the log at its next poll.
type NudgeError struct{ Err error }

func (e *NudgeError) Error() string {
	return fmt.Sprintf("the log is written, but the nudge failed (the controller sees the log at its next poll): %v", e.Err)
}

func (e *NudgeError) Unwrap() error { return e.Err }

// Opener opens the log of a Session in the store its spec names.
type Opener func(ctx context.Context, session *turnlogv1.Session) (*sessionlog.Log, error)

// Import creates the Session namespace/name if it does not exist, writes
// events as its log, which must be empty (else an *AlreadyWrittenError),
// and nudges it, setting annotations in the same patch.
func Import(ctx context.Context, c client.Client, open Opener, namespace, name string, events []Event, annotations map[string]string) (*turnlogv1.Session, *sessionlog.Log, error) {
	session := &turnlogv1.Session{}
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, session)
	if apierrors.IsNotFound(err) {
		session = &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		err = c.Create(ctx, session)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("Session %s/%s: %w", namespace, name, err)
	}
	log, err := open(ctx, session)
	if err != nil {
		return nil, nil, err
	}
	head, err := log.Head(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read the head of %s: %w", log.Location(), err)
	}
	if head.Next > 0 {
		return nil, nil, &AlreadyWrittenError{Namespace: namespace, Name: name, Events: head.Next}
	}
	if err := Write(ctx, log, "", 0, events); err != nil {
		return nil, nil, err
	}
	if err := Nudge(ctx, c, client.ObjectKeyFromObject(session), annotations); err != nil {
		return session, log, &NudgeError{err}
	}
	return session, log, nil
}

// Append appends the log fragment read from r, whose first seq must be
// the log's next, and nudges the Session through c (nil: no nudge). It
// returns the first seq written and how many events.
func Append(ctx context.Context, c client.Client, session client.ObjectKey, log *sessionlog.Log, r io.Reader) (first, n int64, err error) {
	head, err := log.Head(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("read the head of %s: %w", log.Location(), err)
	}
	events, err := ReadEvents(r, head.Next)
	if err != nil {
		return 0, 0, err
	}
	if err := Write(ctx, log, "", head.Next, events); err != nil {
		return 0, 0, err
	}
	if c == nil {
		return head.Next, int64(len(events)), nil
	}
	if err := Nudge(ctx, c, session, nil); err != nil {
		return head.Next, int64(len(events)), &NudgeError{err}
	}
	return head.Next, int64(len(events)), nil
}

package controllers

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
	"github.com/turnlog/turnlog/internal/worker"
)

// SessionIO writes and reads Sessions' logs from outside the manager, as
// `turnlog import`, `append` and `export` do: straight to object storage,
// then a nudge (the turnlog.dev/requested-at annotation) so the controller
// looks at the log at once instead of at its next poll.
type SessionIO struct {
	Client client.Client
	Stores Stores
	// Writer names this process in the log's segment tokens.
	Writer string
}

// segmentBytes is roughly how much a written segment holds. Segments end
// at a turn/end, so finding the head reads one or two segments, not the
// log.
const segmentBytes = 256 << 10

// Import creates the Session if it does not exist and writes the log read
// from r as its log, which must be empty. It returns the Session and the
// number of events written.
func (s *SessionIO) Import(ctx context.Context, namespace, name string, r io.Reader) (*turnlogv1.Session, int64, error) {
	return s.ImportAnnotated(ctx, namespace, name, r, nil)
}

// ImportAnnotated is Import that also sets annotations on the Session,
// e.g. where an imported pi-coding-agent session came from.
func (s *SessionIO) ImportAnnotated(ctx context.Context, namespace, name string, r io.Reader, annotations map[string]string) (*turnlogv1.Session, int64, error) {
	events, err := readEvents(r, turnlog.NewValidator())
	if err != nil {
		return nil, 0, err
	}
	session := &turnlogv1.Session{}
	err = s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, session)
	if apierrors.IsNotFound(err) {
		session = &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		err = s.Client.Create(ctx, session)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("Session %s/%s: %w", namespace, name, err)
	}
	log, err := s.log(ctx, session)
	if err != nil {
		return nil, 0, err
	}
	head, err := log.Head(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("read the head of %s: %w", log.where, err)
	}
	if head.Next > 0 {
		return nil, 0, fmt.Errorf("Session %s/%s already has %d events; use `turnlog append` to add to its log", namespace, name, head.Next)
	}
	if err := s.write(ctx, log, 0, events); err != nil {
		return nil, 0, err
	}
	return session, int64(len(events)), s.nudgeWith(ctx, session, annotations)
}

// Append appends the events read from r, a log fragment whose first seq is
// the log's next, and nudges the Session.
func (s *SessionIO) Append(ctx context.Context, namespace, name string, r io.Reader) (first, n int64, err error) {
	session := &turnlogv1.Session{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, session); err != nil {
		return 0, 0, fmt.Errorf("Session %s/%s: %w", namespace, name, err)
	}
	log, err := s.log(ctx, session)
	if err != nil {
		return 0, 0, err
	}
	head, err := log.Head(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("read the head of %s: %w", log.where, err)
	}
	events, err := readEvents(r, turnlog.NewValidatorAt(head.Next))
	if err != nil {
		return 0, 0, err
	}
	if err := s.write(ctx, log, head.Next, events); err != nil {
		return 0, 0, err
	}
	return head.Next, int64(len(events)), s.nudge(ctx, session)
}

// Export writes the Session's log to w as JSON Lines.
func (s *SessionIO) Export(ctx context.Context, namespace, name string, w io.Writer) error {
	session := &turnlogv1.Session{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, session); err != nil {
		return fmt.Errorf("Session %s/%s: %w", namespace, name, err)
	}
	log, err := s.log(ctx, session)
	if err != nil {
		return err
	}
	for e, err := range log.Read(ctx, 0, math.MaxInt64) {
		if err != nil {
			return fmt.Errorf("read %s: %w", log.where, err)
		}
		if _, err := w.Write(append(e.Line, '\n')); err != nil {
			return err
		}
	}
	return nil
}

// locatedLog is a log and where it is, for error messages.
type locatedLog struct {
	*sessionlog.Log
	where string
}

func (s *SessionIO) log(ctx context.Context, session *turnlogv1.Session) (locatedLog, error) {
	st, err := s.Stores.Store(ctx, session.Spec.Storage.StoreName())
	if err != nil {
		return locatedLog{}, err
	}
	loc := st.Location(session)
	log, err := st.Logs.Log(loc)
	return locatedLog{Log: log, where: loc.String()}, err
}

// write appends events, which start at seq next, in segments of about
// segmentBytes that end at a turn/end; the appender splits a turn larger
// than sessionlog.SplitBytes into several segments.
func (s *SessionIO) write(ctx context.Context, log locatedLog, next int64, events []logEvent) error {
	appender := log.NewAppender(s.Writer)
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
			var stale *sessionlog.StaleWriterError
			if errors.As(err, &stale) {
				return fmt.Errorf("the log of %s moved on while writing: its next seq is %d, not %d; nothing from seq %d on was written", log.where, stale.Next, next, next)
			}
			return fmt.Errorf("write seq %d..%d to %s: %w", next, next+int64(len(batch))-1, log.where, err)
		}
		next += int64(len(batch))
		batch, size = batch[:0], 0
		return nil
	}
	for _, e := range events {
		batch = append(batch, e.body)
		size += len(e.body)
		if e.turnEnd && size >= segmentBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// nudge tells the controller the log changed.
func (s *SessionIO) nudge(ctx context.Context, session *turnlogv1.Session) error {
	return s.nudgeWith(ctx, session, nil)
}

// nudgeWith is nudge that sets annotations too, in the same patch.
func (s *SessionIO) nudgeWith(ctx context.Context, session *turnlogv1.Session, annotations map[string]string) error {
	patch := client.MergeFrom(session.DeepCopy())
	if session.Annotations == nil {
		session.Annotations = map[string]string{}
	}
	for k, v := range annotations {
		session.Annotations[k] = v
	}
	session.Annotations[turnlogv1.AnnotationRequestedAt] = time.Now().UTC().Format(time.RFC3339Nano)
	if err := s.Client.Patch(ctx, session, patch); err != nil {
		return fmt.Errorf("the log is written, but nudging Session %s/%s failed (the controller sees the log at its next poll): %w", session.Namespace, session.Name, err)
	}
	return nil
}

// logEvent is an event ready for sessionlog: its JSON without the seq
// member, which the log assigns.
type logEvent struct {
	body    []byte
	turnEnd bool
}

// readEvents reads JSON Lines checked by v; the first structural problem
// fails the whole read, so a broken log is never half written.
func readEvents(r io.Reader, v *turnlog.Validator) ([]logEvent, error) {
	reader := turnlog.NewReaderWith(r, v)
	var out []logEvent
	for {
		e, err := reader.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		body, err := withoutSeq(e.Raw)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", reader.Line(), err)
		}
		out = append(out, logEvent{body: body, turnEnd: e.Type == turnlog.TypeTurnEnd})
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

// Transcript returns the transcript the workers stored for the Session,
// through the last turn/end they replayed. target gets the Session's
// spec.adapter and returns the target to read for: the workers replay for
// spec.adapter, so another target has no stored transcript.
func (s *SessionIO) Transcript(ctx context.Context, namespace, name string, target func(turnlog.Adapter) turnlog.Adapter) (worker.Transcript, turnlog.Adapter, error) {
	session := &turnlogv1.Session{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, session); err != nil {
		return worker.Transcript{}, turnlog.Adapter{}, fmt.Errorf("Session %s/%s: %w", namespace, name, err)
	}
	log, err := s.log(ctx, session)
	if err != nil {
		return worker.Transcript{}, turnlog.Adapter{}, err
	}
	t := target(adapterOf(session.Spec.Adapter))
	tr, err := worker.LoadTranscript(ctx, worker.StoreLog{Log: log.Log}, t)
	return tr, t, err
}

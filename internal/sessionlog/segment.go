package sessionlog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/turnlog/turnlog/internal/store"
)

// Event is one event of a log as stored.
type Event struct {
	Seq  int64
	Type string
	// Turn is 0 for an event outside any turn.
	Turn int64
	// Reason is turn/end's reason, else "".
	Reason string
	// Line is the event's JSON object, without the newline. It is the
	// caller's to keep.
	Line []byte
}

// header is the part of an event the storage layer needs; the rest of the
// object passes through untouched.
type header struct {
	Seq    *int64 `json:"seq"`
	Type   string `json:"type"`
	Turn   int64  `json:"turn"`
	Reason string `json:"reason"`
}

// batch is events ready to be written at any seq: compact JSON objects
// without a seq member.
type batch [][]byte

func prepare(events [][]byte) (batch, error) {
	if len(events) == 0 {
		return nil, errors.New("append: no events")
	}
	out := make(batch, len(events))
	for i, ev := range events {
		var buf bytes.Buffer
		if err := json.Compact(&buf, ev); err != nil {
			return nil, fmt.Errorf("append: event %d of the batch: invalid JSON: %w", i, err)
		}
		if buf.Len() == 0 || buf.Bytes()[0] != '{' {
			return nil, fmt.Errorf("append: event %d of the batch: not a JSON object", i)
		}
		var h struct {
			Seq  json.RawMessage `json:"seq"` // set even for "seq":null
			Type string          `json:"type"`
			Turn int64           `json:"turn"`
		}
		if err := json.Unmarshal(buf.Bytes(), &h); err != nil {
			return nil, fmt.Errorf("append: event %d of the batch: %w", i, err)
		}
		if h.Seq != nil {
			return nil, fmt.Errorf("append: event %d of the batch has a seq; the log assigns seqs", i)
		}
		if h.Type == "" {
			return nil, fmt.Errorf("append: event %d of the batch has no type", i)
		}
		out[i] = buf.Bytes()
	}
	return out, nil
}

// render gives the segment holding b at seqs first, first+1, ….
func (b batch) render(first int64) []byte {
	n := 0
	for _, ev := range b {
		n += len(ev) + 30
	}
	out := make([]byte, 0, n)
	for i, ev := range b {
		out = append(out, `{"seq":`...)
		out = strconv.AppendInt(out, first+int64(i), 10)
		out = append(out, ',')
		out = append(out, ev[1:]...) // ev has a type, so it is not "{}"
		out = append(out, '\n')
	}
	return out
}

// errStop ends a scan early without an error.
var errStop = errors.New("stop")

// scanSegment reads the segment at key, which must hold dense events from
// first on, and calls fn for each. It returns the number of events read.
func scanSegment(r io.Reader, key string, first int64, fn func(Event) error) (int64, error) {
	br := bufio.NewReader(r)
	var n int64
	for line := 1; ; line++ {
		raw, err := br.ReadBytes('\n')
		if err == io.EOF {
			return n, atEnd(key, line, first+n, raw)
		}
		if err != nil {
			return n, fmt.Errorf("read %s: %w", key, err)
		}
		e, err := parseLine(key, line, first+n, raw[:len(raw)-1])
		if err != nil {
			return n, err
		}
		n++
		if err := fn(e); err != nil {
			return n, err
		}
	}
}

// scanSegmentBytes is scanSegment for a segment already in memory; the
// events' lines share data.
func scanSegmentBytes(data []byte, key string, first int64, fn func(Event) error) (int64, error) {
	var n int64
	for line := 1; ; line++ {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return n, atEnd(key, line, first+n, data)
		}
		e, err := parseLine(key, line, first+n, data[:i:i])
		if err != nil {
			return n, err
		}
		data = data[i+1:]
		n++
		if err := fn(e); err != nil {
			return n, err
		}
	}
}

// atEnd checks what follows a segment's last newline.
func atEnd(key string, line int, seq int64, rest []byte) error {
	switch {
	case len(rest) > 0:
		return &DataError{Key: key, Line: line, Seq: seq, Msg: "truncated: the last line has no newline"}
	case line == 1:
		return &DataError{Key: key, Msg: "empty segment"}
	}
	return nil
}

func parseLine(key string, line int, want int64, raw []byte) (Event, error) {
	var h header
	if err := json.Unmarshal(raw, &h); err != nil {
		return Event{}, &DataError{Key: key, Line: line, Seq: want, Msg: "invalid JSON: " + err.Error()}
	}
	switch {
	case h.Seq == nil:
		return Event{}, &DataError{Key: key, Line: line, Seq: want, Msg: "no seq"}
	case *h.Seq != want:
		return Event{}, &DataError{Key: key, Line: line, Seq: want, Msg: fmt.Sprintf("seq is %d", *h.Seq)}
	case h.Type == "":
		return Event{}, &DataError{Key: key, Line: line, Seq: want, Msg: "no type"}
	}
	return Event{Seq: want, Type: h.Type, Turn: h.Turn, Reason: h.Reason, Line: raw}, nil
}

// segment is one listed segment object.
type segment struct {
	key   string
	first int64
	size  int64
}

// listSegments lists the log's segments in seq order.
func (l *Log) listSegments(ctx context.Context) ([]segment, error) {
	prefix := l.segmentPrefix()
	var segs []segment
	var err error
	for range attempts {
		segs = segs[:0]
		err = nil
		for o, lerr := range l.b.List(ctx, prefix) {
			if lerr != nil {
				err = lerr
				break
			}
			name, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, prefix), ".jsonl")
			first, perr := strconv.ParseInt(name, 10, 64)
			if !ok || len(name) != 20 || perr != nil || first < 0 {
				return nil, &DataError{Key: o.Key, Msg: "not a segment name (want 20 digits and .jsonl)"}
			}
			segs = append(segs, segment{key: o.Key, first: first, size: o.Size})
		}
		if err == nil || !store.IsRetryable(err) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", l.loc, err)
	}
	if len(segs) > 0 && segs[0].first != 0 {
		return nil, &DataError{Key: segs[0].key, Msg: "the log's first segment does not start at seq 0"}
	}
	return segs, nil
}

// readSegment reads a whole segment and checks it starts at seg.first.
func (l *Log) readSegment(ctx context.Context, seg segment) ([]byte, []Event, error) {
	var data []byte
	err := retry(ctx, func() (err error) {
		data, err = l.b.Get(ctx, seg.key)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	var events []Event
	_, err = scanSegmentBytes(data, seg.key, seg.first, func(e Event) error {
		events = append(events, e)
		return nil
	})
	return data, events, err
}

// attempts bounds the tries of one request that keeps failing transiently.
const attempts = 20

// retry runs op until it succeeds, fails permanently, or attempts run out.
// Only for idempotent operations.
func retry(ctx context.Context, op func() error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = op()
		if err == nil || !store.IsRetryable(err) || attempt == attempts {
			return err
		}
		if werr := backoff(ctx, attempt); werr != nil {
			return errors.Join(err, werr)
		}
	}
}

// backoff sleeps before retry number attempt: exponential from 2 ms, capped
// at 250 ms, with full jitter so that racing writers spread out.
func backoff(ctx context.Context, attempt int) error {
	d := min(2*time.Millisecond<<min(attempt-1, 10), 250*time.Millisecond)
	t := time.NewTimer(rand.N(d) + time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

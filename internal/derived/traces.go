package derived

import (
	"context"
	"encoding/json"
)

// TracesMarkName is where a Session's turn spans got to: the seq of the
// last turn/end whose spans a worker run handed to its trace export. A run
// that reads turns again — its checkpoint lost or unusable, a redo —
// exports none of the turns through it, so each is exported once.
const TracesMarkName = "traces/exported.json"

// maxTracesMarkBytes caps the mark's read; it is a few bytes.
const maxTracesMarkBytes = 1 << 10

// tracesMark is the stored mark.
type tracesMark struct {
	ThroughSeq int64 `json:"throughSeq"`
}

// LoadTracesMark returns the seq the Session's turn spans were exported
// through, -1 when none were or the mark cannot be read: then the turns
// are exported again, with the same ids.
func LoadTracesMark(ctx context.Context, log Log) int64 {
	data, err := log.GetDerived(ctx, TracesMarkName, maxTracesMarkBytes)
	if err != nil {
		return -1
	}
	var m tracesMark
	if json.Unmarshal(data, &m) != nil || m.ThroughSeq < -1 {
		return -1
	}
	return m.ThroughSeq
}

// StoreTracesMark records that the turn spans through seq are exported.
func StoreTracesMark(ctx context.Context, log Log, seq int64) error {
	return storeJSON(ctx, log, TracesMarkName, tracesMark{ThroughSeq: seq})
}

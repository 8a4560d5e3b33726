package derived

import (
	"context"
	"fmt"

	"github.com/turnlog/turnlog/internal/assembler"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// Where assembly keeps what it derived, beside the log.
const (
	// AssemblyDir holds the assembled messages, one object per run.
	AssemblyDir = "assembly"
	// AssemblyCheckpointName says where assembly got to.
	AssemblyCheckpointName = AssemblyDir + "/checkpoint.json"
)

// AssemblyState is the checkpoint assembly resumes from, stored at
// AssemblyCheckpointName.
type AssemblyState struct {
	Summary Summary `json:"summary"`
	// Next is the first seq after the last committed turn/end.
	Next           int64           `json:"next"`
	CommittedTurns int64           `json:"committedTurns"`
	SessionAdapter turnlog.Adapter `json:"sessionAdapter"`
	// Prefix counts the events before Next as a comparison of two
	// branches counts their shared prefix (internal/compare), which then
	// need not read them. nil in a checkpoint of a run that did not count
	// them from the log's start.
	Prefix *PrefixCounts `json:"prefix,omitempty"`
}

// PrefixCounts are counts of a log's events through a turn/end.
type PrefixCounts struct {
	// FirstTurn is the number of the first turn that ended; 0 before one
	// did.
	FirstTurn int64 `json:"firstTurn,omitempty"`
	// Messages counts their messages as assembler.MessageCount does.
	Messages int64 `json:"messages"`
}

func (s AssemblyState) at() (Summary, int64) { return s.Summary, s.Next }

func (s AssemblyState) withSummary(sum Summary) AssemblyState {
	s.Summary = sum
	return s
}

func (s AssemblyState) check() error {
	if p := s.Prefix; p != nil && (p.Messages < 0 || p.FirstTurn < 0) {
		return fmt.Errorf("prefix counts of %d messages from turn %d", p.Messages, p.FirstTurn)
	}
	return nil
}

func (s AssemblyState) usable(head int64) bool { return fits(s.Summary, s.Next, head) }

// parts: the assembly checkpoint lists none, and a run deletes no segment.
func (AssemblyState) parts() []PartRef { return nil }

// assemblyHistoryEvery: the state is kept each time assembly passes a
// multiple of this many events, so that a fork's child folds at most
// about as many before it is Current. A kept state is a few hundred bytes.
const assemblyHistoryEvery = 2048

// history keeps the state as it was at its last turn/end, where a child
// cut there or later can resume.
func (s AssemblyState) history(prevNext int64) (AssemblyState, bool) {
	if s.Next/assemblyHistoryEvery <= max(prevNext, 0)/assemblyHistoryEvery {
		return s, false
	}
	s.Summary.ScannedThrough = s.Summary.ThroughSeq
	s.Summary.Turns = s.CommittedTurns
	s.Summary.New, s.Summary.NewTotal = nil, 0
	return s, true
}

// LoadAssemblyAt returns the last assembly state log has at or before
// seq: its checkpoint's, or one it kept along its history (HistoryDir),
// at most about assemblyHistoryEvery events before seq. found is false
// when there is none.
func LoadAssemblyAt(ctx context.Context, log StoreLog, seq int64) (state AssemblyState, found bool, err error) {
	_, found, err = lastCheckpoint(ctx, log, AssemblyCheckpointName, AssemblyDir, seq, &state, nil)
	return state, found, err
}

// AssemblyCheckpoint is an assembly run's checkpoint.
type AssemblyCheckpoint struct {
	Checkpoint[AssemblyState]
}

// OpenAssembly opens the assembly checkpoint of log.
func OpenAssembly(ctx context.Context, log Log) (*AssemblyCheckpoint, error) {
	fresh := func() AssemblyState {
		return AssemblyState{Summary: Summary{Task: TaskAssemble, ThroughSeq: -1, ScannedThrough: -1}, Prefix: &PrefixCounts{}}
	}
	c, err := open(ctx, log, AssemblyCheckpointName, AssemblyDir, fresh, false)
	if err != nil {
		return nil, err
	}
	return &AssemblyCheckpoint{c}, nil
}

// StoreSegment stores out, the output of the turns committed since From,
// as the segment that starts there, if a turn ended since. Written before
// the checkpoint: a run that dies in between leaves a segment the next run
// rewrites under the same name.
func (c *AssemblyCheckpoint) StoreSegment(ctx context.Context, out assembler.Result) error {
	if c.State.Next <= c.From {
		return nil
	}
	return storeJSON(ctx, c.log, segmentName(c.dir, c.From), out)
}

// segmentName names the derived object of the turns starting at seq from;
// zero-padded so names sort in log order.
func segmentName(dir string, from int64) string {
	return fmt.Sprintf("%s/%020d.json", dir, from)
}

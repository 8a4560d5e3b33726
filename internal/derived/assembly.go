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
}

func (s AssemblyState) at() (Summary, int64) { return s.Summary, s.Next }

func (s AssemblyState) withSummary(sum Summary) AssemblyState {
	s.Summary = sum
	return s
}

func (AssemblyState) check() error { return nil }

func (s AssemblyState) usable(head int64) bool { return fits(s.Summary, s.Next, head) }

// parts: the assembly checkpoint lists none, and a run deletes no segment.
func (AssemblyState) parts() []PartRef { return nil }

// AssemblyCheckpoint is an assembly run's checkpoint.
type AssemblyCheckpoint struct {
	Checkpoint[AssemblyState]
}

// OpenAssembly opens the assembly checkpoint of log.
func OpenAssembly(ctx context.Context, log Log) (*AssemblyCheckpoint, error) {
	fresh := func() AssemblyState {
		return AssemblyState{Summary: Summary{Task: TaskAssemble, ThroughSeq: -1, ScannedThrough: -1}}
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

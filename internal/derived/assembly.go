package derived

import (
	"fmt"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// Where assembly keeps what it derived, beside the log.
const (
	// AssemblyDir holds the assembled messages, one object per run.
	AssemblyDir = "assembly"
	// AssemblyCheckpoint says where assembly got to.
	AssemblyCheckpoint = AssemblyDir + "/checkpoint.json"
)

// AssemblyState is the checkpoint assembly resumes from, stored at
// AssemblyCheckpoint.
type AssemblyState struct {
	Summary Summary `json:"summary"`
	// Next is the first seq after the last committed turn/end.
	Next           int64           `json:"next"`
	CommittedTurns int64           `json:"committedTurns"`
	SessionAdapter turnlog.Adapter `json:"sessionAdapter"`
}

// SegmentName names the derived object of the turns starting at seq from;
// zero-padded so names sort in log order.
func SegmentName(dir string, from int64) string {
	return fmt.Sprintf("%s/%020d.json", dir, from)
}

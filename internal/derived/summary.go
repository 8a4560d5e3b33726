package derived

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/turnlog/turnlog/internal/replay"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// Bounds that keep a Summary small enough for a pod's termination message
// (4 KiB) and a Session's status, however degraded a log is.
const (
	// MaxNewDiagnostics is how many of a run's new diagnostics a Summary
	// lists; NewTotal keeps the exact count.
	MaxNewDiagnostics = 10
	// MaxSeqsPerCause caps each list of degraded seqs.
	MaxSeqsPerCause = 20
	// maxMessageBytes caps one diagnostic's message.
	maxMessageBytes = 150
)

// Summary is what a run leaves for the controller: the position of the
// derived data and what the run found that a user should hear about.
type Summary struct {
	Task Task `json:"task"`
	// ThroughSeq is the turn/end the derived data is complete through; -1
	// before the first turn ends.
	ThroughSeq int64 `json:"throughSeq"`

	// Assembly only.
	// ScannedThrough is the last seq assembly read: the head when it ran.
	// Always encoded: 0 is a position, and a checkpoint must not lose it.
	ScannedThrough int64 `json:"scannedThrough"`
	// Turns counts the turns started through ScannedThrough.
	Turns int64 `json:"turns,omitempty"`
	// LastTurnEnd is the last turn/end through ScannedThrough.
	LastTurnEnd *TurnEnd `json:"lastTurnEnd,omitempty"`
	// EnvelopesDiscarded counts envelopes discarded through ThroughSeq.
	EnvelopesDiscarded int64 `json:"envelopesDiscarded,omitempty"`

	// Replay only.
	Replay *ReplayCounts `json:"replay,omitempty"`

	// New lists the first MaxNewDiagnostics problems this run found
	// (discarded envelopes, degraded messages); NewTotal counts them all.
	New      []Diagnostic `json:"new,omitempty"`
	NewTotal int64        `json:"newTotal,omitempty"`
}

// TurnEnd is a turn/end event.
type TurnEnd struct {
	Seq    int64              `json:"seq"`
	Turn   int64              `json:"turn"`
	Reason turnlog.StopReason `json:"reason"`
}

// ReplayCounts summarise how the transcript's assistant messages replay for
// Target.
type ReplayCounts struct {
	Target   turnlog.Adapter `json:"target"`
	Native   int64           `json:"native"`
	Foreign  int64           `json:"foreign"`
	Degraded int64           `json:"degraded"`
	// OrphanToolResults counts the tool results left out of the transcript
	// because they answer no open call.
	OrphanToolResults int64 `json:"orphanToolResults,omitempty"`
	// DegradedSeqs lists degraded messages by cause, the first
	// MaxSeqsPerCause of each.
	DegradedSeqs map[string][]int64 `json:"degradedSeqs,omitempty"`
	// ContextEventsNotApplied counts the context events replay could not
	// apply (replay.CodeInvalidContextEvent); ContextEventSeqs lists the
	// first MaxSeqsPerCause of them. They are not degraded messages.
	ContextEventsNotApplied int64   `json:"contextEventsNotApplied,omitempty"`
	ContextEventSeqs        []int64 `json:"contextEventSeqs,omitempty"`
	// Refused counts the blocks the provider refused
	// (replay.CodeReplayStateRefused) by reason, and RefusedSeqs lists the
	// seqs of their messages, the first MaxSeqsPerCause of each reason.
	// RefusalsUnmapped counts the refusals replay could not map to a
	// block (replay.CodeRefusalUnmapped).
	Refused          map[string]int64   `json:"refused,omitempty"`
	RefusedSeqs      map[string][]int64 `json:"refusedSeqs,omitempty"`
	RefusalsUnmapped int64              `json:"refusalsUnmapped,omitempty"`
	// RefusedDropped counts the refused blocks a target that drops them
	// (turnlog.Adapter.DropsRefused) has left out of the transcript.
	RefusedDropped int64 `json:"refusedDropped,omitempty"`
	// ContextMessages is how many messages the stored transcript holds:
	// what the next request is built from.
	ContextMessages int64 `json:"contextMessages"`
	// LastCompactionSeq is the seq of the last compaction replayed.
	LastCompactionSeq *int64 `json:"lastCompactionSeq,omitempty"`
	// Compactions and Edits count the compactions and context edits
	// replayed so far; RunCompactions and RunEdits those of the last run.
	Compactions    int64 `json:"compactions,omitempty"`
	Edits          int64 `json:"edits,omitempty"`
	RunCompactions int64 `json:"runCompactions,omitempty"`
	RunEdits       int64 `json:"runEdits,omitempty"`
}

// Context is the replay.ContextInfo of the whole transcript.
func (c *ReplayCounts) Context() replay.ContextInfo {
	info := replay.ContextInfo{CompactionSeq: -1, Compactions: int(c.Compactions), Edits: int(c.Edits)}
	if c.LastCompactionSeq != nil {
		info.CompactionSeq = *c.LastCompactionSeq
	}
	return info
}

// Diagnostic is one problem with one event of the log.
type Diagnostic struct {
	Seq int64 `json:"seq"`
	// Code is replay's diagnostic code (replay.CodeInvalidReplayState,
	// replay.CodeInvalidContextEvent, replay.CodeReplayStateRefused,
	// replay.CodeRefusalUnmapped); empty for assembly.
	Code string `json:"code,omitempty"`
	// Cause is the degrade cause (kind, version, malformed, shape) of a
	// degraded message, the reason of a refused block or, for assembly,
	// the diagnostic code.
	Cause   string `json:"cause,omitempty"`
	Message string `json:"message"`
}

// Note records a new diagnostic, keeping the first MaxNewDiagnostics.
func (s *Summary) Note(d Diagnostic) {
	s.NewTotal++
	if len(s.New) < MaxNewDiagnostics {
		d.Message = Truncate(d.Message, maxMessageBytes)
		s.New = append(s.New, d)
	}
}

// Truncate shortens s to at most n bytes without splitting a character,
// marking the cut with an ellipsis.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// LoadAssembly returns the summary the last assembly run left; found is
// false before the first run.
func LoadAssembly(ctx context.Context, log Log) (sum Summary, found bool, err error) {
	var state AssemblyState
	found, err = loadState(ctx, log, AssemblyCheckpointName, &state)
	return state.Summary, found, err
}

// LoadReplay returns the summary the last replay run for target left; found
// is false before the first run.
func LoadReplay(ctx context.Context, log Log, target turnlog.Adapter) (sum Summary, found bool, err error) {
	var state ReplayState
	found, err = LoadReplayState(ctx, log, target, &state)
	return state.Summary, found, err
}

// Check reports whether a Summary loaded from a checkpoint can be true of
// a log whose last event is head: positions at or before the head, counts
// not negative, lists within their bounds. Checkpoints are stored where
// anyone who can write the bucket can forge them, so the controller
// believes one only if it passes, and a run starts over from an empty
// checkpoint instead of resuming from one that does not.
func (s Summary) Check(head int64) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s checkpoint does not fit a log whose head is seq %d: %s", s.Task, head, fmt.Sprintf(format, args...))
	}
	switch {
	case s.ThroughSeq < -1 || s.ThroughSeq > head:
		return bad("throughSeq is %d", s.ThroughSeq)
	case s.NewTotal < int64(len(s.New)) || len(s.New) > MaxNewDiagnostics:
		return bad("%d new diagnostics listed of %d (at most %d are listed)", len(s.New), s.NewTotal, MaxNewDiagnostics)
	case s.Turns < 0 || s.EnvelopesDiscarded < 0:
		return bad("negative counts")
	}
	for _, d := range s.New {
		if d.Seq < 0 || d.Seq > head {
			return bad("a diagnostic names seq %d", d.Seq)
		}
	}
	if s.Task == TaskAssemble {
		switch {
		case s.ScannedThrough < s.ThroughSeq || s.ScannedThrough > head:
			return bad("scannedThrough is %d, throughSeq %d", s.ScannedThrough, s.ThroughSeq)
		case s.Turns > s.ScannedThrough+1:
			return bad("%d turns in %d events", s.Turns, s.ScannedThrough+1)
		case s.LastTurnEnd != nil && s.LastTurnEnd.Seq != s.ThroughSeq:
			return bad("the last turn/end is seq %d, throughSeq %d", s.LastTurnEnd.Seq, s.ThroughSeq)
		}
	}
	if c := s.Replay; c != nil {
		if c.Native < 0 || c.Foreign < 0 || c.Degraded < 0 || c.Degraded > c.Native+c.Foreign || c.Native+c.Foreign > s.ThroughSeq+1 {
			return bad("%d native, %d foreign and %d degraded messages through seq %d", c.Native, c.Foreign, c.Degraded, s.ThroughSeq)
		}
		if c.ContextEventsNotApplied < int64(len(c.ContextEventSeqs)) || len(c.ContextEventSeqs) > MaxSeqsPerCause {
			return bad("%d context events listed of %d not applied (at most %d are listed)", len(c.ContextEventSeqs), c.ContextEventsNotApplied, MaxSeqsPerCause)
		}
		for _, seq := range c.ContextEventSeqs {
			if seq < 0 || seq > s.ThroughSeq {
				return bad("context event seq %d", seq)
			}
		}
		if len(c.Refused) > len(replay.RefusalReasons)+1 || len(c.RefusedSeqs) > len(c.Refused) || c.RefusalsUnmapped < 0 || c.RefusedDropped < 0 {
			return bad("refusals of %d reasons, %d listed, %d unmapped", len(c.Refused), len(c.RefusedSeqs), c.RefusalsUnmapped)
		}
		for reason, n := range c.Refused {
			if n < 0 {
				return bad("%d refused blocks of reason %q", n, reason)
			}
		}
		for reason, seqs := range c.RefusedSeqs {
			if len(seqs) > MaxSeqsPerCause || int64(len(seqs)) > c.Refused[reason] {
				return bad("%d refused seqs of reason %q listed for %d refused (at most %d are)", len(seqs), reason, c.Refused[reason], MaxSeqsPerCause)
			}
			for _, seq := range seqs {
				if seq < 0 || seq > s.ThroughSeq {
					return bad("refused seq %d", seq)
				}
			}
		}
		for cause, seqs := range c.DegradedSeqs {
			if len(seqs) > MaxSeqsPerCause {
				return bad("%d degraded seqs of cause %q listed (at most %d are)", len(seqs), cause, MaxSeqsPerCause)
			}
			for _, seq := range seqs {
				if seq < 0 || seq > s.ThroughSeq {
					return bad("degraded seq %d", seq)
				}
			}
		}
	}
	return nil
}

package agenthost

import (
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// The pi-ai shapes the log carries. They are turnlog's own types, shared
// with its workers, so what a host writes is read exactly as it was meant.
type (
	// Adapter names a model endpoint: Kind (the replay-state family,
	// "pi-ai"), API, Provider and Model; as a replay target also
	// ReleaseLine and RefusedBlocks, as a Session's spec.adapter does.
	Adapter = turnlog.Adapter
	// LoggedEvent is one event as the log holds it, read back with
	// Log.Events: its Seq, Turn and Type, and Raw, its JSON line.
	LoggedEvent = turnlog.Event
	// Block is one pi-ai content block: text, thinking, toolCall or image,
	// with pi-ai's inline signatures (TextSignature, ThinkingSignature,
	// ThoughtSignature).
	Block = turnlog.ContentBlock
	// AssistantMessage is pi-ai's AssistantMessage.
	AssistantMessage = turnlog.AssistantMessage
	// StopReason is pi-ai's reason a response or turn stopped.
	StopReason = turnlog.StopReason
)

// pi-ai's stop reasons.
const (
	StopReasonStop    = turnlog.StopReasonStop
	StopReasonLength  = turnlog.StopReasonLength
	StopReasonToolUse = turnlog.StopReasonToolUse
	StopReasonError   = turnlog.StopReasonError
	StopReasonAborted = turnlog.StopReasonAborted
)

// The choices of Adapter.ReleaseLine and Adapter.RefusedBlocks, the same
// a Session's spec.adapter accepts. An empty ReleaseLine is the log's
// session/start adapter's line, else ReleaseLine1; an empty RefusedBlocks
// keeps them.
const (
	// ReleaseLine1 is pi-ai 1.x: another model's thinking is dropped,
	// system messages pass through.
	ReleaseLine1 = turnlog.ReleaseLine1
	// ReleaseLine073 is pi-ai 0.73: another model's thinking becomes text;
	// there are no system messages.
	ReleaseLine073 = turnlog.ReleaseLine073
	// RefusedBlocksKeep sends a thinking block the provider refused again,
	// as pi does.
	RefusedBlocksKeep = turnlog.RefusedBlocksKeep
	// RefusedBlocksDrop leaves a thinking block the provider refused out of
	// the transcript.
	RefusedBlocksDrop = turnlog.RefusedBlocksDrop
)

// The transcript the workers store, in the JSON `turnlog replay` prints.
type (
	// Transcript is a replayed transcript: ThroughSeq (the last turn/end
	// replayed), Messages, Counts of native, foreign and degraded assistant
	// messages, and the Diagnostics of the degraded ones.
	Transcript = derived.Transcript
	// Message is one transcript message: Seq (the event it comes from),
	// Role, Replay (native or foreign, assistant messages only), Synthetic
	// (a tool result turnlog made up for a call that got none) and the
	// pi-ai Message as JSON.
	Message = replay.Message
	// Counts count the transcript's assistant messages by replay mode.
	Counts = replay.Counts
	// Diagnostic reports one message whose replay state could not be used.
	Diagnostic = replay.Diagnostic
	// NotReplayedError says how far the workers have replayed a log.
	NotReplayedError = derived.NotReplayedError
)

// ErrNotReplayed: the workers have not replayed the log (as far as asked)
// yet. The error is a *NotReplayedError.
var ErrNotReplayed = derived.ErrNotReplayed

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Adapter names the model endpoint a message was produced by, or the one a
// transcript is replayed for. Replay is native only when api, provider and
// model all match the message's own.
type Adapter struct {
	// Kind is the adapter family that wrote the replay state, e.g. "pi-ai".
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Kind string `json:"kind,omitempty"`
	// API is the wire API, e.g. "anthropic-messages" or "openai-responses".
	// +kubebuilder:validation:MaxLength=128
	// +optional
	API string `json:"api,omitempty"`
	// Provider is the model provider, e.g. "anthropic".
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Provider string `json:"provider,omitempty"`
	// Model is the model identifier, e.g. "claude-sonnet-4-5".
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Model string `json:"model,omitempty"`
	// ReleaseLine is the pi-ai release line whose replay rules the
	// transcript follows: "1" (pi-ai 1.x: another model's thinking is
	// dropped, system messages are kept) or "0.73" (pi-ai 0.73: another
	// model's thinking becomes text, no system messages). Empty means the
	// log's session/start adapter's line, else "1".
	// +kubebuilder:validation:Enum="1";"0.73"
	// +optional
	ReleaseLine string `json:"releaseLine,omitempty"`
	// RefusedBlocks says what replay does with a thinking block the
	// provider refused (status.replay.refused): "Keep" (the default)
	// sends it again, as pi does, byte for byte with the release line;
	// "Drop" leaves that one block out of the transcript, as unusable
	// replay state is left out, with a ReplayStateRefused Event, so a host
	// resuming from the transcript never sends it twice. The message's
	// other blocks, signed ones included, are kept. Changing it replays
	// the Session again.
	// +kubebuilder:validation:Enum=Keep;Drop
	// +optional
	RefusedBlocks string `json:"refusedBlocks,omitempty"`
}

// The enums of RefusedBlocks and ReleaseLine repeat the log's choices
// (internal/turnlog's RefusedBlocksChoices and ReleaseLines), which are
// their only Go constants; a test of internal/sessionio holds the
// generated CRDs to them, and internal/sessionio converts this Adapter to
// the log's and back.

// DefaultStore is the store of a Session that names none.
const DefaultStore = "default"

// SessionStorage picks where a Session's log is kept: one of the object
// stores the operator configured on the manager, by name. A Session cannot
// name a URL, an endpoint, credentials or a key prefix; its log's root is
// always [<store prefix>/]<namespace>/<name>/<uid>/, uid being LogUID
// when set, else the Session's own.
type SessionStorage struct {
	// Store is the name of a store configured on the manager (its --store
	// or --stores-file); "default" unless set.
	// +kubebuilder:default=default
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="storage.store must be a lowercase DNS label naming a store configured on the manager, e.g. \"default\""
	// +optional
	Store string `json:"store,omitempty"`
	// LogUID is the uid of the Session, of this name and namespace, whose
	// log this Session continues: set by `turnlog adopt` on a Session
	// adopted into a new cluster or restored from a backup (which gives it
	// a new uid), never by the manager on its own. Empty, the log is the
	// Session's own. It may be set once, and never changed.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9][-A-Za-z0-9]*$')",message="storage.logUID must be the uid of an earlier Session of this name: letters, digits and '-'"
	// +optional
	LogUID string `json:"logUID,omitempty"`
}

// LogUID is the uid whose root holds the Session's log: spec.storage.logUID
// for a Session adopted or restored with a new uid, else its own.
func (s *Session) LogUID() string {
	if s.Spec.Storage.LogUID != "" {
		return s.Spec.Storage.LogUID
	}
	return string(s.UID)
}

// StoreName is the store the Session names, DefaultStore if none.
func (s SessionStorage) StoreName() string {
	if s.Store == "" {
		return DefaultStore
	}
	return s.Store
}

// RetentionPolicy says what happens to a Session's objects in storage when
// the Session is deleted.
// +kubebuilder:validation:Enum=Delete;Retain
type RetentionPolicy string

const (
	// RetentionDelete removes the Session's log and derived data.
	RetentionDelete RetentionPolicy = "Delete"
	// RetentionRetain keeps every object in storage.
	RetentionRetain RetentionPolicy = "Retain"
)

// ForkOrigin records which Session and which cut a forked Session was seeded
// from. Only the SessionFork controller sets it.
type ForkOrigin struct {
	// Session is the name of the source Session.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Session string `json:"session"`
	// UID of the source Session, so a later Session reusing the name is not
	// mistaken for the source.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	UID string `json:"uid,omitempty"`
	// Fork is the name of the SessionFork that created this Session.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Fork string `json:"fork,omitempty"`
	// ForkUID is the UID of that SessionFork, so a Session is adopted as a
	// fork's child only by the fork that created it.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	ForkUID string `json:"forkUID,omitempty"`
	// AnchorSeq is the fork's floored atSeq.
	// +kubebuilder:validation:Minimum=0
	AnchorSeq int64 `json:"anchorSeq"`
	// CutSeq is the seq of the turn/end the child's log ends with.
	// +kubebuilder:validation:Minimum=0
	CutSeq int64 `json:"cutSeq"`
	// SentKeptThrough is the last seq whose responses the source's hosts
	// requested with every block kept, when that is before the cut: set
	// when the source leaves refused blocks out (refusedBlocks Drop), to
	// how far its own source kept them (0: none). Absent, every response
	// through the cut was requested with every block kept. Replay of a
	// child that drops refused blocks reads the reports before it with
	// the layout of those requests.
	// +kubebuilder:validation:Minimum=0
	// +optional
	SentKeptThrough *int64 `json:"sentKeptThrough,omitempty"`
}

// KeptThrough is the last seq whose responses were requested with every
// block kept: SentKeptThrough if set, else the cut.
func (o *ForkOrigin) KeptThrough() int64 {
	if o.SentKeptThrough != nil {
		return *o.SentKeptThrough
	}
	return o.CutSeq
}

// SessionSpec is the desired state of a Session.
// +kubebuilder:validation:XValidation:rule="has(oldSelf.forkedFrom) == has(self.forkedFrom)",message="forkedFrom is set only when a SessionFork creates the Session and cannot be added or removed later"
type SessionSpec struct {
	// Adapter is the target replay is built for. Fields left empty default
	// to the adapter of the log's session/start event.
	// +optional
	Adapter Adapter `json:"adapter,omitempty"`
	// Storage names the store the log is kept in; it is immutable, so the
	// log a Session was created with is the one its retention applies to.
	// +kubebuilder:default={}
	// +kubebuilder:validation:XValidation:rule="self == oldSelf || (!has(oldSelf.logUID) && has(self.logUID) && self.store == oldSelf.store)",message="storage is immutable: the log stays in the store the Session was created with (storage.logUID may be set once, by turnlog adopt)"
	// +optional
	Storage SessionStorage `json:"storage,omitempty"`
	// Retention says whether the log is deleted with the Session. It is
	// fixed when the Session is created.
	// +kubebuilder:default=Delete
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="retention is immutable: it is decided when the Session is created"
	// +optional
	Retention RetentionPolicy `json:"retention,omitempty"`
	// DeleteAfterIdle, if set, deletes the Session once its log has had no
	// append for this long (status.expiresAt says when), as `kubectl
	// delete` would: spec.retention then says what happens to its log,
	// and a source its forks still refer to keeps what they need. It may
	// be changed at any time; a duration such as "720h".
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=duration
	// +optional
	DeleteAfterIdle *metav1.Duration `json:"deleteAfterIdle,omitempty"`
	// ForkedFrom is set by the manager on the Sessions a SessionFork
	// creates, and by no one else (an admission policy refuses it); it is
	// immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="forkedFrom is immutable"
	// +optional
	ForkedFrom *ForkOrigin `json:"forkedFrom,omitempty"`
}

// TurnEnd is the last turn/end event of the log.
type TurnEnd struct {
	// Seq of the turn/end event.
	Seq int64 `json:"seq"`
	// Turn number that ended.
	Turn int64 `json:"turn"`
	// Reason the turn ended: stop, length, toolUse, error or aborted.
	// +kubebuilder:validation:MaxLength=32
	Reason string `json:"reason"`
}

// MaxDegradedSeqs caps each list of degraded seqs kept in status, so a badly
// degraded Session cannot grow its object without bound.
const MaxDegradedSeqs = 20

// DegradedSeqs lists the seqs of degraded messages by cause, each list
// capped at MaxDegradedSeqs (the counts in ReplaySummary stay exact).
type DegradedSeqs struct {
	// Kind: replay state written by another adapter kind.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Kind []int64 `json:"kind,omitempty"`
	// Version: replay state of another version, such as the legacy flat form.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Version []int64 `json:"version,omitempty"`
	// Malformed: replay state that could not be read.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Malformed []int64 `json:"malformed,omitempty"`
	// Shape: per-block entries that no longer match the message's content.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Shape []int64 `json:"shape,omitempty"`
}

// RefusedCounts count refused blocks by the provider's reason.
type RefusedCounts struct {
	// PrefixBindingMismatch: the conversation before the block differs
	// from the one it was produced under (a compaction, a context edit, a
	// changed system prompt).
	// +optional
	PrefixBindingMismatch int64 `json:"prefixBindingMismatch,omitempty"`
	// ModelBindingMismatch: the block was produced by a model whose
	// reasoning the requested model may not read.
	// +optional
	ModelBindingMismatch int64 `json:"modelBindingMismatch,omitempty"`
	// OrganizationBindingMismatch: produced under another organization.
	// +optional
	OrganizationBindingMismatch int64 `json:"organizationBindingMismatch,omitempty"`
	// EndUserBindingMismatch: produced for another end user.
	// +optional
	EndUserBindingMismatch int64 `json:"endUserBindingMismatch,omitempty"`
	// Other: a reason this version does not know.
	// +optional
	Other int64 `json:"other,omitempty"`
	// Unmapped counts the refusals replay could not map to a block of the
	// transcript (the request was not laid out as replay lays it out).
	// +optional
	Unmapped int64 `json:"unmapped,omitempty"`
	// Dropped counts the refused blocks the transcript leaves out
	// (spec.adapter.refusedBlocks: Drop).
	// +optional
	Dropped int64 `json:"dropped,omitempty"`
}

// RefusedSeqs lists the seqs of messages with refused blocks by reason,
// the first 20 of each.
type RefusedSeqs struct {
	// +kubebuilder:validation:MaxItems=20
	// +optional
	PrefixBindingMismatch []int64 `json:"prefixBindingMismatch,omitempty"`
	// +kubebuilder:validation:MaxItems=20
	// +optional
	ModelBindingMismatch []int64 `json:"modelBindingMismatch,omitempty"`
	// +kubebuilder:validation:MaxItems=20
	// +optional
	OrganizationBindingMismatch []int64 `json:"organizationBindingMismatch,omitempty"`
	// +kubebuilder:validation:MaxItems=20
	// +optional
	EndUserBindingMismatch []int64 `json:"endUserBindingMismatch,omitempty"`
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Other []int64 `json:"other,omitempty"`
}

// ReplaySummary summarises the last replay of the transcript.
type ReplaySummary struct {
	// ThroughSeq is the last seq the transcript was built through.
	ThroughSeq int64 `json:"throughSeq"`
	// Adapter the transcript was replayed for.
	// +optional
	Adapter Adapter `json:"adapter,omitempty"`
	// Native counts assistant messages replayed with their provider metadata.
	Native int64 `json:"native"`
	// Foreign counts assistant messages replayed provider-neutral.
	Foreign int64 `json:"foreign"`
	// Degraded counts the foreign messages whose replay state was unusable.
	Degraded int64 `json:"degraded"`
	// OrphanToolResults counts the tool results left out of the transcript
	// because they answer no open tool call (their call was aborted, errored
	// or already answered, or a user message came between): a provider
	// rejects a result whose call is not in the request.
	// +optional
	OrphanToolResults int64 `json:"orphanToolResults,omitempty"`
	// DegradedSeqs lists the degraded messages by cause (capped).
	// +optional
	DegradedSeqs DegradedSeqs `json:"degradedSeqs,omitempty"`
	// ContextEventsNotApplied counts the context events (compactions,
	// context edits, inserted context) replay could not apply: the
	// transcript goes on as if they were not there, and a
	// ContextEventNotApplied Event says what replay did instead. They are
	// not degraded messages.
	// +optional
	ContextEventsNotApplied int64 `json:"contextEventsNotApplied,omitempty"`
	// ContextEventSeqs lists the seqs of those events (capped).
	// +kubebuilder:validation:MaxItems=20
	// +optional
	ContextEventSeqs []int64 `json:"contextEventSeqs,omitempty"`
	// Refused counts the thinking blocks the provider refused (dropped
	// from a request because their signature no longer matches the model
	// or the conversation before them, as the provider reported and pi-ai
	// recorded on the response), by the provider's reason. The transcript
	// keeps them, as pi does; a ReplayStateRefused Event names each.
	// +optional
	Refused RefusedCounts `json:"refused,omitempty"`
	// RefusedSeqs lists the seqs of the messages whose blocks were
	// refused, by reason (capped).
	// +optional
	RefusedSeqs RefusedSeqs `json:"refusedSeqs,omitempty"`
	// ContextMessages is how many messages the stored transcript holds:
	// what the next request is built from, which after a compaction is
	// less than the log's history.
	// +optional
	ContextMessages int64 `json:"contextMessages,omitempty"`
	// LastCompactionSeq is the seq of the last compaction the transcript
	// starts from.
	// +optional
	LastCompactionSeq *int64 `json:"lastCompactionSeq,omitempty"`
	// Compactions and ContextEdits count the compactions and context edits
	// replayed.
	// +optional
	Compactions int64 `json:"compactions,omitempty"`
	// +optional
	ContextEdits int64 `json:"contextEdits,omitempty"`
}

// WorkerRun is one assembly or replay run over a Session's log.
type WorkerRun struct {
	// Task is assemble or replay.
	// +kubebuilder:validation:Enum=assemble;replay
	Task string `json:"task"`
	// Name of the run: the Session, the task and a hash of what the run
	// catches up with.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Pod is the worker pod doing the run (pod worker mode), once it has
	// run for a second.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Pod string `json:"pod,omitempty"`
	// Failures counts the failed attempts of this run so far.
	// +optional
	Failures int32 `json:"failures,omitempty"`
	// Message says why the last attempt failed.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// FailedAttempt identifies the last failed attempt (in pod mode, the
	// lease that failed), so that each failure is counted once.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	FailedAttempt string `json:"failedAttempt,omitempty"`
	// RetryAt is when the run is attempted again after a failure.
	// +optional
	RetryAt *metav1.Time `json:"retryAt,omitempty"`
	// Trigger is what the failures are counted under: the Session's
	// generation, a digest of the run's command line and the last nudge; a
	// new one gives the run its attempts afresh.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Trigger string `json:"trigger,omitempty"`
}

// SessionStatus is the observed state of a Session, summarising its log.
type SessionStatus struct {
	// ObservedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Location is where the log lives: the store's name and the log's root
	// in it.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Location string `json:"location,omitempty"`
	// Manifest is the digest of the Session's manifest as the manager last
	// wrote it beside the log (session.json, what `turnlog adopt` rebuilds
	// the Session from), so that it is written again only when it changes.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Manifest string `json:"manifest,omitempty"`
	// HeadSeq is the seq of the last event in the log; absent for an empty log.
	// +optional
	HeadSeq *int64 `json:"headSeq,omitempty"`
	// Turns is the number of turns the log has started.
	// +optional
	Turns int64 `json:"turns,omitempty"`
	// LastTurnEnd is the most recent turn/end event.
	// +optional
	LastTurnEnd *TurnEnd `json:"lastTurnEnd,omitempty"`
	// LastAppendTime is when the controller first saw the log's current
	// head, or was last nudged (turnlog.dev/requested-at), whichever is
	// later. The longer a log has been quiet, the less often the controller
	// looks at it without a nudge (see --max-poll-interval).
	// +optional
	LastAppendTime *metav1.MicroTime `json:"lastAppendTime,omitempty"`
	// ExpiresAt is when spec.deleteAfterIdle deletes the Session if its
	// log has no append before: status.lastAppendTime (or, before the
	// first, the Session's creation) plus spec.deleteAfterIdle. Absent
	// without spec.deleteAfterIdle.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// AssembledThroughSeq is the last seq whose responses are assembled.
	// +optional
	AssembledThroughSeq *int64 `json:"assembledThroughSeq,omitempty"`
	// EnvelopesDiscarded counts responses whose replay envelope assembly
	// discarded because it did not line up with the streamed blocks.
	// +optional
	EnvelopesDiscarded int64 `json:"envelopesDiscarded,omitempty"`
	// Replay summarises the last replay.
	// +optional
	Replay *ReplaySummary `json:"replay,omitempty"`
	// Worker is the worker run the controller waits for, or the last one
	// that failed; absent when no work is outstanding.
	// +optional
	Worker *WorkerRun `json:"worker,omitempty"`
	// Conditions: Ready, Assembled, ReplayDegraded.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Session is one agent conversation whose turn log lives in object storage.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sess,categories=turnlog
// +kubebuilder:printcolumn:name="Head",type=integer,JSONPath=`.status.headSeq`,description="Seq of the last event in the log"
// +kubebuilder:printcolumn:name="Turns",type=integer,JSONPath=`.status.turns`
// +kubebuilder:printcolumn:name="Last End",type=string,JSONPath=`.status.lastTurnEnd.reason`,description="Reason the last turn ended"
// +kubebuilder:printcolumn:name="Degraded",type=integer,JSONPath=`.status.replay.degraded`,description="Messages replayed without their provider metadata"
// +kubebuilder:printcolumn:name="Context",type=integer,JSONPath=`.status.replay.contextMessages`,priority=1,description="Messages the next request is built from"
// +kubebuilder:printcolumn:name="Compacted At",type=integer,JSONPath=`.status.replay.lastCompactionSeq`,priority=1,description="Seq of the last compaction"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Session struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the Session; `spec: {}` takes every
	// default.
	// +required
	Spec   SessionSpec   `json:"spec"`
	Status SessionStatus `json:"status,omitempty"`
}

// SessionList is a list of Sessions.
// +kubebuilder:object:root=true
type SessionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Session `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Session{}, &SessionList{})
}

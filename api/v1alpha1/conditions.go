package v1alpha1

// Condition types and reasons set by the turnlog controllers. Reasons are
// CamelCase and stable so that alerts and scripts can match on them.
const (
	// ConditionReady is True when the Session's log is readable and its
	// derived data (assembly, replay) is current with the log head.
	ConditionReady = "Ready"
	// ConditionAssembled is True when every finished response through the
	// head is assembled.
	ConditionAssembled = "Assembled"
	// ConditionReplayDegraded is True when the last replay degraded at least
	// one message to provider-neutral form.
	ConditionReplayDegraded = "ReplayDegraded"

	// ConditionSucceeded is the run-to-completion condition of a
	// SessionFork: Unknown while in progress, then True or False.
	ConditionSucceeded = "Succeeded"
)

// SessionFork Succeeded reasons.
const (
	// ReasonForking: the fork is in progress.
	ReasonForking = "Forking"
	// ReasonForked: the child Session exists with the source's prefix.
	ReasonForked = "Forked"
	// ReasonTurnInProgress: the anchor lies in a turn that has not ended
	// yet; the fork completes when its turn/end arrives.
	ReasonTurnInProgress = "TurnInProgress"
	// ReasonSourceNotFound: the source Session does not exist.
	ReasonSourceNotFound = "SourceNotFound"
	// ReasonSourceDeleting: the source Session is being deleted; a fork
	// started before it was deleted completes, one applied after does not.
	ReasonSourceDeleting = "SourceDeleting"
	// ReasonAnchorBeyondHead: the anchor is past the last event of the
	// source's log.
	ReasonAnchorBeyondHead = "AnchorBeyondHead"
	// ReasonTargetExists: a Session with the target name exists and is not
	// this fork's child.
	ReasonTargetExists = "TargetExists"
	// ReasonInvalidAtSeq: atSeq could not be parsed (normally refused by
	// the API server already).
	ReasonInvalidAtSeq = "InvalidAtSeq"
	// ReasonInvalidTarget: the API server refused the child Session the
	// fork would create (e.g. a label it does not accept).
	ReasonInvalidTarget = "InvalidTarget"
	// ReasonForkQueued: the fork waits for the manager to have a copy
	// slot free (--fork-copies) or for the namespace's other forks to
	// finish copying (--namespace-fork-copies); it starts on its own.
	ReasonForkQueued = "ForkQueued"
)

// SessionFork status.prefix values.
const (
	// PrefixReferenced: the child refers to the source's segments.
	PrefixReferenced = "Referenced"
	// PrefixCopied: the child holds a copy of the source's prefix.
	PrefixCopied = "Copied"
)

// Labels and annotations turnlog puts on objects.
const (
	// LabelForkSource names the source Session on a forked child.
	LabelForkSource = "turnlog.dev/fork-source"
	// LabelFork names the SessionFork that created a child Session.
	LabelFork = "turnlog.dev/fork"
	// LabelShard names the shard whose manager (turnlog manager
	// --shard=NAME) reconciles a Session or SessionFork. The admission
	// policy of config/shards sets it when the object is created; only an
	// operator allowed to update sessions/shard changes it (config/shards'
	// turnlog-shard-move refuses anyone else; docs/scaling.md).
	LabelShard = "turnlog.dev/shard"
	// AnnotationRequestedAt nudges the Session controller to look at the log
	// now (set by `turnlog import` and `turnlog append` after a write).
	AnnotationRequestedAt = "turnlog.dev/requested-at"
	// AnnotationTraceLineage is set by the fork controller on a child
	// Session: whose turns its log starts with, as space-separated
	// UID:SEQ entries, its first source's first, each Session's turns
	// going through SEQ. It says whose trace holds the turn a fork was cut
	// at (docs/observability.md, "Traces"), and nothing else reads it.
	AnnotationTraceLineage = "turnlog.dev/trace-lineage"
)

// Session condition reasons.
const (
	// ReasonCurrent: status and derived data are current with the log.
	ReasonCurrent = "Current"
	// ReasonEmptyLog: the log has no events yet.
	ReasonEmptyLog = "EmptyLog"
	// ReasonWorkPending: a worker run is scheduled or running to catch up
	// with the log.
	ReasonWorkPending = "WorkPending"
	// ReasonSeeding: a forked Session whose log is still being copied from
	// its source.
	ReasonSeeding = "Seeding"
	// ReasonStoreUnavailable: the object store could not be read; the
	// controller retries. The message is stable; the store's own error is
	// in the manager's log.
	ReasonStoreUnavailable = "StoreUnavailable"
	// ReasonStoreNotFound: spec.storage.store names no store configured on
	// the manager; the message lists the configured ones.
	ReasonStoreNotFound = "StoreNotFound"
	// ReasonWorkQueued: a worker run waits to start because the namespace
	// has as many runs going as the manager allows one namespace
	// (--namespace-worker-runs), or, with local workers, the manager has
	// as many as it runs at once (--local-worker-runs). It starts on its
	// own when one ends.
	ReasonWorkQueued = "WorkQueued"
	// ReasonObjectRefused: the Session's root in a file:// store holds a
	// symbolic link or a special file (a FIFO, a device, a socket) where a
	// directory or an object of the log or of its derived data should be.
	// The store neither follows nor opens it; the message names its key.
	// Also: the log's references manifest (a fork's, written by the
	// manager alone) is not one the manager wrote, or what it refers to
	// is gone; the message names the object.
	ReasonObjectRefused = "ObjectRefused"
	// ReasonWorkerFailed: a worker run failed; it is retried with backoff.
	ReasonWorkerFailed = "WorkerFailed"
	// ReasonWorkerFailedPermanently: a worker run failed as many times as
	// the manager allows (--worker-max-failures); it is not retried until
	// the Session is nudged (turnlog.dev/requested-at) or its spec changes.
	ReasonWorkerFailedPermanently = "WorkerFailedPermanently"
	// ReasonDeletionBlocked: the Session is being deleted with retention
	// Delete and its log cannot be deleted yet; the controller retries
	// until --deletion-timeout, then releases the Session and leaves the
	// log in place.
	ReasonDeletionBlocked = "DeletionBlocked"
	// ReasonAssembled: every finished turn is assembled.
	ReasonAssembled = "Assembled"
	// ReasonAssemblyPending: turns ended that are not assembled yet.
	ReasonAssemblyPending = "AssemblyPending"
	// ReasonMessagesDegraded: replay used at least one message
	// provider-neutral because its replay state was unusable.
	ReasonMessagesDegraded = "MessagesDegraded"
	// ReasonNoneDegraded: every message's replay state was usable.
	ReasonNoneDegraded = "NoneDegraded"
	// ReasonReplayPending: the transcript has not been replayed through the
	// last turn yet.
	ReasonReplayPending = "ReplayPending"
)

// Event reasons, as listed by
// `kubectl get events --field-selector reason=ReplayDegraded`.
const (
	// EventReplayDegraded (Warning, on the Session): one message was replayed
	// provider-neutral; the note names its seq, cause and adapter.
	EventReplayDegraded = "ReplayDegraded"
	// EventEnvelopeDiscarded (Warning, on the Session): assembly discarded a
	// response's replay envelope that did not line up with its blocks.
	EventEnvelopeDiscarded = "EnvelopeDiscarded"
	// EventMessageTooLarge (Warning, on the Session, field log[<seq>]): a
	// response streamed more than a message may hold (8 MiB of text,
	// thinking and tool arguments); its content is left out of the
	// transcript and its message says so.
	EventMessageTooLarge = "MessageTooLarge"
	// EventCheckpointRejected (Warning, on the Session): a worker checkpoint
	// beside the log could not be true of the log (too large, unreadable,
	// or past its head); it is ignored and the work done again.
	EventCheckpointRejected = "CheckpointRejected"
	// EventAssembled (Normal, on the Session): an assembly run finished.
	EventAssembled = "Assembled"
	// EventReplayed (Normal, on the Session): a replay run finished.
	EventReplayed = "Replayed"
	// EventContextCompacted (Normal, on the Session): a replay run applied
	// a compaction; the note names its seq and the context's size after it.
	EventContextCompacted = "ContextCompacted"
	// EventContextEdited (Normal, on the Session): a replay run applied
	// context edits to earlier messages.
	EventContextEdited = "ContextEdited"
	// EventContextEventNotApplied (Warning, on the event's seq): replay
	// could not apply a context event (an edit whose replacement does not
	// fit the message, say); the note says what could not be applied and
	// what replay did instead.
	EventContextEventNotApplied = "ContextEventNotApplied"
	// EventReplayStateRefused (Warning, on the refused message's seq): the
	// provider dropped a thinking block from a request because its
	// signature no longer matched; the note names the block, the reason,
	// the provider, the block's path in the request and the response that
	// reported it. A refusal replay could not map to a block is raised on
	// the seq of the response that reported it.
	EventReplayStateRefused = "ReplayStateRefused"
	// EventWorkerFailed (Warning, on the Session): a worker run failed.
	EventWorkerFailed = "WorkerFailed"
	// EventWorkerFailedPermanently (Warning, on the Session): a worker run
	// reached the failure limit and is not retried.
	EventWorkerFailedPermanently = "WorkerFailedPermanently"
	// EventLogOrphaned (Warning, on the Session): the Session was deleted
	// with retention Delete, but its log could not be deleted within
	// --deletion-timeout and was left in the store; the note names where.
	EventLogOrphaned = "LogOrphaned"
	// EventOrphanedLogDeleted (Normal, on the manager's record of an
	// orphaned log, a ConfigMap in its namespace): the orphan sweep
	// deleted a log LogOrphaned had left in the store.
	EventOrphanedLogDeleted = "OrphanedLogDeleted"
	// EventObjectRefused (Warning, on the Session): raised once per
	// refusal, with the Ready condition's message.
	EventObjectRefused = "ObjectRefused"
	// EventWorkQueued (Normal, on the Session): a worker run waits for a
	// slot (see ReasonWorkQueued); raised once per run.
	EventWorkQueued = "WorkQueued"
	// EventThrottled (Warning, on a Session or SessionFork): the object
	// waited in the manager's queue because its namespace had used its
	// share (--namespace-concurrent-reconciles, --namespace-reconcile-rate);
	// the note says how long. At most one a minute per namespace and
	// controller.
	EventThrottled = "Throttled"
	// EventForkQueued (Normal, on the SessionFork): the fork waits for a
	// copy slot (see ReasonForkQueued); raised once per fork.
	EventForkQueued = "ForkQueued"
	// EventReconcileOverdue (Warning, on a Session or SessionFork): a
	// reconcile ran past --reconcile-deadline and its grace without ending;
	// the manager fails its liveness check until it does.
	EventReconcileOverdue = "ReconcileOverdue"
	// EventForked (Normal, on the SessionFork): the child Session is seeded.
	EventForked = "Forked"
	// EventForkFailed (Warning, on the SessionFork): the fork failed for good.
	EventForkFailed = "ForkFailed"
	// EventExpired: spec.deleteAfterIdle passed with no append; the
	// manager deleted the Session (its retention applies to the log).
	EventExpired = "Expired"
)

// More labels and the finalizer.
const (
	// LabelSession holds the UID of the Session a worker Job works for (a
	// UID, unlike a name, always fits in a label value).
	LabelSession = "turnlog.dev/session"
	// LabelTask is the worker task of a Job: assemble or replay.
	LabelTask = "turnlog.dev/task"
	// FinalizerRetention holds a Session until its objects in storage are
	// deleted or retained according to spec.retention.
	FinalizerRetention = "turnlog.dev/retention"
)

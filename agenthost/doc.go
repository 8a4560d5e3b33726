// Package agenthost is what an agent host — a process that talks to a model
// provider on behalf of a conversation — needs to keep a turnlog Session:
// append the raw events of each turn to the Session's log as they stream,
// and read back the transcript turnlog's workers replayed, to build the next
// request (or a fork's first request) without re-running replay.
//
// A host opens the object store the logs live in with OpenStore, using its
// own credentials, and then a Session's log either by Location (namespace,
// name and uid of the Session) or, with a Kubernetes client, by the
// Session's name (Store.OpenSession). An Appender batches a live stream into
// segments: one every flush interval (100 ms by default), and one at every
// response/finish and turn/end, so a finished response is durable before the
// host moves on. Segments are created if absent and retried with their
// writer token, so what an Appender acknowledges is in the log exactly once,
// whatever the store's failures; docs/log-format.md ("Storage layout")
// describes the protocol.
//
// Log.Transcript returns the messages the workers stored for a target,
// through the last turn/end they replayed, byte for byte what
// `turnlog replay` prints for the same log; Log.WaitTranscript waits until
// they have replayed through a seq. ReadPiSession turns a pi-coding-agent
// session file into events, ReadEvents reads a log file, and
// Store.ImportSession writes either as a Session's log, as `turnlog import`
// does. Store.Fork and ForkSession fork a Session; Log.Turns lists the
// turns a fork can cut at.
//
// The event builders (TurnStart, UserText, TextDelta, ResponseFinish, ...)
// take pi-ai shaped values, so a host does not write the log's JSON by hand.
package agenthost

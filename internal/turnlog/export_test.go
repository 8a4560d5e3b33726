package turnlog

// Test-only access to the two decoding paths, so benchmarks can compare the
// JSON libraries on the same target and the fuzzer can check the paths agree.

// WireEvent is the hot-path decoding target.
type WireEvent = wireEvent

// DecodeByType is DecodeEvent's careful path.
var DecodeByType = decodeByType

// ScanEnvelope is ParseReplayEnvelope's single-pass scanner; ParseEnvelope
// is its general path.
var (
	ScanEnvelope  = scanEnvelope
	ParseEnvelope = parseEnvelope
)

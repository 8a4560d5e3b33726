package sessionlog

// SetReadAhead sets how many segments Read fetches ahead (0: none) and
// returns a function that restores it.
func SetReadAhead(n int) (restore func()) {
	was := readAheadSegments
	readAheadSegments = n
	return func() { readAheadSegments = was }
}

// ReadAheadMaxBytes is the largest segment Read fetches ahead.
const ReadAheadMaxBytes = readAheadMaxBytes

// SetMergeBelow sets the size under which a prefix copy merges segments (0:
// never) and returns a function that restores it.
func SetMergeBelow(n int64) (restore func()) {
	was := mergeBelow
	mergeBelow = n
	return func() { mergeBelow = was }
}

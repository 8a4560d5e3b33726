package compare

import (
	"slices"
	"testing"
)

// Turns of the same number share a row; a turn one branch lacks, and the
// messages between turns, have one of their own, in log order.
func TestPairs(t *testing.T) {
	turns := func(numbers ...int64) []Turn {
		out := make([]Turn, len(numbers))
		for i, n := range numbers {
			out[i] = Turn{Turn: n}
		}
		return out
	}
	for _, c := range []struct {
		name string
		a, b []Turn
		want []Pair
	}{
		{"the same turns", turns(4, 5), turns(4, 5), []Pair{{0, 0}, {1, 1}}},
		{"one branch longer", turns(4), turns(4, 5, 6), []Pair{{0, 0}, {-1, 1}, {-1, 2}}},
		{"one branch empty", nil, turns(3), []Pair{{-1, 0}}},
		{"cut at different turns", turns(3, 4, 5), turns(5), []Pair{{0, -1}, {1, -1}, {2, 0}}},
		{"between turns alone", turns(0, 4), turns(4, 0, 5), []Pair{{0, -1}, {1, 0}, {-1, 1}, {-1, 2}}},
	} {
		if got := Pairs(c.a, c.b); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

package compare

// Pair is a turn of each branch that a reader puts side by side: indexes
// in A's and B's Side.Turns, -1 for none.
type Pair struct{ A, B int }

// Pairs lines up two branches' turns in log order: turns of the same
// number side by side; a turn only one branch has, or the messages
// between turns (Turn 0), beside nothing. It is how `kubectl turnlog
// diff` and the session browser put the branches in rows.
func Pairs(a, b []Turn) []Pair {
	var out []Pair
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b):
			out, i = append(out, Pair{i, -1}), i+1
		case i == len(a):
			out, j = append(out, Pair{-1, j}), j+1
		case a[i].Turn == b[j].Turn:
			out, i, j = append(out, Pair{i, j}), i+1, j+1
		case a[i].Turn == 0 || b[j].Turn != 0 && a[i].Turn < b[j].Turn:
			out, i = append(out, Pair{i, -1}), i+1
		default:
			out, j = append(out, Pair{-1, j}), j+1
		}
	}
	return out
}

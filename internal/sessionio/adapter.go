package sessionio

import (
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// The Session API and the log each have their Adapter: the API's carries
// the kubebuilder markers its CRD is generated from, the log's the replay
// rules (DropsRefused, Line, SameModel) and the only constants of its
// choices. Neither package may import the other (docs/development.md), so
// the two meet here, the one package that already speaks of both Sessions
// and logs; everything that crosses between a Session's spec or status and
// a replay target goes through Target and APIAdapter.
//
// Both are Go conversions, not field-by-field copies: they compile only
// while the two structs have the same fields, of the same types, in the
// same order, so a field added to one Adapter and not the other breaks the
// build rather than being silently dropped at the crossing.

// Target is the replay target a Session's spec.adapter (or a status's
// adapter) names.
func Target(a turnlogv1.Adapter) turnlog.Adapter { return turnlog.Adapter(a) }

// APIAdapter is the Session API's form of the target t, as a Session's
// spec or status holds it.
func APIAdapter(t turnlog.Adapter) turnlogv1.Adapter { return turnlogv1.Adapter(t) }

// Package outcome is how turnlog's reconcilers end a reconcile, in one
// vocabulary for both. controller-runtime takes a result and an error, but
// not both: given an error it ignores the result (and logs a warning), and
// requeues with its rate limiter's backoff. So each reconcile ends as
// exactly one of:
//
//   - Waiting: nothing is wrong; something will happen (a Job ends, a copy
//     slot frees, a turn ends, the next poll) and the object is looked at
//     again after a wait. Never an error.
//   - Stalled: the object cannot go on until someone acts (a store the
//     operator has not configured, a run that failed too often, a fork
//     whose source is gone); its status says what to do. Looked at again
//     only after a long wait or when it changes. Never an error.
//   - Transient: something failed that may work next time (the store timed
//     out, the API server refused a write): the error goes to
//     controller-runtime, which logs and counts it and requeues with
//     backoff.
//   - Failed: the object ended for good (a fork that cannot be made); a
//     terminal error, counted and never requeued.
package outcome

import (
	"errors"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Kind is how a reconcile ended.
type Kind int

// The kinds of Outcome.
const (
	Waiting Kind = iota
	Stalled
	Transient
	Failed
)

func (k Kind) String() string {
	switch k {
	case Waiting:
		return "waiting"
	case Stalled:
		return "stalled"
	case Transient:
		return "transient"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// Outcome is how one reconcile ended.
type Outcome struct {
	Kind Kind
	// After is when a Waiting or Stalled object is looked at again; zero:
	// only when it changes.
	After time.Duration
	// Err is what went wrong, for Transient and Failed.
	Err error
}

// Wait is a Waiting outcome looked at again after d.
func Wait(d time.Duration) Outcome { return Outcome{Kind: Waiting, After: d} }

// Stall is a Stalled outcome looked at again after d.
func Stall(d time.Duration) Outcome { return Outcome{Kind: Stalled, After: d} }

// Retry is a Transient outcome; a nil err is a Waiting one with no wait.
func Retry(err error) Outcome {
	if err == nil {
		return Outcome{Kind: Waiting}
	}
	return Outcome{Kind: Transient, Err: err}
}

// Fail is a Failed outcome.
func Fail(err error) Outcome { return Outcome{Kind: Failed, Err: err} }

// errNoCause stands in for a missing error, so that a Transient or Failed
// outcome is never mistaken for success.
var errNoCause = errors.New("reconcile failed without a cause")

// Result is what Reconcile returns for o: a result or an error, never both.
func (o Outcome) Result() (ctrl.Result, error) {
	switch o.Kind {
	case Transient:
		if o.Err == nil {
			return ctrl.Result{}, errNoCause
		}
		return ctrl.Result{}, o.Err
	case Failed:
		if o.Err == nil {
			return ctrl.Result{}, reconcile.TerminalError(errNoCause)
		}
		return ctrl.Result{}, reconcile.TerminalError(o.Err)
	}
	return ctrl.Result{RequeueAfter: o.After}, nil
}

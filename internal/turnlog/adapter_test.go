package turnlog_test

import (
	"reflect"
	"testing"

	"github.com/turnlog/turnlog/internal/turnlog"
)

// Each field an override sets replaces the Session's, and each it leaves
// empty keeps the Session's, whatever fields Adapter grows.
func TestAdapterOverridden(t *testing.T) {
	var session turnlog.Adapter
	sv := reflect.ValueOf(&session).Elem()
	for i := range sv.NumField() {
		sv.Field(i).SetString("session-" + sv.Type().Field(i).Name)
	}
	for i := range sv.NumField() {
		name := sv.Type().Field(i).Name
		var override turnlog.Adapter
		reflect.ValueOf(&override).Elem().Field(i).SetString("flag-" + name)
		got := reflect.ValueOf(session.Overridden(override))
		for j := range sv.NumField() {
			want := sv.Field(j).String()
			if j == i {
				want = "flag-" + name
			}
			if g := got.Field(j).String(); g != want {
				t.Errorf("override of %s: %s is %q, want %q", name, sv.Type().Field(j).Name, g, want)
			}
		}
	}
	if got := session.Overridden(turnlog.Adapter{}); got != session {
		t.Errorf("an empty override changed the target: %+v", got)
	}
}

// The choices of RefusedBlocks are the only ones CheckRefusedBlocks lets
// through, with the empty default; its error names them.
func TestCheckRefusedBlocks(t *testing.T) {
	for _, v := range append([]string{""}, turnlog.RefusedBlocksChoices...) {
		if err := turnlog.CheckRefusedBlocks(v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	err := turnlog.CheckRefusedBlocks("drop")
	if err == nil || err.Error() != `refusedBlocks "drop" is not "Keep" or "Drop"` {
		t.Errorf(`"drop": %v`, err)
	}
}

package ui

import (
	"encoding/json"
	"fmt"
	"io"
)

// eventStream writes Server-Sent Events; err is the first write error,
// after which the page is gone.
type eventStream struct {
	w     io.Writer
	flush func()
	err   error
}

func (s *eventStream) send(event string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		s.err = err
		return
	}
	if s.err == nil {
		_, s.err = fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, data)
		s.flush()
	}
}

func (s *eventStream) comment() {
	if s.err == nil {
		_, s.err = io.WriteString(s.w, ": keep-alive\n\n")
		s.flush()
	}
}

package pihost

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Block is one content block of a scripted reply.
type Block struct {
	Kind string // "thinking", "text", "tool_use"
	Text string // thinking or text; a tool call's JSON arguments
	Sig  string // a thinking block's signature
	ID   string // tool_use
	Name string // tool_use
}

// Reply is what the provider answers one request with.
type Reply struct {
	Blocks []Block
	Stop   string // end_turn, tool_use, max_tokens
	Status int    // an HTTP error instead of a stream
	// Hang: after the blocks, keep the stream open until the client goes
	// away (an abort, a killed process).
	Hang bool
	// Refuse are signatures of thinking blocks the provider refuses: as
	// Anthropic does with prefix_mismatch_behavior "drop_block", each such
	// block of the request is reported in the response's
	// input_transformations, thinking_dropped for prefix_binding_mismatch,
	// at its path in the request (messages.{i}.content.{j}).
	Refuse []string
}

// refusals are the input_transformations entries for the request's thinking
// blocks signed with one of sigs.
func refusals(body map[string]any, sigs []string) []any {
	var out []any
	msgs, _ := body["messages"].([]any)
	for i, m := range msgs {
		content, _ := m.(map[string]any)["content"].([]any)
		for j, c := range content {
			b, _ := c.(map[string]any)
			if sig, _ := b["signature"].(string); b["type"] == "thinking" && slices.Contains(sigs, sig) {
				out = append(out, map[string]any{"type": "thinking_dropped", "path": fmt.Sprintf("messages.%d.content.%d", i, j), "reason": "prefix_binding_mismatch"})
			}
		}
	}
	return out
}

// Provider is a fake Anthropic Messages API that streams scripted replies
// and keeps the requests it got.
type Provider struct {
	tb     testing.TB
	srv    *httptest.Server
	mu     sync.Mutex
	script []Reply
	bodies []map[string]any
	// Hanging receives when a Hang reply has sent its blocks.
	Hanging chan struct{}
	n       int
}

// NewProvider starts a provider on 127.0.0.1; it stops with the test.
func NewProvider(tb testing.TB) *Provider {
	p := &Provider{tb: tb, Hanging: make(chan struct{}, 8)}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	tb.Cleanup(p.srv.Close)
	return p
}

// URL is the provider's base URL.
func (p *Provider) URL() string { return p.srv.URL }

// Queue adds replies, given to the next requests in order.
func (p *Provider) Queue(r ...Reply) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.script = append(p.script, r...)
}

// Requests are the request bodies so far, in order.
func (p *Provider) Requests() []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.bodies)
}

// Pending is how many scripted replies are left.
func (p *Provider) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.script)
}

func (p *Provider) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/v1/messages") {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.bodies = append(p.bodies, body)
	if len(p.script) == 0 {
		p.mu.Unlock()
		p.tb.Errorf("fake provider: request %d with no reply scripted", len(p.bodies))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"no reply scripted"}}`)
		return
	}
	rp := p.script[0]
	p.script = p.script[1:]
	p.n++
	n := p.n
	p.mu.Unlock()

	if rp.Status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rp.Status)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"scripted failure"}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	send := func(typ string, v any) {
		data, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, data)
		fl.Flush()
	}
	model, _ := body["model"].(string)
	start := map[string]any{
		"id": fmt.Sprintf("msg_%03d", n), "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "usage": map[string]any{"input_tokens": 100 + n, "output_tokens": 0}}
	if dropped := refusals(body, rp.Refuse); len(dropped) > 0 {
		start["input_transformations"] = dropped
	}
	send("message_start", map[string]any{"type": "message_start", "message": start})
	for i, b := range rp.Blocks {
		switch b.Kind {
		case "thinking":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "thinking", "thinking": ""}})
			for _, piece := range pieces(b.Text) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "thinking_delta", "thinking": piece}})
			}
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "signature_delta", "signature": b.Sig}})
		case "text":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, piece := range pieces(b.Text) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": piece}})
			}
		case "tool_use":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}})
			for _, piece := range pieces(b.Text) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": piece}})
			}
		}
		if !rp.Hang {
			send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
		}
	}
	if rp.Hang {
		p.Hanging <- struct{}{}
		<-r.Context().Done()
		return
	}
	send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": rp.Stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 20 + n}})
	send("message_stop", map[string]any{"type": "message_stop"})
}

// pieces cuts s in three, so that every block streams as several deltas.
func pieces(s string) []string {
	if len(s) < 3 {
		return []string{s}
	}
	a, b := len(s)/3, 2*len(s)/3
	return []string{s[:a], s[a:b], s[b:]}
}

package ui

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/compare"
)

// Searching the Sessions list: by name, label, readiness and replay marks
// from what the list of Sessions already holds, and by the text of each
// Session's last user message, read from the end of its log alone and
// bounded per list (docs/ui.md, "Search").

const (
	// maxTextReads bounds the logs one list reads for a text search; the
	// Sessions past it are reported as not searched.
	maxTextReads = 50
	// textReadsAtOnce is how many of those logs are read at a time.
	textReadsAtOnce = 4
	// textReadTimeout bounds the read of one log's last turns.
	textReadTimeout = 10 * time.Second
	// turnsBackForText is how many turns back from the log's end a last
	// user message is looked for.
	turnsBackForText = 3
	// lastUserShown is how much of a last user message the list shows.
	lastUserShown = 160
	// maxCachedTexts bounds the last user messages a server keeps.
	maxCachedTexts = 10000
)

// sessionFilter is what the Sessions list is narrowed by: a part of the
// name, a label selector (the API server applies it), readiness, replay
// marks and a part of the last user message. Text matches ignore case
// and runs of white space.
type sessionFilter struct {
	name     string
	selector labels.Selector
	ready    string
	degraded bool
	refused  bool
	text     string
}

// parseFilter reads ?name=, ?label=KEY=VALUE[,...] (a label selector),
// ?ready=True|False|Unknown, ?degraded=1, ?refused=1 and ?text=.
func parseFilter(q url.Values) (sessionFilter, error) {
	f := sessionFilter{name: normalize(q.Get("name")), ready: q.Get("ready"), text: normalize(q.Get("text")),
		degraded: q.Get("degraded") != "", refused: q.Get("refused") != ""}
	switch f.ready {
	case "", "True", "False", "Unknown":
	default:
		return f, fmt.Errorf("ready=%q: want True, False or Unknown", f.ready)
	}
	if label := strings.TrimSpace(q.Get("label")); label != "" {
		sel, err := labels.Parse(label)
		if err != nil {
			return f, fmt.Errorf("label=%q: want KEY=VALUE, or a label selector as kubectl -l takes it: %v", label, err)
		}
		f.selector = sel
	}
	return f, nil
}

// normalize is text as it is matched: lower case, its runs of white
// space one space.
func normalize(text string) string {
	return strings.ToLower(strings.Join(strings.Fields(text), " "))
}

// matches reports whether a Session passes every part of the filter but
// the text (the label selector was applied by the API server).
func (f sessionFilter) matches(v sessionView) bool {
	return (f.name == "" || strings.Contains(strings.ToLower(v.Name), f.name)) &&
		(f.ready == "" || v.Ready == f.ready) &&
		(!f.degraded || v.Degraded > 0) &&
		(!f.refused || v.Refused > 0 || v.Dropped > 0)
}

// matchesText reports whether a last user message holds the filter's
// text.
func (f sessionFilter) matchesText(lastUser string) bool {
	return strings.Contains(normalize(lastUser), f.text)
}

// searchReport is what a text search read: the Sessions searched, those
// left out past maxTextReads, and those whose log could not be read, with
// the first reason.
type searchReport struct {
	Searched   int    `json:"searched"`
	Unsearched int    `json:"unsearched"`
	MaxReads   int    `json:"maxReads"`
	Failed     int    `json:"failed"`
	Error      string `json:"error,omitempty"`
}

// lastUserCache keeps each Session's last user message by its uid, for
// the head seq its status had when it was read: a Session whose head has
// not moved is not read again.
type lastUserCache struct {
	mu     sync.Mutex
	byUID  map[types.UID]cachedText
	remove []types.UID // in the order they were added
}

type cachedText struct {
	head int64
	text string
}

func (c *lastUserCache) get(uid types.UID, head int64) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.byUID[uid]
	return t.text, ok && t.head == head
}

func (c *lastUserCache) put(uid types.UID, head int64, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byUID == nil {
		c.byUID = map[types.UID]cachedText{}
	}
	if _, ok := c.byUID[uid]; !ok {
		c.remove = append(c.remove, uid)
	}
	c.byUID[uid] = cachedText{head: head, text: text}
	if len(c.remove) > maxCachedTexts {
		delete(c.byUID, c.remove[0])
		c.remove = c.remove[1:]
	}
}

func headOf(s *turnlogv1.Session) int64 {
	if s.Status.HeadSeq == nil {
		return -1
	}
	return *s.Status.HeadSeq
}

// searchLastUsers reads the last user message of each Session, from the
// cache or its log: at most s.textReads logs, textReadsAtOnce at a time.
func (s *Server) searchLastUsers(ctx context.Context, sessions []*turnlogv1.Session) (map[types.UID]string, searchReport) {
	texts := map[types.UID]string{}
	report := searchReport{MaxReads: s.textReads}
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, textReadsAtOnce)
	reads := 0
	for _, session := range sessions {
		if text, ok := s.lastUsers.get(session.UID, headOf(session)); ok {
			texts[session.UID] = text
			continue
		}
		if reads == s.textReads {
			report.Unsearched++
			continue
		}
		reads++
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			text, err := s.lastUser(ctx, session)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if report.Failed++; report.Error == "" {
					report.Error = fmt.Sprintf("%s/%s: %s", session.Namespace, session.Name, oneLine(err))
				}
				return
			}
			texts[session.UID] = text
		})
	}
	wg.Wait()
	report.Searched = len(texts)
	return texts, report
}

// lastUser is the text of the Session's last user message: the cache's
// while the Session's head has not moved, else read from its log.
func (s *Server) lastUser(ctx context.Context, session *turnlogv1.Session) (string, error) {
	head := headOf(session)
	if text, ok := s.lastUsers.get(session.UID, head); ok {
		return text, nil
	}
	ctx, cancel := context.WithTimeout(ctx, textReadTimeout)
	defer cancel()
	log, err := s.opts.Store.OpenSession(ctx, sessionInHand{Client: s.opts.Kube, session: session}, session.Namespace, session.Name)
	if err != nil {
		return "", err
	}
	text, err := lastUserText(ctx, log)
	if err != nil {
		return "", err
	}
	s.lastUsers.put(session.UID, head, text)
	return text, nil
}

// lastUserText is the text of the last user message in the log's last
// turnsBackForText turns, "" when they have none. It reads the segments
// that hold those turns, from the log's end backwards, and no other.
func lastUserText(ctx context.Context, log *agenthost.Log) (string, error) {
	before := int64(math.MaxInt64)
	for range turnsBackForText {
		first, found, text := int64(-1), false, ""
		for e, err := range log.LastTurns(ctx, before, 1) {
			if err != nil {
				return "", err
			}
			if first < 0 {
				first = e.Seq
			}
			if m, ok := e.UserMessage(); ok {
				found, text = true, compare.ContentText(m.Content)
			}
		}
		if found || first <= 0 {
			return text, nil
		}
		before = first
	}
	return "", nil
}

// sessionInHand answers a Get of its Session from the Session it holds,
// so that opening the log of a Session just listed asks the API server
// nothing more.
type sessionInHand struct {
	client.Client
	session *turnlogv1.Session
}

func (c sessionInHand) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if s, ok := obj.(*turnlogv1.Session); ok && key == client.ObjectKeyFromObject(c.session) {
		c.session.DeepCopyInto(s)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

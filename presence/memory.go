package presence

import (
	"context"
	"slices"
	"strings"
	"sync"
)

// MemoryStore keeps entries in the process: the store of the memory bus.
// Several Trackers in one process (instances on one bus.MemoryBroker) may
// share one. Entries never expire: they live in the process of the
// instance that holds their connections, and go with it.
type MemoryStore struct {
	mu     sync.Mutex
	topics map[string]*memTopic
}

type memTopic struct {
	clients map[string]Entry // client -> its entry
	users   map[string]int   // user -> its entries
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore { return &MemoryStore{topics: map[string]*memTopic{}} }

var _ Store = (*MemoryStore)(nil)

// Apply applies changes at once; it never fails.
func (s *MemoryStore) Apply(_ context.Context, changes []Change) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range changes {
		t := s.topics[c.Topic]
		if c.Leave {
			if t == nil {
				continue
			}
			e, ok := t.clients[c.Client]
			if !ok {
				continue
			}
			delete(t.clients, c.Client)
			if t.users[e.User]--; t.users[e.User] == 0 {
				delete(t.users, e.User)
			}
			if len(t.clients) == 0 {
				delete(s.topics, c.Topic)
			}
			continue
		}
		if t == nil {
			t = &memTopic{clients: map[string]Entry{}, users: map[string]int{}}
			s.topics[c.Topic] = t
		}
		if _, ok := t.clients[c.Client]; ok {
			continue
		}
		t.clients[c.Client] = c.Entry
		t.users[c.User]++
	}
	return nil
}

// Page lists entries in client id order. It sorts the topic's ids on each
// call: fine in one process, where topics are as large as one instance's
// connections.
func (s *MemoryStore) Page(_ context.Context, topic, cursor string, limit int) (Page, error) {
	limit = pageLimit(limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[topic]
	if t == nil {
		return Page{Clients: []Entry{}}, nil
	}
	ids := make([]string, 0, len(t.clients))
	for id := range t.clients {
		if id > cursor {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, strings.Compare)
	p := Page{Clients: make([]Entry, 0, min(limit, len(ids)))}
	for _, id := range ids[:min(limit, len(ids))] {
		p.Clients = append(p.Clients, t.clients[id])
	}
	if len(ids) > limit {
		p.Cursor = ids[limit-1]
	}
	return p, nil
}

// Stats counts topic's entries and users.
func (s *MemoryStore) Stats(_ context.Context, topic string) (Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[topic]
	if t == nil {
		return Stats{}, nil
	}
	return Stats{Clients: int64(len(t.clients)), Users: int64(len(t.users))}, nil
}

// pageLimit bounds a requested page size to 1..MaxPage.
func pageLimit(n int) int {
	if n <= 0 || n > MaxPage {
		return MaxPage
	}
	return n
}

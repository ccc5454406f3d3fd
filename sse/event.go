package sse

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/rtserver/rtserver/protocol"
)

// position is a history topic's place: its epoch and last offset seen.
type position struct {
	epoch  string
	offset uint64
}

// maxLastEventID bounds the Last-Event-ID a client may present: one entry
// per topic of a session, each at most a topic, an epoch and an offset.
const maxLastEventID = 64 << 10

// appendEventID appends an event id naming every history topic's
// position in the session (pos[i] is topics[i]'s; epoch "" for none):
// "offset:epoch:topic" entries joined by ",", in the order of the
// session's topics (a topic holds no ","; an epoch is checked to hold
// neither ":" nor "," before it is kept).
func appendEventID(b []byte, topics []string, pos []position) []byte {
	first := true
	for i, t := range topics {
		p := pos[i]
		if p.epoch == "" {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = strconv.AppendUint(b, p.offset, 10)
		b = append(b, ':')
		b = append(b, p.epoch...)
		b = append(b, ':')
		b = append(b, t...)
	}
	return b
}

// parseLastEventID reads an id appendEventID wrote, as a client sends it
// back in Last-Event-ID. Entries that do not parse are skipped (the topic
// is then subscribed afresh, which its subscribe result says); the id is
// the client's and may be anything.
func parseLastEventID(id string) map[string]position {
	if id == "" || len(id) > maxLastEventID {
		return nil
	}
	out := map[string]position{}
	for entry := range strings.SplitSeq(id, ",") {
		off, rest, ok := strings.Cut(entry, ":")
		if !ok {
			continue
		}
		epoch, topic, ok := strings.Cut(rest, ":")
		if !ok || !validEpoch(epoch) || protocol.CheckTopic(topic) != "" {
			continue
		}
		n, err := strconv.ParseUint(off, 10, 64)
		if err != nil {
			continue
		}
		out[topic] = position{epoch: epoch, offset: n}
	}
	return out
}

// validEpoch reports whether an epoch can be carried in an event id: not
// empty, short, and printable ASCII without the id's separators.
func validEpoch(e string) bool {
	if e == "" || len(e) > 64 {
		return false
	}
	for i := 0; i < len(e); i++ {
		c := e[i]
		if c <= ' ' || c > '~' || c == ':' || c == ',' {
			return false
		}
	}
	return true
}

// appendEvent appends one SSE event: its type (none: "message", what
// EventSource.onmessage gets), its id when not empty, and data, one
// "data:" line per line of it (a JSON value an application handler
// returned may hold line breaks; EventSource joins the lines with "\n",
// which is JSON whitespace).
func appendEvent(b []byte, event string, id []byte, data []byte) []byte {
	if event != "" {
		b = append(b, "event: "...)
		b = append(b, event...)
		b = append(b, '\n')
	}
	if id != nil {
		b = append(b, "id: "...)
		b = append(b, id...)
		b = append(b, '\n')
	}
	for {
		i := bytes.IndexAny(data, "\r\n")
		if i < 0 {
			break
		}
		b = append(b, "data: "...)
		b = append(b, data[:i]...)
		b = append(b, '\n')
		data = data[i+1:]
	}
	b = append(b, "data: "...)
	b = append(b, data...)
	return append(b, '\n', '\n')
}

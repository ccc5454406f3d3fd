package handshake

import (
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest display name a connection keeps, in bytes
// (docs/protocol.md, "Connecting").
const MaxNameLen = 64

// DisplayName is the display name a client states when it connects: the
// name query parameter of the upgrade (or event stream) request, spaces
// trimmed, cut to MaxNameLen bytes at a character boundary. A name that
// is not UTF-8 or holds a control character is no name (""). It is the
// client's own word, never checked against its user: presence shows it
// beside the user (docs/presence.md).
func DisplayName(r *http.Request) string {
	if r.URL == nil || !strings.Contains(r.URL.RawQuery, "name=") {
		return ""
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil && q == nil {
		return ""
	}
	return cleanName(q.Get("name"))
}

func cleanName(name string) string {
	name = strings.TrimSpace(name)
	if !utf8.ValidString(name) {
		return ""
	}
	for _, r := range name {
		if r < 0x20 || (r >= 0x7f && r < 0xa0) {
			return ""
		}
	}
	if len(name) > MaxNameLen {
		cut := MaxNameLen
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		name = strings.TrimSpace(name[:cut])
	}
	return name
}

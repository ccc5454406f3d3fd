package admithttp

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/rtserver/rtserver/message"
)

// Shared header values: net/http only reads them, so a shed answer sets
// them without allocating.
var (
	hdrJSON    = []string{"application/json"}
	hdrNoStore = []string{"no-store"}
	retryAfter [maxRetryAfterSecs + 1][]string
)

// maxRetryAfterSecs bounds the precomputed Retry-After values; longer
// hints are formatted per answer.
const maxRetryAfterSecs = 600

func init() {
	for i := range retryAfter {
		retryAfter[i] = []string{strconv.Itoa(i)}
	}
}

// shedder writes the answer to a shed request. The body's start, up to the
// reason, is fixed per class and per error word, so it is built once.
type shedder struct {
	overloaded  []byte // {"error":"OVERLOADED","class":"<name>","reason":
	rateLimited []byte // {"error":"RATE_LIMITED","class":"<name>","reason":
}

func newShedder(class string) shedder {
	name, _ := json.Marshal(class) // a string always marshals
	head := func(word string) []byte {
		return []byte(`{"error":"` + word + `","class":` + string(name) + `,"reason":`)
	}
	return shedder{overloaded: head("OVERLOADED"), rateLimited: head("RATE_LIMITED")}
}

// write answers a denial: 429 RATE_LIMITED when a per-key budget (RATE or
// COST) binds, else 503 OVERLOADED; Retry-After in whole seconds rounded
// up, at least 1; the body carries the class, the binding reason and the
// hint in milliseconds.
func (s *shedder) write(w http.ResponseWriter, d message.Decision) {
	status, head := http.StatusServiceUnavailable, s.overloaded
	if message.IsRateLimited(d.Reason) {
		status, head = http.StatusTooManyRequests, s.rateLimited
	}
	ms := d.RetryAfterMillis()
	secs := max((ms+999)/1000, 1)
	h := w.Header()
	h["Content-Type"] = hdrJSON
	h["Cache-Control"] = hdrNoStore
	if secs <= maxRetryAfterSecs {
		h["Retry-After"] = retryAfter[secs]
	} else {
		h["Retry-After"] = []string{strconv.FormatInt(secs, 10)}
	}
	w.WriteHeader(status)
	reason, _ := json.Marshal(d.Reason)
	body := make([]byte, 0, len(head)+len(reason)+32)
	body = append(body, head...)
	body = append(body, reason...)
	body = append(body, `,"retryAfterMs":`...)
	body = strconv.AppendInt(body, ms, 10)
	body = append(body, "}\n"...)
	_, _ = w.Write(body) // the client may be gone; nothing to do about it
}

package admithttp

import (
	"encoding/json"
	"net/http"

	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/message"
)

// shedder writes the answer to a shed request. The body's start, up to the
// reason, is fixed per class and per error word, so it is built once.
type shedder struct {
	overloaded  []byte // {"error":"OVERLOADED","class":"<name>","reason":
	rateLimited []byte // {"error":"RATE_LIMITED","class":"<name>","reason":
}

func newShedder(class string) shedder {
	name, _ := json.Marshal(class) // a string always marshals
	head := func(head string) []byte {
		return []byte(head + `,"class":` + string(name) + `,"reason":`)
	}
	return shedder{overloaded: head(retryhint.HeadOverloaded), rateLimited: head(retryhint.HeadRateLimited)}
}

// write answers a denial: 429 RATE_LIMITED when a per-key budget (RATE or
// COST) binds, else 503 OVERLOADED, through retryhint (Retry-After and the
// hint); the body also carries the class and the binding reason.
func (s *shedder) write(w http.ResponseWriter, d message.Decision) {
	status, head := http.StatusServiceUnavailable, s.overloaded
	if message.IsRateLimited(d.Reason) {
		status, head = http.StatusTooManyRequests, s.rateLimited
	}
	ms := d.RetryAfterMillis()
	reason, _ := json.Marshal(d.Reason)
	body := make([]byte, 0, len(head)+len(reason)+32)
	body = append(body, head...)
	body = append(body, reason...)
	body = retryhint.EndBody(body, ms)
	retryhint.WriteHTTP(w, status, ms, append(body, '\n'))
}

package publishrate

import (
	"time"

	"github.com/rtserver/rtserver/pressure"
)

// Slice is an instance's rate envelope (docs/cluster.md, "Rate
// envelopes"): its top topics and users over the last interval, and its
// subscriber counts. EncodeSlice encodes one exactly as an Aggregator
// sends it, so a load generator (cmd/rtbench) can speak for instances.
type Slice struct {
	InstanceID string
	TS         time.Time
	Topics     []pressure.TopicRate // BytesPerSec is carried too
	Users      []pressure.UserRate  // BytesPerSec is not carried
	Subjects   []SubjectCount
}

// EncodeSlice is s as sent on the rate channel, signed with secret (the
// fleet's publishRate.hmacSecret) when it is set.
func EncodeSlice(s Slice, secret []byte) ([]byte, error) {
	e := envelope{
		V:          envelopeVersion,
		InstanceID: s.InstanceID,
		TS:         s.TS.UnixMilli(),
		Slice:      make([]wireTopic, 0, len(s.Topics)),
		Users:      make([]wireUser, 0, len(s.Users)),
		Subs:       make([]wireSub, 0, len(s.Subjects)),
	}
	for _, t := range s.Topics {
		e.Slice = append(e.Slice, wireTopic{Topic: t.Topic, MessagesPerSec: t.MessagesPerSec, BytesPerSec: t.BytesPerSec})
	}
	for _, u := range s.Users {
		e.Users = append(e.Users, wireUser{User: u.User, MessagesPerSec: u.MessagesPerSec})
	}
	for _, c := range s.Subjects {
		e.Subs = append(e.Subs, wireSub(c))
	}
	return marshalEnvelope(&e, secret)
}

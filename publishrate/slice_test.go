package publishrate_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/publishrate"
)

// EncodeSlice writes the envelope docs/cluster.md documents, member for
// member, and signs it as "What sig covers" says: the HMAC-SHA256 of the
// label, one 0x00 byte and the bytes B of the envelope without sig, sent
// as B with its final '}' replaced by ,"sig":"<hex>"}. The expected bytes
// are built from the document, not from the encoder.
func TestEncodeSliceIsTheDocumentedEnvelope(t *testing.T) {
	s := publishrate.Slice{
		InstanceID: "node-a",
		TS:         time.UnixMilli(1_700_000_000_123),
		Topics:     []pressure.TopicRate{{Topic: "room:1", MessagesPerSec: 40, BytesPerSec: 400}},
		Users:      []pressure.UserRate{{User: "alice", MessagesPerSec: 40, BytesPerSec: 400}},
		Subjects:   []publishrate.SubjectCount{{Topic: "room:1", Count: 3}},
	}
	const body = `{"v":1,"instanceId":"node-a","ts":1700000000123,` +
		`"slice":[{"topic":"room:1","messagesPerSec":40,"bytesPerSec":400}],` +
		`"users":[{"user":"alice","messagesPerSec":40}],"subs":[{"topic":"room:1","count":3}]}`
	got, err := publishrate.EncodeSlice(s, nil)
	if err != nil || string(got) != body {
		t.Fatalf("unsigned:\n got %s, %v\nwant %s", got, err, body)
	}
	secret := []byte("fleet secret")
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("rtserver rate slice v1\x00" + body))
	want := body[:len(body)-1] + `,"sig":"` + hex.EncodeToString(mac.Sum(nil)) + `"}`
	if got, err := publishrate.EncodeSlice(s, secret); err != nil || string(got) != want {
		t.Fatalf("signed:\n got %s, %v\nwant %s", got, err, want)
	}
}
